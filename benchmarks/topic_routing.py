"""Topic routing cost against the number of bindings that do not match.

For N in (10, 1 000, 100 000) non-matching bindings plus one matching binding, times
`TopicExchange.route()` with its result cache off (so repeated keys cost a full match), and
prints one JSON object: the median ns per call of 5 repetitions for each N, and the ratio
100k / 10, which a trie walk keeps near 1. The same keys are used for every N; a second series
spreads the keys over all of N's nodes, which adds CPU-cache misses (memory, not algorithm).
A direct exchange's route() is timed too, for reference.

Run: python benchmarks/topic_routing.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

from herald.core.exchange import DirectExchange, TopicExchange

SIZES = (10, 1_000, 100_000)
REPEATS = 5
MATCHING = -1  # the destination id of the one matching binding


def build_topic(n: int) -> TopicExchange:
    """n realistic non-matching bindings (three shapes) and one that matches the probes."""
    exchange = TopicExchange("bench", cache_size=0)
    shapes = ("sensor.{}.temp", "dev.{}.*", "{}.#")
    for i in range(n):
        exchange.bind(i, shapes[i % 3].format(i))
    exchange.bind(MATCHING, "sensor.*.humidity")
    return exchange


def probe_keys(sensors: list[int], count: int) -> list[str]:
    """Keys matching only "sensor.*.humidity"; their second word names an existing "sensor.<i>"
    node, so each walk also enters the non-matching bindings' subtrees."""
    return [f"sensor.{sensors[j % len(sensors)]}.humidity" for j in range(count)]


def ns_per_call(route: Callable[[str, None], object], keys: list[str]) -> float:
    start = time.perf_counter_ns()
    for key in keys:
        route(key, None)
    return (time.perf_counter_ns() - start) / len(keys)


def medians(cases: dict[str, tuple[Callable[[str, None], object], list[str]]]) -> dict[str, float]:
    """Median ns per call of each case; repetitions are interleaved across cases, so a
    disturbance on a busy machine hits every case rather than one."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(REPEATS):
        for name, (route, keys) in cases.items():
            samples[name].append(ns_per_call(route, keys))
    return {name: round(statistics.median(values), 1) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="route() calls per repetition")
    args = parser.parse_args(argv)

    cases: dict[str, tuple[Callable[[str, None], object], list[str]]] = {}
    for n in SIZES:
        exchange = build_topic(n)
        # The same keys for every N (sensors 0, 3, 6, 9 exist in each): the algorithm's cost.
        same = probe_keys([0, 3, 6, 9], args.calls)
        # Keys over all of this N's sensor nodes: adds the cost of touching more memory.
        spread = probe_keys(list(range(0, n, 3)), args.calls)
        for key in (*same[:4], *spread[:4]):  # the benchmark measures a correct route
            assert exchange.route(key, None) == (MATCHING,), key
        assert exchange.route("sensor.0.temp", None) == (0,)
        cases[f"same:{n}"] = (exchange.route, same)
        cases[f"spread:{n}"] = (exchange.route, spread)
    direct = DirectExchange("bench-direct")
    for i in range(100_000):
        direct.bind(i, f"queue.{i}")
    cases["direct"] = (direct.route, [f"queue.{j % 100_000}" for j in range(args.calls)])

    result = medians(cases)
    same_keys = {str(n): result[f"same:{n}"] for n in SIZES}
    spread_keys = {str(n): result[f"spread:{n}"] for n in SIZES}
    print(
        json.dumps(
            {
                "benchmark": "topic_routing",
                "python": sys.version.split()[0],
                "calls_per_repeat": args.calls,
                "repeats": REPEATS,
                "topic_cache": "off",
                "topic_median_ns_per_route": same_keys,
                "ratio_100000_to_10": round(same_keys["100000"] / same_keys["10"], 3),
                "topic_median_ns_per_route_keys_spread_over_all_nodes": spread_keys,
                "ratio_100000_to_10_keys_spread": round(
                    spread_keys["100000"] / spread_keys["10"], 3
                ),
                "direct_median_ns_per_route_100000_bindings": result["direct"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
