"""``/health``: liveness that includes the database, for load balancers and the image's check."""

from __future__ import annotations

from fastapi import APIRouter, Request
from sqlalchemy import text

from app.api import deps
from app.errors import ServiceUnavailable, responses

router = APIRouter(tags=["health"])


@router.get("/health", responses=responses(ServiceUnavailable))
async def health(request: Request) -> dict[str, str]:
    """Report whether the server and its database answer."""
    await deps.read(request, lambda session: session.execute(text("SELECT 1")))
    return {"status": "ok"}
