"""Store operations alone: CPU per append, per read-back and per ack of the commit-log store.

    python benchmarks/store_ops.py [--messages 20000] [--rounds 7] [--size 100]

Prints one JSON object. Each round opens a fresh commit-log store in a temporary directory
(64 MiB segments, sync flush; nothing waits for disk) and, with 100 B native messages to one
queue, times with `process_time`: `messages` appends; `read_queue` of them all, a batch of
1,000 at a time; then an ack of each, in order. Figures are CPU µs per message, the minimum
over the rounds (the least disturbed by other work on a shared machine) and the median.
This is the store's share of a persistent message's cost in the broker (publishing appends
it, a consumer's ack acks it, a swapped queue reads it back).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from herald.core.message import CodecRegistry, Message, Properties
from herald.core.store import QueueTarget
from herald.storage.commitlog import CommitLogStore
from herald.storage.commitlog_config import CommitLogConfig

PERSISTENT = Properties(delivery_mode=2)


async def one_round(args: argparse.Namespace, root: Path) -> dict[str, float]:
    store = CommitLogStore(root, CommitLogConfig(segment_size=64 << 20))
    await store.open(CodecRegistry())
    try:
        body = b"x" * args.size
        messages = [
            Message.native(body, exchange="", routing_key="q", properties=PERSISTENT)
            for _ in range(args.messages)
        ]
        n = args.messages
        start = time.process_time()
        for offset, message in enumerate(messages):
            store.append(message, (QueueTarget(1, offset),))
        appended = time.process_time()
        for first in range(0, n, 1000):
            store.read_queue(1, first, n - 1, 1000)
        read = time.process_time()
        for offset in range(n):
            store.ack(1, offset)
        acked = time.process_time()
        assert store.statistics().messages == 0
        return {
            "append": (appended - start) / n * 1e6,
            "read_queue": (read - appended) / n * 1e6,
            "ack": (acked - read) / n * 1e6,
        }
    finally:
        await store.close()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    rounds = []
    for _ in range(args.rounds):
        base = Path(tempfile.mkdtemp(prefix="herald-store-ops-"))
        try:
            rounds.append(await one_round(args, base / "store"))
        finally:
            shutil.rmtree(base, ignore_errors=True)
    result: dict[str, Any] = {
        "benchmark": "store_ops",
        "python": platform.python_version(),
        "messages": args.messages,
        "size": args.size,
        "rounds": args.rounds,
    }
    for name in ("append", "read_queue", "ack"):
        values = [r[name] for r in rounds]
        result[f"{name}_cpu_us_min"] = round(min(values), 3)
        result[f"{name}_cpu_us_median"] = round(statistics.median(values), 3)
    return result


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--size", type=int, default=100, help="body bytes per message")
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(trio.run(main, parse(sys.argv[1:])), indent=2))
