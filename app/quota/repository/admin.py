"""What the admin state says of a report: the generation, each namespace's group and rates,
a role's grants and the tenants' admins."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Select, bindparam, func, select

from app.models import (
    RATE_COLUMNS,
    DefaultResourceGroup,
    Namespace,
    NamespacePermission,
    ResourceGroup,
    Tenant,
    admin_generation,
)
from app.quota.repository.base import Queries
from app.quota.repository.sql import among, key_parameters, keys_in, pairs
from app.quota.types import NamespaceKey

_RATES = [getattr(ResourceGroup, column) for column in RATE_COLUMNS]


class AdminQueries(Queries):
    """Reports and their settings."""

    __slots__ = ()

    @staticmethod
    @functools.cache
    def _generation_sql() -> Select[int]:
        """The admin generation (`app.generation`): it changes on every admin write."""
        return admin_generation()

    def generation(self) -> int:
        """The admin generation: it changes on every write to groups, tenants, namespaces
        and the default group."""
        token: int = self._run(self._generation_sql()).scalar_one()
        return token

    @staticmethod
    @functools.cache
    def _namespaces_sql(postgresql: bool) -> Select[Any]:
        """(tenant, name, effective group, its six rates, its mode) of the keys given."""
        default_group = select(DefaultResourceGroup.resource_group).scalar_subquery()
        group = func.coalesce(Namespace.resource_group, Tenant.resource_group, default_group)
        namespaces = select(Namespace.tenant, Namespace.name, group, *_RATES, ResourceGroup.mode)
        if postgresql:
            # Joined from the keys rather than filtered by them: PostgreSQL then looks each
            # namespace and group up by its key, where a filter had it merge-join every group.
            keys = pairs()
            namespaces = namespaces.select_from(keys).join(
                Namespace, (Namespace.tenant == keys.c.tenant) & (Namespace.name == keys.c.name)
            )
        else:
            namespaces = namespaces.where(keys_in(False, Namespace.tenant, Namespace.name))
        return namespaces.join(Tenant, Tenant.name == Namespace.tenant).outerjoin(
            ResourceGroup, ResourceGroup.name == group
        )

    def effective(self, keys: Sequence[NamespaceKey]) -> Iterable[Any]:
        """(tenant, name, effective group, its six rates, its mode) of each namespace that
        exists."""
        statement = self._namespaces_sql(self.postgresql)
        return self._run(statement, key_parameters(self.postgresql, keys)).all()  # type: ignore[no-any-return]

    @staticmethod
    @functools.cache
    def _grants_sql(postgresql: bool) -> Select[str, str, list[str]]:
        """(tenant, namespace, actions) granted to a role on some of the keys."""
        permission = NamespacePermission
        return select(permission.tenant, permission.namespace, permission.actions).where(
            permission.role == bindparam("role"),
            keys_in(postgresql, permission.tenant, permission.namespace),
        )

    def grants(self, role: str, keys: Sequence[NamespaceKey]) -> Iterable[Any]:
        """(tenant, namespace, actions) that `role` is granted on those of `keys` it has."""
        parameters = {"role": role, **key_parameters(self.postgresql, keys)}
        return self._run(self._grants_sql(self.postgresql), parameters).all()  # type: ignore[no-any-return]

    @staticmethod
    @functools.cache
    def _tenant_admins_sql(postgresql: bool) -> Select[str, list[str]]:
        """(tenant, admin roles) of some tenants."""
        return select(Tenant.name, Tenant.admin_roles).where(
            among(postgresql, Tenant.name, "tenant_names")
        )

    def tenant_admins(self, tenants: Sequence[str]) -> Iterable[Any]:
        """(tenant, admin roles) of those of `tenants` that exist."""
        parameters = {"tenant_names": list(tenants)}
        return self._run(self._tenant_admins_sql(self.postgresql), parameters).all()  # type: ignore[no-any-return]
