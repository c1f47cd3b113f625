"""What one server process holds while it runs, as one typed object.

`app.main.create_app` builds it and `app.main.lifespan` closes it; endpoints take it as
`deps.StateDep`, and everything else holding the app reads it with `state_of(app)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.routing import BaseRoute

if TYPE_CHECKING:  # their modules import this one, for endpoints' `deps.StateDep`
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session, sessionmaker

    from app.config import Settings
    from app.metrics import Metrics
    from app.quota.cache import ReportCache
    from app.quota.changes import ChangeWatch
    from app.quota.counts import UsageCounter
    from app.quota.lanes import ReportLanes
    from app.readcache import GroupCache
    from app.request_quotas import RequestThrottle

_ATTRIBUTE = "app_state"


@dataclass(slots=True, eq=False)
class AppState:
    settings: Settings
    clock: Callable[[], float]
    """Seconds since the epoch; injectable for tests."""
    engine: Engine
    sessions: sessionmaker[Session]
    group_cache: GroupCache
    report_cache: ReportCache
    report_lanes: ReportLanes
    changes: ChangeWatch
    metrics: Metrics
    request_throttle: RequestThrottle
    usage_counter: UsageCounter
    """The units reported to this process, until written (`app.quota.counts`)."""
    writer: int
    """This process's random id in the usage counts it writes."""
    routes: list[BaseRoute] = field(default_factory=list)
    """The routes served, flat: the request limits find a body's route in them, and a 405
    lists the methods of a path."""
    last_expiry: float = 0.0
    """When this process last looked for silent reporters."""

    async def close(self) -> None:
        """Stop the change watch and close the database connections."""
        await self.changes.close()
        self.engine.dispose()


def attach(app: Starlette, state: AppState) -> None:
    setattr(app.state, _ATTRIBUTE, state)


def state_of(app: Starlette) -> AppState:
    state: AppState = getattr(app.state, _ATTRIBUTE)
    return state
