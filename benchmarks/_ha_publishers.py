"""The publisher processes of ha_throughput.py: pika connections with confirms, 16 to an
ioloop, started together and reporting msg/s and latency."""

from __future__ import annotations

import collections
import multiprocessing as mp
import queue as queues
import time
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import pika
from _common import Address, cpu_seconds
from cluster_overhead import (
    ThreadCpu,
)
from pika.adapters.select_connection import IOLoop

RUN_TIMEOUT_S = 300.0
LATENCY_WARMUP_S = 0.5


@dataclass
class Start:
    """What the publisher processes share with this one: readiness, the common start time, and
    a queue for each process's report."""

    ready: Any
    go: Any
    began: Any
    results: Any

    @classmethod
    def make(cls) -> Start:
        return cls(mp.Semaphore(0), mp.Event(), mp.Value("d", 0.0), mp.Queue())


def publisher(
    start: Start,
    address: Address,
    queue: str,
    counts: list[int],
    size: int,
    window: int,
    rate: float,
) -> None:
    """One process: a pika SelectConnection per entry of `counts` on one ioloop, each sending
    its count of persistent messages with confirms, at most `window` unconfirmed, or (rate > 0)
    one every 1/rate s, timing each publish -> confirm."""
    host, port = address
    params = pika.ConnectionParameters(host, port, heartbeat=0, socket_timeout=30)
    properties = pika.BasicProperties(delivery_mode=2)
    payload = b"x" * size
    ioloop = IOLoop()
    report: dict[str, Any] = {"confirmed": 0, "nacked": 0, "last": 0.0, "latencies": []}
    opened = [0]
    done = [0]
    failed: list[str] = []

    class Link:
        def __init__(self, count: int) -> None:
            self.count = count
            self.sent = 0
            self.settled = 0
            self.outstanding: collections.deque[tuple[int, float]] = collections.deque()
            self.timer: Any = None
            self.channel: Any = None
            self.connection = pika.SelectConnection(
                params,
                on_open_callback=lambda c: c.channel(on_open_callback=self.on_channel),
                on_open_error_callback=self.on_error,
                on_close_callback=self.on_close,
                custom_ioloop=ioloop,
            )

        def on_error(self, _connection: Any, exc: Any) -> None:
            failed.append(f"connect: {exc!r}")
            ioloop.stop()

        def on_close(self, _connection: Any, exc: Any) -> None:
            if self.settled < self.count:
                failed.append(f"closed after {self.settled} of {self.count}: {exc!r}")
                ioloop.stop()

        def on_channel(self, channel: Any) -> None:
            self.channel = channel
            channel.confirm_delivery(self.on_confirm, callback=self.on_confirming)

        def on_confirming(self, _frame: Any) -> None:
            opened[0] += 1
            if opened[0] == len(links):
                ioloop.stop()  # every channel in confirm mode: wait for the common start

        def send_more(self) -> None:
            now = time.perf_counter()
            while self.sent < self.count and (rate or self.sent - self.settled < window):
                if rate:
                    due = start.began.value + self.sent / rate
                    if due > now:
                        if self.timer is None:
                            self.timer = ioloop.call_later(due - now, self.on_timer)
                        return
                self.channel.basic_publish("", queue, payload, properties)
                self.sent += 1
                self.outstanding.append((self.sent, time.perf_counter()))

        def on_timer(self) -> None:
            self.timer = None
            self.send_more()

        def on_confirm(self, frame: Any) -> None:
            now = time.perf_counter()
            method = frame.method
            ok = isinstance(method, pika.spec.Basic.Ack)
            tag = method.delivery_tag
            settled = []
            if method.multiple:
                while self.outstanding and self.outstanding[0][0] <= tag:
                    settled.append(self.outstanding.popleft())
            else:
                for entry in self.outstanding:
                    if entry[0] == tag:
                        self.outstanding.remove(entry)
                        settled.append(entry)
                        break
            self.settled += len(settled)
            report["confirmed" if ok else "nacked"] += len(settled)
            report["last"] = now
            if rate and ok:
                cut = start.began.value + LATENCY_WARMUP_S
                report["latencies"] += [now - sent for _, sent in settled if sent >= cut]
            if self.settled >= self.count:
                done[0] += 1
                if done[0] == len(links):
                    ioloop.stop()
            else:
                self.send_more()

    links = [Link(count) for count in counts]
    ioloop.start()  # until every channel is in confirm mode (or a failure)
    if failed:
        start.ready.release()
        start.results.put({"error": failed[0]})
        return
    start.ready.release()
    start.go.wait()
    cpu_at_start = time.process_time()
    delay = start.began.value - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
    for link in links:
        link.send_more()
    ioloop.start()  # until every message is settled (or a failure)
    report["cpu"] = time.process_time() - cpu_at_start
    if failed:
        report["error"] = failed[0]
    start.results.put(report)
    for link in links:
        with suppress(Exception):
            link.connection.close()
    with suppress(Exception):
        ioloop.call_later(0.2, ioloop.stop)
        ioloop.start()  # let the closes go out


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def run_clients(
    address: Address,
    cpus: dict[str, ThreadCpu],
    size: int,
    total: int,
    connections: int,
    processes: int,
    window: int,
    rate: float,
) -> dict[str, Any]:
    """One run against one broker: a fresh durable queue, the publisher processes, the
    figures; the queue is deleted afterwards."""
    queue = f"ha-{size}-{time.monotonic_ns()}"
    host, port = address
    setup = pika.BlockingConnection(pika.ConnectionParameters(host, port, heartbeat=0))
    setup.channel().queue_declare(queue, durable=True)
    per_connection = split(total, connections)
    start = Start.make()
    workers = [
        mp.Process(
            target=publisher,
            args=(start, address, queue, counts, size, window, rate),
            daemon=True,
        )
        for counts in (per_connection[i::processes] for i in range(processes))
        if counts
    ]
    reports: list[dict[str, Any]] = []
    try:
        for worker in workers:
            worker.start()
        for _ in workers:
            if not start.ready.acquire(timeout=60):
                raise TimeoutError("a publisher process did not connect")
        before = {name: cpu_seconds(p) for name, p in cpus.items()}
        start.began.value = time.perf_counter() + 0.05
        start.go.set()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while len(reports) < len(workers):
            try:
                reports.append(start.results.get(timeout=1.0))
            except queues.Empty:
                dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"publishers failed or hung (exit codes {dead})") from None
        after = {name: cpu_seconds(p) for name, p in cpus.items()}
        for worker in workers:
            worker.join(10)
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
        with suppress(Exception):
            setup.channel().queue_delete(queue)
            setup.close()
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        raise RuntimeError(f"a publisher failed: {errors[0]}")
    confirmed = sum(r["confirmed"] for r in reports)
    seconds = max(r["last"] for r in reports) - start.began.value
    result: dict[str, Any] = {
        "msgs_per_s": confirmed / seconds if confirmed else 0.0,
        "confirmed": confirmed,
        "nacked": sum(r["nacked"] for r in reports),
        "publisher_busy": max(r["cpu"] / max(r["last"] - start.began.value, 1e-9) for r in reports),
    }
    for name in cpus:
        result[f"{name}_cpu_us_per_msg"] = (after[name] - before[name]) / max(confirmed, 1) * 1e6
    if "slave" in cpus:
        result["group_cpu_us_per_msg"] = (
            result["master_cpu_us_per_msg"] + result["slave_cpu_us_per_msg"]
        )
    latencies = sorted(x for r in reports for x in r["latencies"])
    if latencies:

        def at(q: float) -> float:
            return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3

        result.update(
            p50_ms=at(0.5), p99_ms=at(0.99), p999_ms=at(0.999), max_ms=latencies[-1] * 1e3
        )
        result["samples"] = len(latencies)
    return result


# -- the benchmark --------------------------------------------------------------------------
