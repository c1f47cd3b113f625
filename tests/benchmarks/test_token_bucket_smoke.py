"""A tiny run of `python -m benchmarks.token_bucket`: it runs and its JSON has every figure."""

from __future__ import annotations

from itertools import product

from benchmarks.token_bucket import AMOUNTS, OTHER_PEERS, PATHS, STATES
from tests.benchmarks.run import run_benchmark


def test_token_bucket_benchmark_smoke() -> None:
    report = run_benchmark("token_bucket", "--seconds", "0.1", "--rounds", "1", timeout=60)

    assert report["benchmark"] == "token_bucket"
    paths = report["paths"]
    # Every path, amount and state, each once, the worst ratio first.
    assert sorted((p["path"], p["amount"], p["state"]) for p in paths) == sorted(
        product(PATHS, AMOUNTS, STATES)
    )
    ratios = [p["ratio"] for p in paths]
    assert ratios == sorted(ratios)
    assert report["worst"]["ratio"] == ratios[0]
    assert set(report["other_peers"]["ratio_ours_to_peer"]) == set(OTHER_PEERS)
    figures = [
        *ratios,
        *(p["ours_calls_per_s"] for p in paths),
        *(p["peer_calls_per_s"] for p in paths),
        *report["other_peers"]["ratio_ours_to_peer"].values(),
        report["two_threads"]["calls_per_s"],
        report["two_threads"]["ratio_to_one_thread"],
    ]
    assert all(isinstance(x, (int, float)) and x > 0 for x in figures)
