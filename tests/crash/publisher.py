"""The child process of the kernel crash tests: an embedded broker on the commit-log store,
publishing persistent messages until it is killed.

`python -m tests.crash.publisher '<json>'` with keys: data_dir, settings (config overrides),
cycle, seed, publishers (tasks publishing to MAIN), shared (tasks publishing to the fanout
exchange BOTH, so to MAIN and WORK), window (messages per confirm at most), body_min,
body_max, lifetime (seconds before giving up on being killed), and optionally tear_at: the
child kills itself (SIGKILL) in the middle of copying its tear_at-th message record into the
log, after a random number of the record's bytes (at least 8, so the tail is not all zeros) —
a torn record for certain, where a kill from outside hits one only by luck.

It reports to the parent on stdout, one line each, flushed before anything else happens:

    R                  the broker is up and the queues are declared
    P <pub> <end>      publisher <pub> is about to publish seqs below <end>
    C <pub> <end>      publisher <pub>'s seqs below <end> are durable (confirmed)
    A <id>             the worker is about to ack <id> in WORK (acks are not confirmed)

A line the parent has read was written before the kill; "C" is written only after
`store.wait_durable(ticket)` returned, so it is a confirm the broker issued.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import sys
from collections.abc import Sequence
from typing import Any

import trio

from herald.core.consumer import Consumer
from herald.core.embedding import embedded
from herald.core.message import NATIVE_PROTOCOL, Message, Properties
from herald.core.queue import Queue, QueueEntry
from herald.core.vhost import VirtualHost
from herald.storage.mapped_file import MappedFile, Writer
from tests.crash.messages import BOTH, MAIN, WORK, make_body, message_id


def report(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class ChannelSink:
    """Hands deliveries to the worker task (bounded by the consumer's prefetch)."""

    protocol = NATIVE_PROTOCOL

    def __init__(self, send: trio.MemorySendChannel[QueueEntry]) -> None:
        self.send = send

    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        self.send.send_nowait(entry)

    def consumer_cancelled(self, consumer: Consumer) -> None:
        self.send.close()


async def publisher(broker: Any, vhost: VirtualHost, spec: dict[str, Any], number: int) -> None:
    rng = random.Random(f"{spec['seed']}/{spec['cycle']}/{number}")
    shared = number >= spec["publishers"]
    exchange, routing_key = (BOTH, "") if shared else ("", MAIN)
    seq = 0
    while True:
        await broker.alarms.wait_publish_allowed()
        end = seq + rng.randint(1, spec["window"])
        report(f"P {number} {end}")
        ticket = None
        for n in range(seq, end):
            mid = message_id(spec["cycle"], number, n)
            body = make_body(mid, rng.randint(spec["body_min"], spec["body_max"]))
            properties = Properties(delivery_mode=2, message_id=mid)
            message = Message.native(
                body, exchange=exchange, routing_key=routing_key, properties=properties
            )
            ticket = vhost.publish(message).ticket
        assert ticket is not None, "a persistent message to a durable queue has a ticket"
        await broker.store.wait_durable(ticket)
        report(f"C {number} {end}")
        seq = end


async def worker(queue: Queue, seed: str) -> None:
    rng = random.Random(seed)
    send, receive = trio.open_memory_channel[QueueEntry](math.inf)
    queue.add_consumer("worker", ChannelSink(send), prefetch_count=32)
    async for entry in receive:
        await trio.sleep(0)  # let the publishers run between acks
        if rng.random() < 0.05:
            queue.reject(entry, requeue=True)  # writes a delivery-count record
            continue
        report(f"A {entry.message.message_id}")
        queue.ack(entry)


def tearing(write: Writer, tear_at: int, rng: random.Random) -> Writer:
    """The store's write seam, dying half-way through the `tear_at`-th message record."""
    count = 0

    def write_or_die(file: MappedFile, at: int, parts: Sequence[bytes]) -> None:
        nonlocal count
        if len(parts) == 2 and len(parts[1]) >= 1024:  # a message record, not a filler
            count += 1
            if count == tear_at:
                data = b"".join(parts)
                size = int.from_bytes(data[:4], "big")  # the record without its padding
                cut = rng.randint(8, size - 1)
                write(file, at, [data[:cut]])
                os.kill(os.getpid(), signal.SIGKILL)
        write(file, at, parts)

    return write_or_die


async def main(spec: dict[str, Any]) -> None:
    async with embedded(data_dir=spec["data_dir"], settings=spec["settings"], plugins=[]) as broker:
        vhost = broker.default_vhost
        vhost.declare_queue(MAIN, durable=True)
        work = vhost.declare_queue(WORK, durable=True)
        vhost.declare_exchange(BOTH, "fanout", durable=True)
        vhost.bind_queue(MAIN, BOTH)
        vhost.bind_queue(WORK, BOTH)
        tear_at = spec.get("tear_at")
        if tear_at is not None:
            store: Any = broker.store
            rng = random.Random(f"{spec['seed']}/{spec['cycle']}/tear")
            store._write = tearing(store._write, tear_at, rng)
        report("R")
        with trio.move_on_after(spec["lifetime"]):
            async with trio.open_nursery() as nursery:
                for number in range(spec["publishers"] + spec["shared"]):
                    nursery.start_soon(publisher, broker, vhost, spec, number)
                nursery.start_soon(worker, work, f"{spec['seed']}/{spec['cycle']}/worker")
        os._exit(3)  # never killed: the parent is gone or stuck


if __name__ == "__main__":
    trio.run(main, json.loads(sys.argv[1]))
