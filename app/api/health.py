"""``/health``: liveness that includes the database, for load balancers and the image's check."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from app.api.deps import SessionDep
from app.errors import ServiceUnavailable, responses

router = APIRouter(tags=["health"])


@router.get("/health", responses=responses(ServiceUnavailable))
def health(*, session: SessionDep) -> dict[str, str]:
    """Report whether the server and its database answer."""
    session.execute(text("SELECT 1"))
    return {"status": "ok"}
