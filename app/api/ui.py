"""The dashboard at ``/ui/`` and the API docs at ``/docs`` and ``/redoc``, served offline.

Every file they load is in ``app/ui/`` (the browser libraries under ``vendor/``, fetched by
``scripts/vendor_ui_assets.py``), so they work on clusters without internet access. The
dashboard is static files calling the admin API with the operator's token, plus one endpoint
of its own: ``/ui/api/session``, what the token may see, which the admin API tells only
superusers (listing groups and tenants is theirs). None of it is in the OpenAPI document.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field
from sqlalchemy import select
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from app.access import Principal
from app.api import deps
from app.api.deps import CurrentPrincipal, StateDep
from app.models import Namespace, Tenant
from app.quota import history
from app.services import attachments, resourcegroups, tenants

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
FAVICON = "/ui/favicon.svg"
SWAGGER = "/ui/vendor/swagger-ui"
REDOC = "/ui/vendor/redoc"

# The dashboard loads nothing but its own files and talks to nothing but this server; the
# browser enforces it. Styles set from scripts (uPlot sizes its canvas so) are not inline
# styles in this policy's sense.
DASHBOARD_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    # Revalidated on every load (a 304 when unchanged): an upgraded server never runs with
    # a browser's cached copy of the previous version's scripts.
    "Cache-Control": "no-cache",
}


# Swagger UI and Redoc run inline scripts and styles of their own; what matters is that they
# fetch nothing from elsewhere (Redoc's side menu asks for its maker's logo from a CDN: the
# browser refuses it).
DOCS_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self' 'unsafe-inline'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; worker-src 'self' blob:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}


class DashboardFiles(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(DASHBOARD_HEADERS)
        return response


class DashboardSession(BaseModel):
    role: str = Field(description="The token's role.")
    superuser: bool
    tenants: list[str] = Field(description="The tenants it administers (all, for superusers).")
    resourceGroups: list[str] = Field(description="The ResourceGroups it may read.")
    usageResolutionSeconds: float = Field(description="Seconds between usage samples.")
    usageRetentionSeconds: float = Field(description="Seconds of usage history kept.")
    usageCompleteAfterSeconds: float = Field(
        description="How long after its moment a sample's usage is complete (until then null)."
    )


router = APIRouter(include_in_schema=False)


@router.get("/ui/api/session")
async def dashboard_session(
    request: Request, principal: CurrentPrincipal, state: StateDep
) -> DashboardSession:
    """The token's role, and the tenants and groups the dashboard shows it."""
    settings = state.settings
    tenant_names, groups = await deps.read(request, visible, principal)
    return DashboardSession(
        role=principal.role,
        superuser=principal.is_superuser,
        tenants=tenant_names,
        resourceGroups=groups,
        usageResolutionSeconds=settings.usage_history_resolution_seconds,
        usageRetentionSeconds=settings.usage_history_retention_seconds,
        usageCompleteAfterSeconds=history.complete_after_s(settings),
    )


def visible(session: deps.Session, principal: Principal) -> tuple[list[str], list[str]]:
    """The tenants ``principal`` administers and the groups it may read: those its tenants
    use (as `access.require_group_reader` lets tenant admins read them)."""
    if principal.is_superuser:
        return tenants.list_names(session), resourcegroups.list_names(session)
    administered = [
        tenant
        for tenant in session.scalars(select(Tenant).order_by(Tenant.name))
        if principal.role in tenant.admin_roles
    ]
    groups = {tenant.resource_group for tenant in administered if tenant.resource_group}
    own = select(Namespace.resource_group).where(
        Namespace.tenant.in_([tenant.name for tenant in administered]),
        Namespace.resource_group.is_not(None),
    )
    groups.update(group for group in session.scalars(own.distinct()) if group)
    # The default covers the namespaces with no group of their own in tenants with none.
    bare = [tenant.name for tenant in administered if tenant.resource_group is None]
    default = attachments.get_default(session) if bare else None
    if default is not None:
        uncovered = select(Namespace.name).where(
            Namespace.tenant.in_(bare), Namespace.resource_group.is_(None)
        )
        if session.scalar(uncovered.limit(1)) is not None:
            groups.add(default)
    return [tenant.name for tenant in administered], sorted(groups)


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "").rstrip("/")
    page = get_swagger_ui_html(
        openapi_url=root + (request.app.openapi_url or ""),
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{root}{SWAGGER}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{SWAGGER}/swagger-ui.css",
        swagger_favicon_url=root + FAVICON,
        oauth2_redirect_url=None,
        # No badge fetched from the public validator.
        swagger_ui_parameters={"validatorUrl": None},
    )
    page.headers.update(DOCS_HEADERS)
    return page


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "").rstrip("/")
    page = get_redoc_html(
        openapi_url=root + (request.app.openapi_url or ""),
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{REDOC}/redoc.standalone.js",
        redoc_favicon_url=root + FAVICON,
        with_google_fonts=False,
    )
    page.headers.update(DOCS_HEADERS)
    return page


# After the routes above: the mount answers every other path under /ui.
router.mount("/ui", DashboardFiles(directory=UI_DIR, html=True), name="ui")
