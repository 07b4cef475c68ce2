"""Deep-queue benchmark: what a durable queue of millions of stored messages costs the broker.

    python benchmarks/deep_queue.py [--messages 10000000] [--small 10000] [--size 100]
                                    [--batch 5000] [--prefetch 1000] [--dir PATH]
                                    [--segment-mib 256] [--repeat-small 5] [--probe-reads 0]
                                    [--consumer kernel|pika]

Prints one JSON object. One process runs an embedded broker on the commit-log store (a fresh
data dir in a temporary directory, removed at the end) with one durable queue per scenario:

- small: publish `small` persistent `size`-byte messages through the kernel API
  (`vhost.publish`), awaiting durability every `batch` messages, then drain them with one
  consumer (prefetch `prefetch`) that acks every delivery; `repeat_small` times, median rate;
- deep: the same with `messages` messages; after publishing, the broker process's RSS
  (psutil, after `gc.collect()`) is reported, with the RSS before publishing and the
  difference per message; then the drain rate, and `drain_ratio` = deep rate / small rate.

Drain rates are given per wall-clock second and per CPU second of the process (`process_time`,
all threads): on a shared machine the second is the one to compare, as other processes' load
does not change it. The consumer acks what it was delivered in a Trio task, a prefetch window
at a time (as a protocol session would), so the broker's background service (flushes,
checkpoints, retention) runs during the drain as it would in production.

Each drain also reports how many garbage collections ran during it (`gc_collections`, per
generation). `--probe-reads B` (off by default, so the drains are measured as without it) first
reads the deep queue's first B batches of `queues.load_batch` messages back without consuming
them, as browsing does, and reports the CPU time per message of the store's `read_queue` and
of the queue's whole read-back step (`read_queue` plus making the queue entries), the median
over the batches.

`--consumer pika` drains with a real client instead: the broker also runs its AMQP plugin on
a free loopback port, the messages are published in AMQP's stored form (as a pika
publisher's are: no conversion on delivery), and each drain is one pika process
(BlockingConnection, basic.qos `prefetch`, an ack with `multiple` every 100 deliveries, as
amqp_throughput.py's consumers), so a drain costs the broker what a remote consumer costs
it. The rates are then the client's (first to last delivery) and the broker's CPU per
message (this process only: the client is another process). The in-process consumer
(`kernel`, the default) is the harder test of the two: with no protocol work per message,
the read-back of a swapped queue weighs most.

The issue's targets: deep RSS <= 200 MB at 10 M messages, drain_ratio >= 0.8.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import trio

from herald.core.broker import Broker
from herald.core.consumer import Consumer
from herald.core.embedding import embedded
from herald.core.message import Message, Properties
from herald.core.queue import Queue, QueueEntry
from herald.core.swap import SwappedRange

PERSISTENT = Properties(delivery_mode=2)
MIB = 1024 * 1024


class BatchAckSink:
    """Keeps deliveries until the consumer task acks them (a prefetch window at a time)."""

    protocol = "herald"

    def __init__(self) -> None:
        self.pending: list[QueueEntry] = []
        self.acked = 0

    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        self.pending.append(entry)

    def consumer_cancelled(self, consumer: Consumer) -> None:
        pass

    def ack_pending(self) -> int:
        """Ack what was delivered so far (what the acks deliver meanwhile waits for the next
        call, after the caller yielded)."""
        batch, self.pending = self.pending, []
        for entry in batch:
            entry.queue.ack(entry)
        self.acked += len(batch)
        return len(batch)


def memory() -> dict[str, int]:
    """RSS of this process after a full collection, and its anonymous / file-backed parts."""
    gc.collect()
    info: dict[str, int] = {"rss": psutil.Process().memory_info().rss}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(("RssAnon:", "RssFile:", "RssShmem:")):
                    name, value, _unit = line.split()
                    info[name[:-1].lower()] = int(value) * 1024
    except OSError:
        pass
    return info


async def publish(
    broker: Broker, queue: str, count: int, size: int, batch: int, protocol: str | None = None
) -> float:
    """Publish `count` persistent messages to `queue`; returns msgs/s (durable). With a
    `protocol`, the messages are in its stored form, as its publishers' would be (so that its
    consumers get them without a conversion), each body its own bytes (its number, padded):
    sharing one would keep the loaded ones in the CPU's cache; otherwise they are native
    messages."""
    vhost = broker.default_vhost
    store = broker.store
    body = b"x" * size
    native = partial(Message.native, body, exchange="", routing_key=queue, properties=PERSISTENT)
    model = native()
    head = b""
    if protocol is not None:
        raw = broker.codecs.encode(protocol, model.decoded(broker.codecs), model)
        head = raw[: len(raw) - size]  # what precedes the body in the protocol's stored form

    def make(n: int) -> Message:
        if protocol is None:
            return native()
        body = (b"%0*d" % (size, n))[-size:] if size else b""  # its number, in `size` bytes
        return Message(protocol, head + body, "", queue, size, persistent=True)

    send = vhost.publish
    start = time.perf_counter()
    ticket = 0
    for n in range(count):
        result = send(make(n))
        if result.ticket is not None:
            ticket = result.ticket
        if (n + 1) % batch == 0:
            await store.wait_durable(ticket)
    await store.wait_durable(ticket)
    return count / (time.perf_counter() - start)


def collections() -> list[int]:
    """Garbage collections so far, per generation."""
    return [generation["collections"] for generation in gc.get_stats()]


async def drain(queue: Queue, count: int, prefetch: int) -> tuple[float, float, list[int]]:
    """Consume and ack `count` messages from `queue`; returns (msgs per second, msgs per
    CPU second of this process: what the rate would be with a core to itself, and the
    garbage collections per generation meanwhile)."""
    sink = BatchAckSink()
    collected = collections()
    start, cpu = time.perf_counter(), time.process_time()
    consumer = queue.add_consumer("bench", sink, prefetch_count=prefetch)
    while sink.acked < count:
        if not sink.ack_pending():
            raise RuntimeError(f"drain stalled at {sink.acked} of {count} messages")
        await trio.lowlevel.checkpoint()  # let the broker's services run between windows
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    collected = [after - before for before, after in zip(collected, collections(), strict=True)]
    queue.remove_consumer(consumer)
    assert queue.message_count == 0, queue.message_count
    return count / elapsed, count / cpu, collected


CONSUME = """
import json, sys, time, pika
port, queue, count, prefetch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", int(port)))
channel = connection.channel()
channel.basic_qos(prefetch_count=prefetch)
seen, first = 0, None
def on_message(channel, method, properties, body):
    global seen, first
    if first is None:
        first = time.perf_counter()
    seen += 1
    if seen % 100 == 0 or seen == count:
        channel.basic_ack(method.delivery_tag, multiple=True)
    if seen == count:
        channel.stop_consuming()
channel.basic_consume(queue, on_message)
channel.start_consuming()
elapsed = time.perf_counter() - first
connection.close()
print(json.dumps({"seconds": elapsed}))
"""
"""A pika consumer process: drains `count` messages, prints the seconds from its first to
its last delivery."""


async def drain_pika(
    queue: Queue, port: int, count: int, prefetch: int
) -> tuple[float, float, list[int]]:
    """`drain` with a pika consumer in another process: (its msgs per second, msgs per CPU
    second of this broker process from the consumer's basic.consume to the last ack, garbage
    collections meanwhile). The broker's CPU is read by a task that looks every millisecond,
    so the connection's set-up and close are left out, as the kernel drain leaves them out."""
    collected = collections()
    command = [sys.executable, "-c", CONSUME, str(port), queue.name, str(count), str(prefetch)]
    cpu: list[float] = []

    async def watch() -> None:
        while not queue.consumers:
            await trio.sleep(0.001)
        cpu.append(time.process_time())
        while queue.message_count or queue.unacked_count:
            await trio.sleep(0.001)
        cpu.append(time.process_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        done = await trio.run_process(command, capture_stdout=True)
    collected = [after - before for before, after in zip(collected, collections(), strict=True)]
    seconds = json.loads(done.stdout)["seconds"]
    return count / seconds, count / (cpu[1] - cpu[0]), collected


def probe_reads(broker: Broker, queue: Queue, count: int, batches: int) -> dict[str, float]:
    """CPU µs per message of reading the queue's first `batches` batches back (median)."""
    batch = broker.config.queues.load_batch
    store, queue_id = broker.store, queue.store_id
    assert queue_id is not None
    store_times, swap_times = [], []
    for n in range(min(batches, count // batch)):
        first = n * batch
        start = time.process_time()
        stored = store.read_queue(queue_id, first, count - 1, batch)
        middle = time.process_time()
        view = SwappedRange(first, count - 1, count - first, 0, SwappedRange.now_offset(), queue_id)
        entries = queue.swap.read(view, batch)  # detached entries, as browsing makes
        end = time.process_time()
        assert len(stored) == len(entries) == batch
        del stored, entries
        store_times.append((middle - start) / batch * 1e6)
        swap_times.append((end - middle) / batch * 1e6)
    return {
        "batches": len(store_times),
        "read_queue_cpu_us_per_msg": round(statistics.median(store_times), 3),
        "read_back_cpu_us_per_msg": round(statistics.median(swap_times), 3),
    }


async def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    settings = [
        'store.backend="commitlog"',
        f"commitlog.segment_size={args.segment_mib * MIB}",
        'broker.log_level="warning"',
    ]
    pika = args.consumer == "pika"
    if pika:
        settings += ['amqp.host="127.0.0.1"', "amqp.port=0"]
    plugins = ["amqp"] if pika else []
    protocol = "amqp" if pika else None
    async with embedded(data_dir=data_dir, plugins=plugins, settings=settings) as broker:
        vhost = broker.default_vhost

        async def drain_queue(queue: Queue, count: int) -> tuple[float, float, list[int]]:
            if pika:
                return await drain_pika(queue, broker.listeners[0].port, count, args.prefetch)
            return await drain(queue, count, args.prefetch)

        small_publish, small_drain, small_cpu, small_gc = [], [], [], [0, 0, 0]
        for n in range(args.repeat_small):
            name = f"small-{n}"
            queue = vhost.declare_queue(name, durable=True)
            small_publish.append(
                await publish(broker, name, args.small, args.size, args.batch, protocol)
            )
            rate, cpu_rate, collected = await drain_queue(queue, args.small)
            small_drain.append(rate)
            small_cpu.append(cpu_rate)
            small_gc = [a + b for a, b in zip(small_gc, collected, strict=True)]
            vhost.delete_queue(name)
        gc.collect()
        before = memory()
        queue = vhost.declare_queue("deep", durable=True)
        started = time.perf_counter()
        deep_publish = await publish(broker, "deep", args.messages, args.size, args.batch, protocol)
        published_seconds = time.perf_counter() - started
        full = memory()
        stats = queue.statistics()
        store_stats = broker.store.statistics()
        probe = args.probe_reads and probe_reads(broker, queue, args.messages, args.probe_reads)
        deep_drain, deep_cpu, deep_gc = await drain_queue(queue, args.messages)
        drained = memory()
        small_rate = statistics.median(small_drain)
        small_cpu_rate = statistics.median(small_cpu)
        return {
            "small": {
                "messages": args.small,
                "publish_msgs_per_s": round(statistics.median(small_publish)),
                "drain_msgs_per_s": round(small_rate),
                "drain_runs": [round(r) for r in small_drain],
                "drain_msgs_per_cpu_s": round(small_cpu_rate),
                "drain_cpu_runs": [round(r) for r in small_cpu],
                "gc_collections": small_gc,
            },
            "deep": {
                "messages": args.messages,
                "publish_msgs_per_s": round(deep_publish),
                "publish_seconds": round(published_seconds, 1),
                "swapped": stats.messages_swapped,
                "store_messages": store_stats.messages,
                "log_bytes": store_stats.appended_ticket,
                "memory_before": before,
                "memory_full": full,
                "memory_drained": drained,
                "rss_mb": round(full["rss"] / 1e6, 1),
                "rss_growth_bytes_per_msg": round((full["rss"] - before["rss"]) / args.messages, 2),
                "drain_msgs_per_s": round(deep_drain),
                "drain_msgs_per_cpu_s": round(deep_cpu),
                "gc_collections": deep_gc,
                **({"read_probe": probe} if args.probe_reads else {}),
            },
            "drain_ratio": round(deep_drain / small_rate, 3),
            "drain_ratio_cpu": round(deep_cpu / small_cpu_rate, 3),
        }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="herald-deep-", dir=args.dir))
    try:
        result = await run(args, base / "data")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {
        "benchmark": "deep_queue",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "load_average": os.getloadavg(),
        "size": args.size,
        "batch": args.batch,
        "prefetch": args.prefetch,
        "consumer": args.consumer,
        **result,
    }


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=100, help="body bytes per message")
    parser.add_argument("--batch", type=int, default=5_000, help="publishes per durable wait")
    parser.add_argument("--prefetch", type=int, default=1_000)
    parser.add_argument("--repeat-small", type=int, default=5)
    parser.add_argument("--segment-mib", type=int, default=256)
    parser.add_argument(
        "--probe-reads", type=int, default=0, help="batches read back before the deep drain"
    )
    parser.add_argument(
        "--consumer", choices=["kernel", "pika"], default="kernel", help="who drains the queues"
    )
    parser.add_argument("--dir", default=None, help="where the data dir goes (default: $TMPDIR)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(trio.run(main, parse(sys.argv[1:])), indent=2))
