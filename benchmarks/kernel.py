"""Kernel micro-benchmark: publish -> route -> enqueue -> deliver -> ack through the Python API.

    python benchmarks/kernel.py [--messages 200000] [--repeat 5]

Prints one JSON object. Each scenario runs `repeat` times in one process on one core; the
figures are medians. Scenarios:
- direct: one message at a time through a direct exchange to one queue and one consumer
  (prefetch 100), acked as it is delivered; the issue's target is >= 200k msg/s;
- default_exchange: the same through the default exchange (routing by queue name);
- backlog: publish N with no consumer, then drain them with one consumer;
- persistent: the direct scenario with persistent messages to a durable queue on the memory
  store (what the store interface costs without a disk);
- topic_10 / topic_100k: a topic exchange with 10 or 100,000 non-matching bindings beside the
  matching one: routing cost must not grow with the bindings that don't match.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import trio

from herald.core.consumer import Consumer
from herald.core.embedding import embedded
from herald.core.message import Message, Properties
from herald.core.queue import QueueEntry
from herald.core.vhost import VirtualHost
from herald.storage.memory import MemoryStore

PERSISTENT = Properties(delivery_mode=2)


class AckingSink:
    """Acks each delivery as it arrives, like a consumer that keeps up."""

    protocol = "herald"

    def __init__(self) -> None:
        self.count = 0

    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        self.count += 1
        entry.queue.ack(entry)

    def consumer_cancelled(self, consumer: Consumer) -> None:
        pass


def timed(run: Callable[[], int]) -> float:
    start = time.perf_counter()
    count = run()
    return count / (time.perf_counter() - start)


def scenario_stream(
    vhost: VirtualHost,
    exchange: str,
    key: str,
    n: int,
    queue: str,
    properties: Properties | None = None,
) -> Callable[[], int]:
    def run() -> int:
        sink = AckingSink()
        q = vhost.queues[queue]
        consumer = q.add_consumer("bench", sink, prefetch_count=100)
        publish = vhost.publish
        body = b"x" * 100
        props = properties or Properties()
        native = Message.native
        for _ in range(n):
            publish(native(body, exchange=exchange, routing_key=key, properties=props))
        q.remove_consumer(consumer)
        assert sink.count == n, (sink.count, n)
        return n

    return run


def scenario_backlog(vhost: VirtualHost, n: int) -> Callable[[], int]:
    def run() -> int:
        publish = vhost.publish
        body = b"x" * 100
        for _ in range(n):
            publish(Message.native(body, exchange="bench.direct", routing_key="k"))
        sink = AckingSink()
        q = vhost.queues["bench"]
        consumer = q.add_consumer("bench", sink, prefetch_count=100)
        q.remove_consumer(consumer)
        assert sink.count == n
        return 2 * n  # each message is published and consumed: count both operations

    return run


async def measure(messages: int, repeat: int, data_dir: Path) -> dict[str, object]:
    results: dict[str, list[float]] = {}
    async with embedded(
        data_dir=data_dir, store=MemoryStore(), load_entrypoints=True, plugins=[]
    ) as broker:
        vhost = broker.default_vhost
        vhost.declare_exchange("bench.direct", "direct")
        vhost.declare_queue("bench")
        vhost.bind_queue("bench", "bench.direct", "k")
        vhost.declare_queue("durable", durable=True)
        vhost.bind_queue("durable", "bench.direct", "p")
        vhost.declare_exchange("t10", "topic")
        vhost.declare_exchange("t100k", "topic")
        vhost.declare_queue("topic")
        vhost.declare_queue("sink")
        for name, count in (("t10", 10), ("t100k", 100_000)):
            vhost.bind_queue("topic", name, "sensors.*.temperature")
            for i in range(count):
                vhost.bind_queue("sink", name, f"devices.{i}.#")
        scenarios = {
            "direct": scenario_stream(vhost, "bench.direct", "k", messages, "bench"),
            "default_exchange": scenario_stream(vhost, "", "bench", messages, "bench"),
            "backlog": scenario_backlog(vhost, messages // 2),
            "persistent": scenario_stream(
                vhost, "bench.direct", "p", messages, "durable", PERSISTENT
            ),
            "topic_10": scenario_stream(
                vhost, "t10", "sensors.hall.temperature", messages, "topic"
            ),
            "topic_100k": scenario_stream(
                vhost, "t100k", "sensors.hall.temperature", messages, "topic"
            ),
        }
        for _ in range(repeat):  # interleave scenarios so machine noise hits them alike
            for name, run in scenarios.items():
                results.setdefault(name, []).append(timed(run))
    medians = {name: round(statistics.median(rates)) for name, rates in results.items()}
    return {
        "benchmark": "kernel",
        "unit": "messages/s (median)",
        "messages": messages,
        "repeat": repeat,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "results": medians,
        "topic_100k_over_topic_10": round(medians["topic_100k"] / medians["topic_10"], 3),
        "target_direct": 200_000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        result = trio.run(measure, args.messages, args.repeat, Path(tmp))
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
