"""A bulk reader throttled by what it read (PIP-211): charge after each read, then hold the
next read back while the limits are in debt."""

from __future__ import annotations

import threading
import time
from collections.abc import Sized
from typing import Callable, TypeVar

from ._client import ResourceGroupClient
from ._limiter import Reservation
from ._quota import NamespaceQuota

__all__ = ["ThrottledReader"]

T = TypeVar("T", bound=Sized)


class ThrottledReader:
    """Wraps reads whose size is known only once they are done (a file range, an object).

    `limits` is the job's `ResourceGroupClient` (in a task), or a namespace's limits.

    ``reader.read(lambda: source.read(n))`` waits until the previous reads are paid for, does
    the read, and charges its length as bytes (and one msg) against ``kind``. So a reader
    running ahead of the rate pauses between reads instead of being cut off mid-read. The
    wait is asked again at the rates in force as it goes: a worker's first read, charged at the
    trickle an idle process holds, waits only until the worker's share arrives.

    Counters, as PIP-211's offload metrics: `times_limited` (reads that had to wait),
    `throttled_s` (seconds waited in all), `max_window_bytes` (most bytes read in one window
    of `window_s`).
    """

    __slots__ = (
        "_clock",
        "_limits",
        "_lock",
        "_owed",
        "_sleep",
        "_window_bytes",
        "_window_start",
        "kind",
        "max_window_bytes",
        "throttled_s",
        "times_limited",
        "window_s",
    )

    def __init__(
        self,
        limits: ResourceGroupClient | NamespaceQuota,
        kind: str = "dispatch",
        *,
        window_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self._limits = limits
        self.kind = kind
        self.window_s = window_s
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._owed: Reservation | None = None  # the last read's charge
        self._window_start = clock()
        self._window_bytes = 0
        self.times_limited = 0
        self.throttled_s = 0.0
        self.max_window_bytes = 0

    def read(self, read: Callable[[], T], size: Callable[[T], int] | None = None) -> T:
        """Wait while in debt, read, charge what was read; returns what `read` returned."""
        owed = self._owed
        if owed is not None and owed.remaining() > 0:
            waited = self._quota().hold(self.kind, owed, self._sleep)
            with self._lock:
                self.times_limited += 1
                self.throttled_s += waited
        data = read()
        nbytes = size(data) if size is not None else len(data)
        # The reads before were reserved earlier, so they are clear once this one is.
        self._owed = self._quota().reserve(self.kind, 1, nbytes)
        now = self._clock()
        with self._lock:
            if now - self._window_start >= self.window_s:
                self._window_start, self._window_bytes = now, 0
            self._window_bytes += nbytes
            self.max_window_bytes = max(self.max_window_bytes, self._window_bytes)
        return data

    def _quota(self) -> NamespaceQuota:
        if isinstance(self._limits, ResourceGroupClient):
            self._limits = self._limits.quota(self.kind)  # once: this process's limits
        return self._limits
