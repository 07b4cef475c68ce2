"""Management API on a broker with many queues: how long `/api/queues` (paged) and
`/api/overview` take, and what collecting statistics costs the broker.

    python benchmarks/management.py [--queues 10000] [--requests 50] [--page-size 100]

Prints one JSON object. One process runs an embedded broker with the management plugin on a
free port of 127.0.0.1 (memory store), declares `queues` durable queues with one message
each, then measures with httpx over real HTTP (each request timed on the client, median and
p90): `/api/queues?page=N&page_size=P` for pages spread over the whole list, `/api/overview`,
and `/metrics`. The statistics cost is the CPU time of one run of the rate sampler (what it
does every `management.sample_interval`, 5 s) over that interval: the issue's "collecting
stats costs the broker under 2 % CPU".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any

import httpx
import trio

from herald.core.embedding import embedded
from herald.core.message import Message, Properties
from herald.plugins.management.rates import Rates

SETTINGS = ["management.host=127.0.0.1", "management.port=0", 'store.backend="memory"']


def timed(client: httpx.Client, url: str, runs: list[float]) -> Any:
    start = time.perf_counter()
    answer = client.get(url)
    runs.append((time.perf_counter() - start) * 1000)
    answer.raise_for_status()
    return answer


def measure(port: int, queues: int, requests: int, page_size: int) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}"
    pages = max(1, queues // page_size)
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=60) as client:
        listing: list[float] = []
        for n in range(requests):
            page = 1 + n * pages // requests
            body = timed(client, f"/api/queues?page={page}&page_size={page_size}", listing).json()
            assert body["total_count"] >= queues, body["total_count"]
        overview: list[float] = []
        for _ in range(requests):
            timed(client, "/api/overview", overview)
        metrics: list[float] = []
        for _ in range(3):
            timed(client, "/metrics", metrics)
    return {
        "queues_page_ms_median": round(statistics.median(listing), 2),
        "queues_page_ms_p90": round(sorted(listing)[int(len(listing) * 0.9)], 2),
        "overview_ms_median": round(statistics.median(overview), 2),
        "metrics_ms_median": round(statistics.median(metrics), 1),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data_dir:
        async with embedded(plugins=["management"], settings=SETTINGS, data_dir=data_dir) as broker:
            vhost = broker.default_vhost
            for n in range(args.queues):
                vhost.declare_queue(f"q-{n:05}", durable=True)
                vhost.publish(
                    Message.native(b"x", routing_key=f"q-{n:05}", properties=Properties())
                )
            port = next(lst.port for lst in broker.listeners if lst.protocol == "management")
            timings = await trio.to_thread.run_sync(
                measure, port, args.queues, args.requests, args.page_size
            )
            # A sampler like the plugin's (the same class, over the same queues), timed alone.
            rates = Rates(broker)
            interval = broker.config.section("management").sample_interval
            costs = []
            for _ in range(5):
                start = time.process_time()
                rates.sample(trio.current_time())
                costs.append(time.process_time() - start)
            sample = statistics.median(costs)
    return {
        "benchmark": "management",
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
        "queues": args.queues,
        "page_size": args.page_size,
        **timings,
        "sample_cpu_ms": round(sample * 1000, 2),
        "sample_interval_s": interval,
        "stats_cpu_share_percent": round(100 * sample / interval, 3),
    }


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--page-size", type=int, default=100)
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(trio.run(main, parse(sys.argv[1:])), indent=2))
