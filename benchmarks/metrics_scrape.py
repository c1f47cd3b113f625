"""What does a Prometheus scrape of ``/metrics`` cost a server process at fleet scale?

    python -m benchmarks.metrics_scrape [--groups 100000] [--rounds 3]

prints one JSON object: the seconds one server process takes to write its metrics' text
(`app.metrics.Metrics.exposition`, what ``GET /metrics`` serves) when its reports have
touched ``--groups`` groups, each limited in all four dimensions (PIP-82's broker scale:
100,000 namespaces, each in a group of its own: 1.7 million samples), next to the peer:
prometheus_client writing the same samples from its own metric families (`generate_latest`
over a collector of ``GaugeMetricFamily`` and, for the units used, ``CounterMetricFamily``),
as its documentation has a custom collector do. Every group's figures differ, as a live
fleet's do.

Machines are shared and noisy, so the two are timed in turns, each round one of each, and the
figures are medians over rounds; ``ratio`` is the peer's time over ours. Both outputs are
parsed back and must hold the same samples. Prometheus gives up on a scrape after 10 s by
default (``scrape_timeout``), the bar's ``seconds``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from app.metrics import Metrics
from app.quota.counts import UsageCounter
from rgspark.wire import DIMENSIONS

SCRAPE_TIMEOUT_S = 10.0  # Prometheus' default scrape_timeout
FIGURES = ("limit", "demand", "allocation")


class _Families(Collector):
    """The peer: the same group figures as prometheus_client's gauge families."""

    def __init__(self, metrics: Metrics, counter: UsageCounter) -> None:
        self.groups = metrics.groups
        self.counter = counter

    def collect(self) -> Iterator[Metric]:
        families = {
            name: GaugeMetricFamily(
                f"rg_resource_group_{name}", name, labels=["group", "dimension"]
            )
            for name in FIGURES
        }
        reporters = GaugeMetricFamily("rg_resource_group_reporters", "r", labels=["group"])
        for group, count, totals in self.groups.latest():
            reporters.add_metric([group], count)
            for dimension, *values in totals:
                for name, value in zip(FIGURES, values, strict=True):
                    families[name].add_metric([group, dimension], value)
        used = CounterMetricFamily("rg_resource_group_used", "u", labels=["group", "dimension"])
        for group, units in self.counter.totals().items():
            for dimension, value in zip(DIMENSIONS, units, strict=True):
                used.add_metric([group, dimension], value)
        yield from families.values()
        yield reporters
        yield used


def _metrics(groups: int) -> tuple[Metrics, UsageCounter]:
    counter = UsageCounter(resolution_s=10.0, span_s=10.0)
    metrics = Metrics(stale_after_s=3600.0, counter=counter)
    for index in range(groups):
        totals = tuple(
            (name, 1000.0 * (k + 1), 2.25 * index + k, 0.75 * index + k)
            for k, name in enumerate(DIMENSIONS)
        )
        metrics.groups.record(f"group-{index:06d}", 1 + index % 5, totals)
        used = [15.0 * index + k for k in range(len(DIMENSIONS))]
        counter.add({f"group-{index:06d}": used}, now=1e9, covered_s=1.0)
    return metrics, counter


def _group_samples(text: bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text.decode())
        if family.name.startswith("rg_resource_group_")
        for sample in family.samples
    }


def _timed(write: Any) -> tuple[float, bytes]:
    started = time.perf_counter()
    text = write()
    return time.perf_counter() - started, text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=100_000, help="Groups touched (100000).")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds of one scrape each (3).")
    args = parser.parse_args(argv)
    metrics, counter = _metrics(args.groups)
    peer = CollectorRegistry(auto_describe=False)
    peer.register(_Families(metrics, counter))
    ours_s: list[float] = []
    peer_s: list[float] = []
    for _ in range(args.rounds):
        seconds, text = _timed(metrics.exposition)
        ours_s.append(seconds)
        seconds, peer_text = _timed(lambda: generate_latest(peer))
        peer_s.append(seconds)
    same = _group_samples(text) == _group_samples(peer_text)
    ours, theirs = statistics.median(ours_s), statistics.median(peer_s)
    report = {
        "benchmark": "metrics_scrape",
        "groups": args.groups,
        "samples": 17 * args.groups,
        "text_mb": round(len(text) / 1e6, 1),
        "ours_seconds": round(ours, 3),
        "peer": "prometheus_client generate_latest over Gauge- and CounterMetricFamily collectors",
        "peer_seconds": round(theirs, 3),
        "ratio": round(theirs / ours, 2),
        "same_samples": same,
        "bar": {"seconds": SCRAPE_TIMEOUT_S, "met": ours < SCRAPE_TIMEOUT_S},
    }
    print(json.dumps(report, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
