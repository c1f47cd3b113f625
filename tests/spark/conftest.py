from __future__ import annotations

import pytest


class FakeClock:
    """Monotonic nanoseconds that move only when a test moves them."""

    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        # Not zero, so that nothing can rely on time starting at 0.
        self.now_ns = start_ns

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, seconds: float) -> None:
        self.now_ns += round(seconds * 1_000_000_000)

    def sleep(self, seconds: float) -> None:
        """A sleep that passes fake time instead of real time."""
        self.advance(seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
