"""The PIP-82 draft's spellings of the canonical routes, served for older tooling.

The draft names the group path in the singular (``/admin/v2/resourcegroup``) and attaches with
``PUT``. Each alias calls the canonical endpoint and is marked deprecated in the OpenAPI document.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.routing import APIRoute

# (method, draft path, canonical route name)
DRAFT_ROUTES = (
    ("GET", "/admin/v2/resourcegroup", "list_resource_groups"),
    ("GET", "/admin/v2/resourcegroup/{rg}", "get_resource_group"),
    ("PUT", "/admin/v2/resourcegroup/{rg}", "put_resource_group"),
    ("DELETE", "/admin/v2/resourcegroup/{rg}", "delete_resource_group"),
    (
        "PUT",
        "/admin/v2/namespaces/{tenant}/{namespace}/resourcegroup/{rg}",
        "set_namespace_resource_group",
    ),
    ("PUT", "/admin/v2/tenants/{tenant}/resourcegroup/{rg}", "set_tenant_resource_group"),
)


def draft_alias_router(*canonical: APIRouter) -> APIRouter:
    routes = {
        route.name: route
        for router in canonical
        for route in router.routes
        if isinstance(route, APIRoute)
    }
    router = APIRouter(tags=["deprecated"])
    for method, path, name in DRAFT_ROUTES:
        route = routes[name]
        router.add_api_route(
            path,
            route.endpoint,
            methods=[method],
            status_code=route.status_code,
            responses=route.responses,
            summary=route.summary,
            description=f"Deprecated spelling of `{route.path}` from the PIP-82 draft.",
            name=f"{name}_draft_{method.lower()}",
            deprecated=True,
        )
    return router
