"""``/health``: liveness that includes the database and its schema, for load balancers and the
image's check."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api import deps
from app.errors import ServiceUnavailable, responses
from app.schema_version import SchemaState, read_state

router = APIRouter(tags=["health"])


def _schema_state(session: deps.Session) -> SchemaState:
    return read_state(session.connection())


@router.get("/health", responses=responses(ServiceUnavailable))
async def health(request: Request) -> dict[str, str]:
    """Report whether the server and its database answer, and whether the database's schema
    is migrated to this server's (503 with the reason when it is behind)."""
    state = await deps.read(request, _schema_state)
    if state.behind:
        raise ServiceUnavailable(state.describe())
    return {"status": "ok"}
