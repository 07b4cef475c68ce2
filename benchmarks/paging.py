"""Paging benchmark: a backlog of transient messages when memory is short.

    python benchmarks/paging.py [--messages 2000000] [--size 100] [--paging-mb 150]
                                [--batch 10000] [--prefetch 1000] [--dir PATH]

Prints one JSON object. Each mode runs in its own child process (so one mode's heap does not
count in the other's RSS), with an embedded broker on the commit-log store in a fresh data dir:
publish `messages` transient `size`-byte messages to one non-durable queue through the kernel
API (`vhost.publish`, yielding every `batch` so the memory monitor samples), then drain them
with one consumer acking each prefetch window.

- `paging`: the memory monitor samples every 50 ms and the paging watermark is `paging_mb`
  (the high watermark twice that, `memory.paging_ratio` 0.5), so the queue pages its
  backlog out to the store once the process passes it;
- `loaded`: the same with `queues.page_transient=false`: every message stays in memory.

Reported per mode: the peak RSS seen while publishing (psutil, sampled every batch), the RSS
with the queue full after `gc.collect()`, messages swapped out, publish and drain rates per
wall and CPU second of the process. The point of paging is the first two figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import trio

from herald.core.embedding import embedded
from herald.core.message import Message, Properties

TRANSIENT = Properties(delivery_mode=1)
MB = 1_000_000


async def run_one(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    paging = args.one == "paging"
    settings = [
        'store.backend="commitlog"',
        "commitlog.segment_size=268435456",
        'broker.log_level="warning"',
        "memory.check_interval=0.05",
        f"memory.high_watermark={args.paging_mb * MB * 2}",
        "memory.paging_ratio=0.5",
        f"queues.page_transient={'true' if paging else 'false'}",
    ]
    process = psutil.Process()
    async with embedded(data_dir=data_dir, plugins=[], settings=settings) as broker:
        vhost = broker.default_vhost
        queue = vhost.declare_queue("backlog")
        body = b"x" * args.size
        native = Message.native
        send = vhost.publish
        peak = 0
        start, cpu = time.perf_counter(), time.process_time()
        for n in range(args.messages):
            send(native(body, exchange="", routing_key="backlog", properties=TRANSIENT))
            if (n + 1) % args.batch == 0:
                peak = max(peak, process.memory_info().rss)
                await trio.sleep(0)  # the memory monitor samples between batches
        publish = (
            args.messages / (time.perf_counter() - start),
            args.messages / (time.process_time() - cpu),
        )
        gc.collect()
        full = process.memory_info().rss
        swapped = queue.statistics().messages_swapped
        broker.alarms.set("memory", False)  # drain regardless of the watermark
        delivered: list[Any] = []

        class Sink:
            protocol = "herald"

            def deliver(self, consumer: object, entry: Any) -> None:
                delivered.append(entry)

            def consumer_cancelled(self, consumer: object) -> None:
                pass

        start, cpu = time.perf_counter(), time.process_time()
        consumer = queue.add_consumer("drain", Sink(), prefetch_count=args.prefetch)
        acked = 0
        while acked < args.messages:
            batch, delivered[:] = list(delivered), []
            if not batch:
                raise RuntimeError(f"drain stalled at {acked} of {args.messages}")
            for entry in batch:
                queue.ack(entry)
            acked += len(batch)
            await trio.lowlevel.checkpoint()
        drain = (
            args.messages / (time.perf_counter() - start),
            args.messages / (time.process_time() - cpu),
        )
        queue.remove_consumer(consumer)
        return {
            "mode": args.one,
            "peak_rss_mb": round(peak / MB, 1),
            "full_rss_mb": round(full / MB, 1),
            "swapped": swapped,
            "publish_msgs_per_s": round(publish[0]),
            "publish_msgs_per_cpu_s": round(publish[1]),
            "drain_msgs_per_s": round(drain[0]),
            "drain_msgs_per_cpu_s": round(drain[1]),
        }


def child(args: argparse.Namespace) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="herald-paging-", dir=args.dir))
    try:
        return trio.run(run_one, args, base / "data")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    results = {}
    for mode in ("paging", "loaded"):
        out = subprocess.run(
            [sys.executable, __file__, *argv, "--one", mode],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        results[mode] = json.loads(out)
    return {
        "benchmark": "paging",
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
        "messages": args.messages,
        "size": args.size,
        "paging_watermark_mb": args.paging_mb,
        **results,
        "full_rss_ratio": round(
            results["paging"]["full_rss_mb"] / results["loaded"]["full_rss_mb"], 3
        ),
    }


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=100, help="body bytes per message")
    parser.add_argument("--paging-mb", type=int, default=150, help="the paging watermark")
    parser.add_argument("--batch", type=int, default=10_000, help="publishes between yields")
    parser.add_argument("--prefetch", type=int, default=1_000)
    parser.add_argument("--dir", default=None, help="where the data dir goes (default: $TMPDIR)")
    parser.add_argument("--one", choices=["paging", "loaded"], help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    if arguments.one:
        print(json.dumps(child(arguments)))
    else:
        print(json.dumps(main(arguments, sys.argv[1:]), indent=2))
