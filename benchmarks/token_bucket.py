"""How fast is every limiter path of rgspark, next to falconry's `token-bucket`?

    python -m benchmarks.token_bucket [--seconds 30] [--rounds 7]

prints one JSON object: for every public limiter path (``TokenBucket.consume``,
``TokenBucket.consume_and_check``, ``Limiter.charge`` over a msgs and a bytes bucket, and
``Limiter.reserve`` over the two followed by ``remaining()``, which is what
``Limiter.acquire`` does when it need not sleep), with int and float amounts, on a bucket in
each state, the calls per second of ours and of the peer doing the same work, and their
ratio; the paths listed worst ratio first. Also the consume rate of the other limiters people
would use, and two threads sharing one bucket.

The figures are information, with no bar: no product path calls the limiter more than about
ten times a second per task, so what a Spark user pays for it is measured where it is paid,
by ``benchmarks.spark_throttle`` (its overhead bar, and its cost per charge of the path Spark
takes).

The peer is falconry's ``Limiter(rate, capacity, MemoryStorage()).consume(key, n)``, set up
like ours in each state and called with the same amounts; a charge over two buckets is two
of its calls (it has no call that charges two buckets at once), a reservation too. The
states:

- ``full``: the rate (10**9 tokens/s) refills far more than the calls take, so the bucket is
  at its capacity at every call (the capacity forgets what came before, so each call's time
  matters);
- ``not_low``: 10**11 tokens in a bucket of 10**12 at 1,000/s: far from empty and from full;
- ``debt``: 1,000 tokens/s, starting empty: in debt at once (the peer refuses, its cheapest
  path).

Amounts: ``1`` (a charge: ``1`` msg and ``100`` bytes) and ``1.5`` (``1.5`` and ``150.5``).

Machines are shared and noisy, so every timing of the peer sits between two timings of ours
(each an equal slice of the time), and its ratio is taken against their mean; each round times
every path so, in a rotating order, and the figures reported are medians over rounds. The
other peers (the `limits` moving window, `pyrate-limiter`'s token bucket and in-memory
limiter) are timed the same way against ``consume(1)`` on a bucket in debt.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any

try:
    from rgspark import Limiter, TokenBucket
except ImportError:  # a source checkout where the package is not installed
    sys.modules.pop("rgspark", None)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spark"))
    from rgspark import Limiter, TokenBucket

PEER = (
    "falconry token-bucket: Limiter.consume(key, n), twice for a charge or a reservation over "
    "two buckets"
)

Run = Callable[[int], None]  # makes n calls


@dataclass(frozen=True)
class State:
    rate: float
    capacity: int
    initial: float | None


STATES = {
    "full": State(rate=1e9, capacity=10**6, initial=None),
    "not_low": State(rate=1000, capacity=10**12, initial=1e11),
    "debt": State(rate=1000, capacity=1000, initial=0),
}
AMOUNTS: dict[str, tuple[float, float]] = {"int": (1, 100), "float": (1.5, 150.5)}
PATHS = ("consume", "consume_and_check", "Limiter.charge", "Limiter.reserve")
TWO_BUCKET_PATHS = ("Limiter.charge", "Limiter.reserve")


def _bucket(state: State, scale: float = 1) -> TokenBucket:
    initial = None if state.initial is None else state.initial * scale
    return TokenBucket(state.rate * scale, state.capacity * scale, initial)


def _ours(path: str, state: State, amounts: tuple[float, float]) -> Run:
    if path in TWO_BUCKET_PATHS:
        return _ours_two_buckets(path, state, amounts)
    call = getattr(_bucket(state), path)
    msgs = amounts[0]

    def run(n: int) -> None:
        for _ in repeat(None, n):
            call(msgs)

    return run


def _ours_two_buckets(path: str, state: State, amounts: tuple[float, float]) -> Run:
    msgs, nbytes = amounts
    limiter = Limiter()
    charges = {_bucket(state): msgs, _bucket(state, 100): nbytes}
    if path == "Limiter.charge":
        charge = limiter.charge

        def run_charge(n: int) -> None:
            for _ in repeat(None, n):
                charge(charges)

        return run_charge
    reserve = limiter.reserve

    def run_reserve(n: int) -> None:
        for _ in repeat(None, n):
            reserve(charges).remaining()

    return run_reserve


def _falconry(path: str, state: State, amounts: tuple[float, float]) -> Run:
    import token_bucket

    def limiter(scale: float) -> Any:
        capacity = int(state.capacity * scale)
        return token_bucket.Limiter(state.rate * scale, capacity, token_bucket.MemoryStorage())

    msgs, nbytes = amounts
    consume = limiter(1).consume
    if state.initial is not None and state.initial < state.capacity:
        consume(b"key", state.capacity - state.initial)  # as empty as ours
    if path in TWO_BUCKET_PATHS:
        consume_bytes = limiter(100).consume
        if state.initial is not None and state.initial < state.capacity:
            consume_bytes(b"key", 100 * (state.capacity - state.initial))

        def run_two(n: int) -> None:
            for _ in repeat(None, n):
                consume(b"key", msgs)
                consume_bytes(b"key", nbytes)

        return run_two

    def run(n: int) -> None:
        for _ in repeat(None, n):
            consume(b"key", msgs)

    return run


def _limits() -> Run:
    from limits import RateLimitItemPerSecond
    from limits.storage import MemoryStorage
    from limits.strategies import MovingWindowRateLimiter

    hit = MovingWindowRateLimiter(MemoryStorage()).hit
    item = RateLimitItemPerSecond(1000)

    def run(n: int) -> None:
        for _ in repeat(None, n):
            hit(item, "key")

    return run


def _pyrate(factory_name: str) -> Callable[[], Run]:
    def make() -> Run:
        from pyrate_limiter import Duration, limiter_factory

        if factory_name == "token_bucket":
            limiter = limiter_factory.create_token_bucket_limiter(1000, Duration.SECOND, burst=1000)
        else:
            limiter = limiter_factory.create_inmemory_limiter(1000, Duration.SECOND)
        acquire = limiter.try_acquire

        def run(n: int) -> None:
            for _ in repeat(None, n):
                acquire("key", 1, blocking=False)

        return run

    return make


OTHER_PEERS: dict[str, Callable[[], Run]] = {
    "limits_moving_window": _limits,
    "pyrate_limiter_token_bucket": _pyrate("token_bucket"),
    "pyrate_limiter_in_memory": _pyrate("in_memory"),
}


def _two_threads() -> Run:
    """Two threads sharing one bucket in debt, n calls between them."""
    consume = _bucket(STATES["debt"]).consume

    def worker(calls: int) -> None:
        for _ in repeat(None, calls):
            consume(1)

    def run(n: int) -> None:
        threads = [threading.Thread(target=worker, args=(n // 2,)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    return run


def _calls_per_second(run: Run, n: int) -> float:
    start = time.perf_counter()
    run(n)
    return n / (time.perf_counter() - start)


@dataclass
class Pair:
    """One of our paths and what we compare it with."""

    name: str
    ours: Run
    peer: Run
    info: dict[str, Any]
    batch: tuple[int, int] = (2, 2)


def _pairs() -> list[Pair]:
    pairs = []
    for path in PATHS:
        for amount, amounts in AMOUNTS.items():
            for state_name, state in STATES.items():
                info = {"path": path, "amount": amount, "state": state_name}
                name = f"{path} {amount} {state_name}"
                ours = _ours(path, state, amounts)
                pairs.append(Pair(name, ours, _falconry(path, state, amounts), info))
    debt = STATES["debt"]
    for peer, make in OTHER_PEERS.items():
        info = {"path": "consume", "amount": "int", "state": "debt", "peer": peer}
        pairs.append(Pair(peer, _ours("consume", debt, AMOUNTS["int"]), make(), info))
    two = {"path": "consume", "amount": "int", "state": "debt", "peer": "one thread"}
    pairs.append(Pair("two_threads", _ours("consume", debt, AMOUNTS["int"]), _two_threads(), two))
    return pairs


def measure(seconds: float, rounds: int) -> dict[str, Any]:
    pairs = _pairs()
    # Each round times every pair once: ours, the other, ours again, each an equal slice.
    slice_s = seconds / (rounds * len(pairs) * 3)
    for pair in pairs:  # warm up, then size each batch to fill its slice
        pair.batch = (
            max(2, int(_calls_per_second(pair.ours, 2000) * slice_s)),
            max(2, int(_calls_per_second(pair.peer, 2000) * slice_s)),
        )
    ours: dict[str, list[float]] = {pair.name: [] for pair in pairs}
    theirs: dict[str, list[float]] = {pair.name: [] for pair in pairs}
    ratios: dict[str, list[float]] = {pair.name: [] for pair in pairs}
    for round_index in range(rounds):
        start = round_index % len(pairs)
        for pair in pairs[start:] + pairs[:start]:
            before = _calls_per_second(pair.ours, pair.batch[0])
            other = _calls_per_second(pair.peer, pair.batch[1])
            after = _calls_per_second(pair.ours, pair.batch[0])
            ours[pair.name] += [before, after]
            theirs[pair.name].append(other)
            ratios[pair.name].append((before + after) / 2 / other)

    def figures(pair: Pair) -> dict[str, Any]:
        return {
            **pair.info,
            "ratio": round(statistics.median(ratios[pair.name]), 3),
            "ours_calls_per_s": round(statistics.median(ours[pair.name])),
            "peer_calls_per_s": round(statistics.median(theirs[pair.name])),
        }

    paths = sorted(
        (figures(pair) for pair in pairs if "peer" not in pair.info), key=lambda f: f["ratio"]
    )
    others = {pair.name: figures(pair) for pair in pairs if pair.name in OTHER_PEERS}
    two = next(pair for pair in pairs if pair.name == "two_threads")
    worst = paths[0]
    return {
        "benchmark": "token_bucket",
        "python": platform.python_version(),
        "rounds": rounds,
        "seconds": seconds,
        "peer": PEER,
        "worst": {key: worst[key] for key in ("path", "amount", "state", "ratio")},
        "paths": paths,
        "states": {name: vars(state) for name, state in STATES.items()},
        "amounts": {name: list(amounts) for name, amounts in AMOUNTS.items()},
        "other_peers": {
            "compared_with": "consume(1) on a bucket in debt",
            "ratio_ours_to_peer": {name: f["ratio"] for name, f in others.items()},
            "peer_calls_per_s": {name: f["peer_calls_per_s"] for name, f in others.items()},
        },
        "two_threads": {
            "calls_per_s": round(statistics.median(theirs[two.name])),
            "ratio_to_one_thread": round(1 / statistics.median(ratios[two.name]), 3),
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=30.0, help="total time spent measuring (default 30)"
    )
    parser.add_argument(
        "--rounds", type=int, default=7, help="rounds whose median is reported (default 7)"
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rounds < 1:
        parser.error("--seconds must be above 0 and --rounds at least 1")
    print(json.dumps(measure(args.seconds, args.rounds), indent=2))


if __name__ == "__main__":
    main()
