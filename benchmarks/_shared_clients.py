"""The client processes of shared_queue.py: pika publishers with confirms and acking consumers,
each process holding several SelectConnections on one ioloop, spread over a cluster's nodes.

A run is one queue on one broker (a standalone node's classic queue, or a cluster's shared
queue declared on every node). Consumers subscribe first; publishers connect; then the CPU
of every broker process is read and all start together. Publishers send persistent messages,
each body starting with its send time (perf_counter, system-wide on Linux), for `seconds`
(at most `window` unconfirmed per connection) or, paced, `rate` msg/s per connection; each
reports how many it sent and had confirmed. This process then waits for the consumers'
shared delivery count to reach every message sent (the drain), tells them to stop, and reads
the CPU again: a run's figures cover publish, slots, delivery and acks end to end.

Many connections to a process, as ha_throughput.py does, because a process per client would
make this 2-core box's scheduler the benchmark; `publisher_busy` / `consumer_busy` (the
busiest client process's CPU share) say whether the clients set the pace.
"""

from __future__ import annotations

import collections
import multiprocessing as mp
import queue as queues
import time
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import pika
from _common import STAMP, Address, cpu_seconds, latency_ms, stamped_body
from pika.adapters.select_connection import IOLoop

RUN_TIMEOUT_S = 120.0
"""Hang guard for publishing and for the drain, each."""
LATENCY_WARMUP_S = 0.5
TICK_S = 0.05
"""A consumer flushes its acks and its delivery count this often."""


@dataclass
class Start:
    """What a run's client processes share with the benchmark."""

    ready: Any
    go: Any
    began: Any
    stop: Any
    delivered: Any
    results: Any

    @classmethod
    def make(cls) -> Start:
        return cls(
            mp.Semaphore(0), mp.Event(), mp.Value("d", 0.0), mp.Event(), mp.Value("q", 0),
            mp.Queue(),
        )  # fmt: skip


def _params(address: Address) -> pika.ConnectionParameters:
    host, port = address
    return pika.ConnectionParameters(host, port, heartbeat=0, socket_timeout=30)


def _wait_go(start: Start, failed: list[str]) -> float:
    """Connected (or failed): say so, wait for the common start; the CPU time then."""
    start.ready.release()
    if failed:
        start.results.put({"error": failed[0]})
        raise SystemExit(1)
    start.go.wait()
    cpu = time.process_time()
    delay = start.began.value - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
    return cpu


def publisher(
    start: Start, targets: list[Address], queue: str, size: int, window: int,
    seconds: float, rate: float,
) -> None:  # fmt: skip
    """One process, a connection per target: persistent messages with confirms for `seconds`
    (at most `window` unconfirmed each) or, when `rate` > 0, `rate` msg/s each, paced."""
    body = stamped_body(size)
    properties = pika.BasicProperties(delivery_mode=2)
    ioloop = IOLoop()
    opened, done = [0], [0]
    failed: list[str] = []

    class Link:
        def __init__(self, address: Address) -> None:
            self.sent = self.confirmed = self.nacked = 0
            self.last = 0.0
            self.finished = False
            self.outstanding: collections.deque[int] = collections.deque()
            self.timer: Any = None
            self.channel: Any = None
            self.connection = pika.SelectConnection(
                _params(address),
                on_open_callback=lambda c: c.channel(on_open_callback=self.on_channel),
                on_open_error_callback=lambda _c, exc: self.fail(f"connect: {exc!r}"),
                on_close_callback=self.on_close,
                custom_ioloop=ioloop,
            )

        def fail(self, why: str) -> None:
            failed.append(why)
            ioloop.stop()

        def on_close(self, _connection: Any, exc: Any) -> None:
            if not self.finished:
                self.fail(f"closed after {self.confirmed} confirms: {exc!r}")

        def on_channel(self, channel: Any) -> None:
            self.channel = channel
            channel.confirm_delivery(self.on_confirm, callback=self.on_confirming)

        def on_confirming(self, _frame: Any) -> None:
            opened[0] += 1
            if opened[0] == len(links):
                ioloop.stop()  # every channel in confirm mode: wait for the common start

        def due(self) -> float:
            """When the next message may go (0: now); inf: no more."""
            began = start.began.value
            if rate:
                return began + self.sent / rate if self.sent < rate * seconds else float("inf")
            if time.perf_counter() >= began + seconds:
                return float("inf")
            return 0.0 if len(self.outstanding) < window else float("inf")

        def send_more(self) -> None:
            while (due := self.due()) <= time.perf_counter():
                self.channel.basic_publish("", queue, body(), properties)
                self.sent += 1
                self.outstanding.append(self.sent)
            if due != float("inf") and self.timer is None:
                self.timer = ioloop.call_later(due - time.perf_counter(), self.on_timer)
            self.check_done()

        def on_timer(self) -> None:
            self.timer = None
            self.send_more()

        def check_done(self) -> None:
            ended = time.perf_counter() >= start.began.value + seconds
            if rate:
                ended = self.sent >= rate * seconds
            if ended and not self.outstanding and not self.finished:
                self.finished = True
                done[0] += 1
                if done[0] == len(links):
                    ioloop.stop()

        def on_confirm(self, frame: Any) -> None:
            method = frame.method
            tag = method.delivery_tag
            settled = 0
            if method.multiple:
                while self.outstanding and self.outstanding[0] <= tag:
                    self.outstanding.popleft()
                    settled += 1
            elif tag in self.outstanding:
                self.outstanding.remove(tag)
                settled = 1
            if isinstance(method, pika.spec.Basic.Ack):
                self.confirmed += settled
            else:
                self.nacked += settled
            self.last = time.perf_counter()
            self.send_more()

    links = [Link(address) for address in targets]
    ioloop.start()  # until every channel is in confirm mode (or a failure)
    cpu_at_start = _wait_go(start, failed)
    for link in links:
        link.send_more()

    def at_the_end() -> None:  # a link whose window never filled ends here
        for link in links:
            link.check_done()

    ioloop.call_later(
        max(0.0, start.began.value + seconds - time.perf_counter()) + 0.01, at_the_end
    )
    ioloop.start()  # until every message is settled (or a failure)
    report: dict[str, Any] = {
        "role": "publisher",
        "sent": sum(link.sent for link in links),
        "confirmed": sum(link.confirmed for link in links),
        "nacked": sum(link.nacked for link in links),
        "last": max(link.last for link in links),
        "cpu": time.process_time() - cpu_at_start,
    }
    if failed:
        report["error"] = failed[0]
    start.results.put(report)
    for link in links:
        link.finished = True
        with suppress(Exception):
            link.connection.close()
    with suppress(Exception):
        ioloop.call_later(0.2, ioloop.stop)
        ioloop.start()  # let the closes go out


def consumer(
    start: Start, targets: list[Address], queue: str, prefetch: int, ack_every: int
) -> None:
    """One process, a connection per target, each consuming `queue` with `prefetch` and acking
    with `multiple` every `ack_every` deliveries (and every TICK_S); times each delivery
    against the send time its body starts with."""
    ioloop = IOLoop()
    opened = [0]
    failed: list[str] = []
    stopping = [False]
    count = [0, 0]  # deliveries, of which added to the shared count
    state: dict[str, Any] = {"last": 0.0, "redelivered": 0, "latencies": []}

    class Link:
        def __init__(self, address: Address) -> None:
            self.name = f"{address[0]}:{address[1]}"
            self.count = 0
            self.pending = 0
            self.tag = 0
            self.channel: Any = None
            self.connection = pika.SelectConnection(
                _params(address),
                on_open_callback=lambda c: c.channel(on_open_callback=self.on_channel),
                on_open_error_callback=lambda _c, exc: self.fail(f"connect: {exc!r}"),
                on_close_callback=self.on_close,
                custom_ioloop=ioloop,
            )

        def fail(self, why: str) -> None:
            failed.append(why)
            ioloop.stop()

        def on_close(self, _connection: Any, exc: Any) -> None:
            if not stopping[0]:
                self.fail(f"{self.name} closed after {self.count} deliveries: {exc!r}")

        def on_channel(self, channel: Any) -> None:
            self.channel = channel
            channel.basic_qos(prefetch_count=prefetch, callback=self.on_qos)

        def on_qos(self, _frame: Any) -> None:
            self.channel.basic_consume(queue, self.on_message, callback=self.on_consuming)

        def on_consuming(self, _frame: Any) -> None:
            opened[0] += 1
            if opened[0] == len(links):
                ioloop.stop()  # every consumer subscribed: tell the benchmark

        def on_message(self, channel: Any, method: Any, _props: Any, body: bytes) -> None:
            now = time.perf_counter()
            self.count += 1
            count[0] += 1
            state["last"] = now
            if method.redelivered:
                state["redelivered"] += 1
            sent = STAMP.unpack_from(body)[0]
            if sent - start.began.value >= LATENCY_WARMUP_S:
                state["latencies"].append(now - sent)
            self.pending += 1
            self.tag = method.delivery_tag
            if self.pending >= ack_every:
                self.ack()

        def ack(self) -> None:
            if self.pending:
                self.channel.basic_ack(self.tag, multiple=True)
                self.pending = 0

    def tick() -> None:
        for link in links:
            link.ack()
        if count[0] > count[1]:
            with start.delivered.get_lock():
                start.delivered.value += count[0] - count[1]
            count[1] = count[0]
        if start.stop.is_set():
            ioloop.stop()
        else:
            ioloop.call_later(TICK_S, tick)

    links = [Link(address) for address in targets]
    ioloop.start()  # until every link consumes (or a failure)
    cpu_at_start = _wait_go(start, failed)
    ioloop.call_later(TICK_S, tick)
    ioloop.start()  # until told to stop (or a failure)
    by_node: collections.Counter[str] = collections.Counter()
    for link in links:
        by_node[link.name] += link.count
    report = {
        "role": "consumer",
        "count": count[0],
        "by_node": dict(by_node),
        "cpu": time.process_time() - cpu_at_start,
        **state,
    }
    if failed:
        report["error"] = failed[0]
    start.results.put(report)
    stopping[0] = True
    for link in links:
        with suppress(Exception):
            link.connection.close()
    with suppress(Exception):
        ioloop.call_later(0.2, ioloop.stop)
        ioloop.start()


def spread(nodes: list[Address], connections: int, processes: int) -> list[list[Address]]:
    """`connections` spread evenly over `nodes` (in node order), then dealt to `processes`
    in turn, so each process gets about as many connections to each node."""
    per_node = [nodes[i * len(nodes) // connections] for i in range(connections)]
    return [c for c in (per_node[p::processes] for p in range(processes)) if c]


@dataclass
class Clients:
    """A run's clients: each publisher process's and consumer process's connections."""

    publishers: list[list[Address]]
    consumers: list[list[Address]]
    size: int = 100
    window: int = 100
    prefetch: int = 100
    ack_every: int = 10


def run_clients(
    clients: Clients, queue: str, cpus: dict[str, Any], seconds: float, rate: float = 0.0
) -> dict[str, Any]:
    """One run on a declared, empty `queue`: the figures. `cpus` names the processes whose
    CPU time is read at the start and after the drain (`node:*` ones are summed)."""
    start = Start.make()
    consumers = [
        mp.Process(
            target=consumer,
            args=(start, c, queue, clients.prefetch, clients.ack_every),
            daemon=True,
        )
        for c in clients.consumers
    ]
    publishers = [
        mp.Process(
            target=publisher,
            args=(start, p, queue, clients.size, clients.window, seconds, rate),
            daemon=True,
        )
        for p in clients.publishers
    ]
    workers = consumers + publishers
    reports: list[dict[str, Any]] = []

    def collect(role: str, wanted: int, timeout: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while sum(1 for r in reports if r["role"] == role) < wanted:
            try:
                reports.append(start.results.get(timeout=0.5))
            except queues.Empty:
                dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"{role}s failed or hung (exit codes {dead})") from None
            errors = [r["error"] for r in reports if "error" in r]
            if errors:
                raise RuntimeError(f"a client failed: {errors[0]}")
        return [r for r in reports if r["role"] == role]

    try:
        for group in (consumers, publishers):
            for worker in group:
                worker.start()
            for _ in group:
                if not start.ready.acquire(timeout=60):
                    raise TimeoutError("a client process did not connect")
        before = {name: cpu_seconds(p) for name, p in cpus.items()}
        start.began.value = time.perf_counter() + 0.05
        start.go.set()
        pubs = collect("publisher", len(publishers), seconds + RUN_TIMEOUT_S)
        sent = sum(r["sent"] for r in pubs)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while start.delivered.value < sent:
            if time.monotonic() > deadline or any(w.exitcode for w in consumers):
                raise RuntimeError(f"drain: {start.delivered.value} of {sent} delivered")
            time.sleep(TICK_S)
        start.stop.set()
        cons = collect("consumer", len(consumers), RUN_TIMEOUT_S)
        after = {name: cpu_seconds(p) for name, p in cpus.items()}
        for worker in workers:
            worker.join(10)
    finally:
        start.stop.set()
        for worker in workers:
            if worker.is_alive():
                worker.kill()
    return figures(start.began.value, pubs, cons, before, after)


def figures(
    began: float, pubs: list[dict[str, Any]], cons: list[dict[str, Any]],
    before: dict[str, float], after: dict[str, float],
) -> dict[str, Any]:  # fmt: skip
    delivered = sum(r["count"] for r in cons)
    confirmed = sum(r["confirmed"] for r in pubs)
    nacked = sum(r["nacked"] for r in pubs)
    if nacked or confirmed != sum(r["sent"] for r in pubs):
        raise RuntimeError(f"{nacked} nacked, {confirmed} confirmed of the messages sent")
    last = max(r["last"] for r in cons)
    spent = {name: after[name] - before[name] for name in before}
    nodes = sum(v for k, v in spent.items() if k.startswith("node:"))
    by_node: collections.Counter[str] = collections.Counter()
    for r in cons:
        by_node.update(r["by_node"])
    result: dict[str, Any] = {
        "msgs_per_s": delivered / (last - began),
        "publish_msgs_per_s": confirmed / (max(r["last"] for r in pubs) - began),
        "delivered": delivered,
        "redelivered": sum(r["redelivered"] for r in cons),
        "cpu_us_per_msg": nodes / delivered * 1e6,
        "nodes_cpu_share": nodes / (last - began),
        "publisher_busy": max(r["cpu"] / max(r["last"] - began, 1e-9) for r in pubs),
        "consumer_busy": max(r["cpu"] / max(last - began, 1e-9) for r in cons),
        "delivered_share_by_node": {
            name: round(n / delivered, 3) for name, n in sorted(by_node.items())
        },
    }
    for name, seconds in spent.items():
        if not name.startswith("node:"):
            result[f"{name}_cpu_us_per_msg"] = seconds / delivered * 1e6
    latencies = [x for r in cons for x in r["latencies"]]
    if latencies:
        result.update(latency_ms(latencies))
    return result
