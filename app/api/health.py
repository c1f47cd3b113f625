"""``/health``: liveness that includes the database and its schema, for load balancers and the
image's check."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api import deps
from app.errors import ServiceUnavailable, responses
from app.schema_version import read_state

router = APIRouter(tags=["health"])


@router.get("/health", responses=responses(ServiceUnavailable))
async def health(request: Request) -> dict[str, str]:
    """Report whether the server and its database answer, and whether the database's schema
    is migrated to this server's (503 with the reason when it is behind)."""
    state = await deps.read(request, lambda session: read_state(session.connection()))
    if state.behind:
        raise ServiceUnavailable(state.describe())
    return {"status": "ok"}
