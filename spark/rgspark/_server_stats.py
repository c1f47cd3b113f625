"""A Spark Connect session's figures, counted by the admin server.

A Connect session has no accumulators, and its driver may not be reachable from the
executors; the admin server is, from both. So each worker process adds what its tasks
charged to a pending count, and sends it to ``POST /quota/v1/jobs/{job}/figures``: when a
helper's task ends (`ServerCount.flush`: `throttle`, `throttled_sink`, the wrapper of a
function given batches or rows as an iterator), so that an action's figures are complete
once it has returned; and every `FLUSH_S` from a daemon thread, for the functions Spark calls
without saying when their task ends (a Python UDF, ``applyInPandas``), whose last figures
thus arrive up to `FLUSH_S` after their action. The driver reads the sums back with
``GET /quota/v1/jobs/{job}/figures?kind=...``: the server adds up every worker's, and keeps
the last `rgspark.wire.KEPT_ACTIONS` actions.

A send that fails keeps its figures for the next one; a failure is logged at most once a
`WARN_EVERY_S`, never raised: figures never stop a task.

The pushback figures (``pushbacks``, ``pushbackS``) are sent only when some are not 0, and
read as 0 when an answer lacks them: a server that does not know them refuses a post that
carries them (400 or 422: a body it does not know), and the process then sends its figures
without them from then on, so that its rows still count.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from ._exceptions import RGSparkError, UnexpectedResponseError
from ._stats import Entry, Figures, ThrottleStats, add_entry, padded
from .wire import MAX_ACTIONS_PER_POST

if TYPE_CHECKING:
    from ._admin import AdminClient
    from ._client import ResourceGroupClient

__all__ = ["FLUSH_S", "ServerCount", "stats_on_server"]

logger = logging.getLogger("rgspark")

FLUSH_S = 0.5  # how often a worker process sends what its tasks charged since
WARN_EVERY_S = 60.0


def stats_on_server(client: ResourceGroupClient, kind: str) -> ThrottleStats:
    """Stats of a Spark Connect session: counted by `client`'s admin server."""
    return ThrottleStats(None, kind, server=ServerCount(client, kind))


class ServerCount:
    """Where `ThrottleStats` counts for a Spark Connect session: `client`'s job on its
    server, under `kind`. Pickled into tasks with the stats; each worker process sends what
    its tasks add (`_Pending`, one per job and kind)."""

    __slots__ = ("client", "kind")

    def __init__(self, client: ResourceGroupClient, kind: str) -> None:
        self.client = client
        self.kind = kind

    def add(self, action: str, entry: Entry) -> None:
        _pending(self.client, self.kind).add(action, entry)

    def flush(self) -> None:
        """Send what this process's tasks charged and has not sent yet: at a task's end."""
        pending = _registry.get(_key(self.client, self.kind))
        if pending is not None:
            pending.send()

    def read(self) -> Figures:
        """The job's figures for `kind`, summed by the server (on the driver)."""
        admin = self.client.admin()
        try:
            answer = admin.job_figures(self.client.job, self.kind)
        finally:
            admin.close()
        figures = Figures()
        try:
            figures.rows, figures.bytes = int(answer["rows"]), int(answer["bytes"])
            figures.held_s = float(answer["heldS"])
            figures.pushbacks, figures.pushback_s = _pushback_figures(answer)
            for action, part in answer["actions"].items():
                figures.actions[str(action)] = [
                    *(int(part["rows"]), int(part["bytes"]), float(part["heldS"])),
                    *(int(part["startMs"]) / 1000, int(part["endMs"]) / 1000),
                    *_pushback_figures(part),
                ]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UnexpectedResponseError(
                f"The admin server's figures of job {self.client.job} are not the API's: {answer!r}"
            ) from exc
        return figures


def _pushback_figures(part: dict[str, Any]) -> tuple[int, float]:
    """An answer's pushback figures: 0 from a server that does not count them."""
    return int(part.get("pushbacks", 0)), float(part.get("pushbackS", 0.0))


class _Pending:
    """What a worker process's tasks charged for one job and kind, not sent yet."""

    def __init__(self, client: ResourceGroupClient, kind: str) -> None:
        self.client = client
        self.kind = kind
        self._lock = threading.Lock()  # tasks add from their threads, the flusher sends
        self._sending = threading.Lock()  # one send at a time: a failed one puts back
        self._actions: dict[str, Entry] = {}
        self._admin: AdminClient | None = None
        self._warned_at = -WARN_EVERY_S
        # Whether the server refused the pushback figures (it predates them).
        self._without_pushbacks = False

    def add(self, action: str, entry: Entry) -> None:
        with self._lock:
            _merge(self._actions, action, entry)

    def send(self) -> None:
        with self._sending:
            with self._lock:
                actions, self._actions = self._actions, {}
            if not actions:
                return
            try:
                self._post(actions)
            except RGSparkError as exc:
                with self._lock:
                    for action, entry in actions.items():
                        _merge(self._actions, action, entry)
                self._warn(exc)

    def _post(self, actions: dict[str, Entry]) -> None:
        if self._admin is None:
            self._admin = self.client.admin()
        pushed_back = not self._without_pushbacks and any(
            padded(entry)[5] or padded(entry)[6] for entry in actions.values()
        )
        try:
            self._admin.post_job_figures(self.client.job, self._body(actions, pushed_back))
        except UnexpectedResponseError as exc:
            if not (pushed_back and exc.status_code in (400, 422)):
                raise
            self._without_pushbacks = True
            self._admin.post_job_figures(self.client.job, self._body(actions, False))

    def _body(self, actions: dict[str, Entry], pushed_back: bool) -> dict[str, Any]:
        """The post of `actions`, with their pushback figures when `pushed_back`."""
        parts = {}
        for action, entry in actions.items():
            rows, nbytes, held_s, start, end, pushbacks, pushback_s = padded(entry)
            part: dict[str, Any] = {
                "rows": int(rows),
                "bytes": int(nbytes),
                "heldS": held_s,
                "startMs": round(start * 1000),
                "endMs": round(end * 1000),
            }
            if pushed_back:
                part.update(pushbacks=int(pushbacks), pushbackS=pushback_s)
            parts[action] = part
        return {
            "namespace": f"{self.client.tenant}/{self.client.namespace}",
            "kind": self.kind,
            "actions": parts,
        }

    def _warn(self, exc: RGSparkError) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            logger.warning(
                "rgspark: could not send the figures of job %s to the admin server (%s); "
                "they are sent with the next",
                self.client.job,
                exc,
            )


def _merge(actions: dict[str, Entry], action: str, entry: Entry) -> None:
    """Add `entry` to `actions`; past `MAX_ACTIONS_PER_POST`, the two oldest become one (under the
    older's name), so that the totals still count every row and the last action stays."""
    known = actions.get(action)
    if known is None:
        actions[action] = padded(entry)
    else:
        add_entry(known, entry)
    if len(actions) > MAX_ACTIONS_PER_POST:
        oldest, older = sorted(actions, key=lambda name: actions[name][3])[:2]
        add_entry(actions[oldest], actions.pop(older))


_Key = tuple[str, str | None, str, str]
_registry: dict[_Key, _Pending] = {}
_registry_lock = threading.Lock()
_flusher: threading.Thread | None = None


def _key(client: ResourceGroupClient, kind: str) -> _Key:
    return (client.url, client.token, client.job, kind)


def _pending(client: ResourceGroupClient, kind: str) -> _Pending:
    """This process's pending count for the client's job and `kind`; the first one starts
    the flusher."""
    key = _key(client, kind)
    pending = _registry.get(key)
    if pending is None:
        global _flusher
        with _registry_lock:
            pending = _registry.setdefault(key, _Pending(client, kind))
            if _flusher is None:
                _flusher = threading.Thread(target=_flush_all, name="rgspark-figures", daemon=True)
                _flusher.start()
    return pending


def _flush_all() -> None:
    """Until the process exits (a daemon thread): send every pending count."""
    while True:
        time.sleep(FLUSH_S)
        for pending in list(_registry.values()):
            pending.send()
