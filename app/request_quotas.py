"""Request-rate quotas per role (Kafka's KIP-124), enforced in each server process.

Each role's request rate is measured over a sampled window, as Kafka's ``Rate`` does: 11
samples of one second, the oldest dropped as time moves on. When the observed rate ``O``
exceeds the role's quota ``T``, the response is delayed by

    X = min((O - T) / T * W, W)

where ``W`` is the span the rate was measured over (at least one sample): the delay that
brings ``O * W / (W + X)`` back to ``T``, never more than the window. Quotas are per server
process, as Kafka's are per broker: with N processes behind a load balancer a role may send up
to N times its quota.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

SAMPLES = 11
SAMPLE_S = 1.0
FORGET_AFTER_S = 600.0  # a role quiet this long is forgotten (its rate has read 0 for minutes)


@dataclass(slots=True)
class SampledRate:
    """Events per second over the last `SAMPLES` samples of `SAMPLE_S` seconds (Kafka's Rate)."""

    started: float
    """When the first sample began: the sensor's creation."""
    counts: list[float] = field(default_factory=lambda: [0.0] * SAMPLES)
    current: int = 0
    """Index of the sample that `current_start` begins."""
    current_start: float | None = None
    recorded_at: float = 0.0

    def record(self, now: float, amount: float = 1.0) -> None:
        self._advance(now)
        self.counts[self.current] += amount
        self.recorded_at = now

    def measure(self, now: float) -> tuple[float, float]:
        """(events per second, the window ``W`` in seconds they were counted over)."""
        self._advance(now)
        assert self.current_start is not None
        oldest = max(self.started, self.current_start - (SAMPLES - 1) * SAMPLE_S)
        # The span the samples cover, and at least one sample. Kafka pads a young sensor's
        # window to ten samples, which lets a new client burst ten seconds' worth of its
        # quota unthrottled; here a burst is judged over the time it actually spans.
        window = max(now - oldest, SAMPLE_S)
        return sum(self.counts) / window, window

    def _advance(self, now: float) -> None:
        if self.current_start is None:
            self.current_start = now
            return
        elapsed = int((now - self.current_start) // SAMPLE_S)
        if elapsed <= 0:
            return
        for step in range(1, min(elapsed, SAMPLES) + 1):
            self.counts[(self.current + step) % SAMPLES] = 0.0
        self.current = (self.current + elapsed) % SAMPLES
        self.current_start += elapsed * SAMPLE_S


@dataclass(frozen=True, slots=True)
class RequestQuotas:
    """The configured quotas: a default for every role and overrides per role."""

    default: float | None = None
    roles: Mapping[str, float] = field(default_factory=dict)

    def of(self, role: str) -> float | None:
        return self.roles.get(role, self.default)


class RequestThrottle:
    """Measures each role's request rate and says how long to delay its response."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._rates: dict[str, SampledRate] = {}
        self._lock = threading.Lock()
        self.quotas = RequestQuotas()
        self._loaded_at = -math.inf

    def stale(self, max_age_s: float) -> bool:
        return self._clock() - self._loaded_at >= max_age_s

    def expire(self) -> None:
        """Forget the quotas' age: they are reloaded before the next request is judged."""
        self._loaded_at = -math.inf

    def update(self, quotas: RequestQuotas) -> None:
        self.quotas = quotas
        self._loaded_at = self._clock()

    def rates(self) -> dict[str, float]:
        """Each role's request rate now: it decays to 0 as a quiet role's samples age out,
        and a role quiet for `FORGET_AFTER_S` is forgotten."""
        now = self._clock()
        with self._lock:
            for role, rate in list(self._rates.items()):
                if now - rate.recorded_at > FORGET_AFTER_S:
                    del self._rates[role]
            return {role: rate.measure(now)[0] for role, rate in self._rates.items()}

    def record(self, role: str) -> tuple[float, float]:
        """Count one request of `role`; returns (throttle seconds, observed rate)."""
        now = self._clock()
        with self._lock:
            rate = self._rates.get(role)
            if rate is None:
                rate = self._rates[role] = SampledRate(started=now)
            rate.record(now)
            observed, window = rate.measure(now)
        quota = self.quotas.of(role)
        if quota is None or observed <= quota:
            return 0.0, observed
        return min((observed - quota) / quota * window, window), observed
