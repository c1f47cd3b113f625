"""A namespace's effective group, as the reports see it: its name, limits and quotas."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.models import DIMENSION_COLUMNS, RATE_COLUMN, RATE_COLUMNS
from app.quota.types import GroupQuotas, NamespaceKey
from app.schemas import GroupMode, ResourceGroupRead
from rgspark.wire import DIMENSIONS

_QUOTA_INDEX = [RATE_COLUMNS.index(RATE_COLUMN[dim]) for dim in DIMENSION_COLUMNS]
_LIMIT_FIELDS = tuple(ResourceGroupRead.model_fields)


@dataclass(frozen=True, slots=True)
class Effective:
    """A namespace's effective group, its configured rates, and what they hold each dimension to."""

    group: str | None
    limits: ResourceGroupRead | None
    quotas: GroupQuotas = (None,) * len(DIMENSIONS)
    limited: bool = False
    """Whether any dimension is limited."""
    mode: GroupMode = "enforce"
    """`app.models.GROUP_MODES`: the allocations are the same in either; only what the
    workers do with them differs, so the mode is in the answer, never in a plan."""


NO_GROUP = Effective(None, None)


class EffectiveRows:
    """`Effective` values from query rows (a group name, then its six rates and its mode),
    one per group: namespaces share them, and groups with the same rates share their
    limits."""

    def __init__(self) -> None:
        self.seen: dict[str, Effective] = {}
        self.limits: dict[tuple[int, ...], tuple[ResourceGroupRead, GroupQuotas]] = {}

    def of(self, group: str | None, rates: Sequence[Any]) -> Effective:
        if group is None:
            return NO_GROUP
        effective = self.seen.get(group)
        if effective is None:
            effective = self.seen[group] = self._effective(group, tuple(rates))
        return effective

    def _effective(self, group: str, columns: tuple[Any, ...]) -> Effective:
        *listed, mode = columns
        rates = tuple(listed)
        if rates[0] is None:  # the attachment names a group that is not there
            return Effective(group, None)
        known = self.limits.get(rates)
        if known is None:
            # Straight from the database's integer columns: nothing to validate.
            limits = ResourceGroupRead.model_construct(
                **dict(zip(_LIMIT_FIELDS, rates, strict=True))
            )
            quotas = tuple(
                float(rate) if (rate := rates[index]) > 0 else None for index in _QUOTA_INDEX
            )
            known = self.limits[rates] = (limits, quotas)
        limits, quotas = known
        return Effective(group, limits, quotas, any(quota is not None for quota in quotas), mode)


def parse_namespace(ref: str) -> NamespaceKey:
    tenant, _, namespace = ref.partition("/")
    return tenant, namespace
