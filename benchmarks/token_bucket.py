"""How fast is `TokenBucket.consume`, next to the rate limiters people would otherwise use?

    python -m benchmarks.token_bucket [--seconds 8] [--rounds 9]

prints one JSON object: single-thread calls per second of each limiter's "take one token"
call, our ratio to each peer, and the throughput of two threads sharing one of our buckets.

Every limiter gets the same configuration, 1000 tokens per second with a burst of 1000, and
is called the way its documentation shows, in the same loop. The peers soon start refusing
(their cheapest path, since a refusal writes nothing), while ours goes on counting debt,
which it must never lose. The peers:

- falconry `token-bucket`: `Limiter(rate, capacity, MemoryStorage()).consume(key)`
- `limits`: `MovingWindowRateLimiter(MemoryStorage()).hit(RateLimitItemPerSecond(rate))`
- `pyrate-limiter`, in memory: its token bucket (`create_token_bucket_limiter`) and its
  sliding log (`create_inmemory_limiter`)

Machines are shared and noisy, so every timing of a peer sits between two timings of ours
(each an equal slice of the time), and its ratio is taken against their mean; each round
times every peer so, in a rotating order, and the figures reported are medians over rounds.
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
from itertools import repeat
from pathlib import Path

try:
    from rgspark import TokenBucket
except ImportError:  # a source checkout where the package is not installed
    sys.modules.pop("rgspark", None)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spark"))
    from rgspark import TokenBucket

RATE = 1000
CAPACITY = 1000
BAR_VS_FALCONRY = 3.0
OURS = "rgspark"

Run = Callable[[int], None]  # makes n calls


def _ours() -> Run:
    consume = TokenBucket(RATE, CAPACITY).consume

    def run(n: int) -> None:
        for _ in repeat(None, n):
            consume(1)

    return run


def _falconry() -> Run:
    import token_bucket

    consume = token_bucket.Limiter(RATE, CAPACITY, token_bucket.MemoryStorage()).consume

    def run(n: int) -> None:
        for _ in repeat(None, n):
            consume(b"key", 1)

    return run


def _limits() -> Run:
    from limits import RateLimitItemPerSecond
    from limits.storage import MemoryStorage
    from limits.strategies import MovingWindowRateLimiter

    hit = MovingWindowRateLimiter(MemoryStorage()).hit
    item = RateLimitItemPerSecond(RATE)

    def run(n: int) -> None:
        for _ in repeat(None, n):
            hit(item, "key")

    return run


def _pyrate(factory_name: str) -> Callable[[], Run]:
    def make() -> Run:
        from pyrate_limiter import Duration, limiter_factory

        if factory_name == "token_bucket":
            limiter = limiter_factory.create_token_bucket_limiter(
                RATE, Duration.SECOND, burst=CAPACITY
            )
        else:
            limiter = limiter_factory.create_inmemory_limiter(RATE, Duration.SECOND)
        acquire = limiter.try_acquire

        def run(n: int) -> None:
            for _ in repeat(None, n):
                acquire("key", 1, blocking=False)

        return run

    return make


PEERS: dict[str, Callable[[], Run]] = {
    "falconry_token_bucket": _falconry,
    "limits_moving_window": _limits,
    "pyrate_limiter_token_bucket": _pyrate("token_bucket"),
    "pyrate_limiter_in_memory": _pyrate("in_memory"),
}


def _two_threads() -> Run:
    """Two threads sharing one bucket, n calls between them."""
    consume = TokenBucket(RATE, CAPACITY).consume

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


def measure(seconds: float, rounds: int) -> dict[str, object]:
    ours = _ours()
    others: dict[str, Run] = {"two_threads": _two_threads()}
    others.update((name, make()) for name, make in PEERS.items())
    # Each round times every other contender once, between two timings of ours.
    slice_s = seconds / (rounds * len(others) * 3)

    # Size each contender's batch so that it fills its slice (after warming it up).
    batch = {OURS: max(2, int(_calls_per_second(ours, 2000) * slice_s))}
    for name, run in others.items():
        batch[name] = max(2, int(_calls_per_second(run, 2000) * slice_s))

    ours_samples: list[float] = []
    samples: dict[str, list[float]] = {name: [] for name in others}
    ratios: dict[str, list[float]] = {name: [] for name in others}
    names = list(others)
    for round_index in range(rounds):
        start = round_index % len(names)
        for name in names[start:] + names[:start]:
            before = _calls_per_second(ours, batch[OURS])
            other = _calls_per_second(others[name], batch[name])
            after = _calls_per_second(ours, batch[OURS])
            ours_samples += [before, after]
            samples[name].append(other)
            ratios[name].append((before + after) / 2 / other)

    ratio = {name: statistics.median(values) for name, values in ratios.items()}
    calls = {OURS: statistics.median(ours_samples)}
    calls.update((peer, statistics.median(samples[peer])) for peer in PEERS)
    return {
        "benchmark": "token_bucket",
        "python": platform.python_version(),
        "rounds": rounds,
        "seconds": seconds,
        "config": {"rate_per_s": RATE, "capacity": CAPACITY},
        "consume_calls_per_s": calls,
        "ratio_ours_to_peer": {peer: ratio[peer] for peer in PEERS},
        "two_threads": {
            "calls_per_s": statistics.median(samples["two_threads"]),
            "ratio_to_one_thread": 1 / ratio["two_threads"],
        },
        "bar": {
            "ratio_vs_falconry_token_bucket": BAR_VS_FALCONRY,
            "met": ratio["falconry_token_bucket"] >= BAR_VS_FALCONRY,
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=8.0, help="total time spent measuring (default 8)"
    )
    parser.add_argument(
        "--rounds", type=int, default=9, help="rounds whose median is reported (default 9)"
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rounds < 1:
        parser.error("--seconds must be above 0 and --rounds at least 1")
    print(json.dumps(measure(args.seconds, args.rounds), indent=2))


if __name__ == "__main__":
    main()
