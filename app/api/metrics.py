"""``/metrics``: Prometheus metrics of this server process, without a token (as Pulsar's)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Metrics in Prometheus' text format: groups, roles, requests and database errors."""
    registry = request.app.state.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
