"""Logging a failure that repeats, such as the database being down, without flooding the log.

During an outage every worker fails every second (each request, each reload of the request
quotas): a line, let alone a traceback, for each would bury everything else. An `OutageLog`
writes one line when the failure starts, one every `repeat_s` while it lasts (with how many
it left out), and one when it ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

REPEAT_S = 60.0


class OutageLog:
    def __init__(
        self,
        logger: logging.Logger,
        failing: str,
        recovered: str,
        *,
        repeat_s: float = REPEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.failing = failing  # what failed, as the line starts: "could not reload ..."
        self.recovered = recovered  # the line when it works again
        self.repeat_s = repeat_s
        self.clock = clock
        self.down = False
        self._logged_at = 0.0
        self._left_out = 0
        # Requests fail and succeed in several threads at once: one of them logs each line.
        self._lock = threading.Lock()

    def failed(self, error: BaseException | None) -> None:
        """Another failure: logged if it starts an outage or `repeat_s` passed since the last
        line; otherwise only counted."""
        with self._lock:
            now = self.clock()
            if self.down and now - self._logged_at < self.repeat_s:
                self._left_out += 1
                return
            left_out = f" ({self._left_out} more since the last line)" if self._left_out else ""
            self.down = True
            self._logged_at = now
            self._left_out = 0
        self.logger.warning("%s: %s%s", self.failing, describe(error), left_out)

    def succeeded(self) -> None:
        """It worked: logged if that ends an outage."""
        if not self.down:  # the common case: a read of one attribute, no lock
            return
        with self._lock:
            if not self.down:
                return
            self.down = False
            self._left_out = 0
        self.logger.warning("%s", self.recovered)


def describe(error: BaseException | None) -> str:
    """The error's kind and the first line of its message: drivers' messages run to several
    lines of hints."""
    if error is None:
        return "unknown error"
    message = str(error).strip().partition("\n")[0]
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
