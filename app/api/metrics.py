"""``/metrics``: Prometheus metrics of this server process.

Open by default, as Pulsar's; with RG_AUTHENTICATE_METRICS_ENDPOINT (Pulsar's
authenticateMetricsEndpoint) a token is required, of a superuser or of one of
RG_METRICS_ROLES (Pulsar's metricsRoles): 401 without a valid one, 403 for any other role.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import SQLAlchemyError

from app.api.deps import StateDep
from app.config import Settings
from app.errors import Forbidden
from app.services import resourcegroups
from app.state import AppState

logger = logging.getLogger(__name__)

PATH = "/metrics"

router = APIRouter(tags=["metrics"])


def protected_paths(settings: Settings) -> frozenset[str]:
    """The paths authentication covers besides the API's: this one when asked to."""
    return frozenset({PATH}) if settings.authenticate_metrics_endpoint else frozenset()


@router.get(PATH, response_class=Response)
def metrics(request: Request, state: StateDep) -> Response:
    """Metrics in Prometheus' text format: groups, roles, requests and database errors."""
    settings = state.settings
    # Set by authentication when it covers this path; with authentication disabled, everyone
    # is a superuser, as in Pulsar (whose setting needs authenticationEnabled too).
    principal = request.scope.get("principal")
    if principal is not None and not (
        principal.is_superuser or principal.role in settings.metrics_readers
    ):
        raise Forbidden("Only superusers and the metrics roles (RG_METRICS_ROLES) may read metrics")
    # A plain function, so run in the thread pool: at 100,000 groups the text is 130 MB,
    # whose writing must not hold up the reports the event loop is serving meanwhile.
    return Response(state.metrics.exposition(_observing(state)), media_type=CONTENT_TYPE_LATEST)


def _observing(state: AppState) -> list[str] | None:
    """The groups in observe mode; None while the database is away: the metrics, which
    count its errors, are still served, without the modes."""
    try:
        with state.sessions() as session:
            return resourcegroups.observing(session)
    except SQLAlchemyError as exc:
        logger.debug("metrics without the groups' modes: %s", exc)
        return None
