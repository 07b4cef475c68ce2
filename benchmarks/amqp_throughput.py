"""AMQP end to end: pika publishers -> one durable queue -> pika consumers, herald and RabbitMQ.

    python benchmarks/amqp_throughput.py [--brokers herald,rabbitmq=5673] [--messages 40000]
        [--publishers 2] [--consumers 2] [--sizes 100,4096] [--rate 1000] [--seconds 5]
        [--store commitlog|memory] [--repeat 3] [--scenarios transient,persistent_confirms]

Prints one JSON object. herald runs in its own process (benchmarks/_common.py) so its CPU time
can be read with psutil; a peer is a broker already running at the given [host:]port
(guest/guest; host `--host`, 127.0.0.1 by default), its process found by that port when it
runs on this machine (elsewhere its CPU time is not reported). Each repetition runs every
scenario and size against each broker in turn, so the machine's noise hits them alike; figures
are medians.
Publishers and consumers are separate processes, one pika connection each:
- transient: BlockingConnection publishers, no confirms, transient messages;
- persistent_confirms: SelectConnection publishers with publisher confirms (up to `--window`
  unconfirmed each), persistent messages.
Both go to one durable queue. Consumers use prefetch 1000 and ack with `multiple` every 100
deliveries. Throughput runs send `--messages`; msgs_per_s counts from the common start to the
last delivery; broker_cpu_us_per_msg is the broker process's CPU time over that span per
message. Latency runs publish `--rate` msg/s in all for `--seconds`, each body starting with
its send time, and report p50/p99 of send -> delivery (the first 0.5 s left out).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import pika
from _common import (
    Address,
    Receipts,
    Shared,
    interleaved,
    maybe_herald,
    pace,
    parse_brokers,
    publisher_done,
    report,
    resolve_targets,
    run_clients,
    stamped_body,
    wait_start,
)

WARMUP = 0.5


def params(address: Address) -> pika.ConnectionParameters:
    host, port = address
    return pika.ConnectionParameters(host, port, heartbeat=0, socket_timeout=30)


# -- clients (each in its own process) ------------------------------------------------------
def consume(shared: Shared, address: Address, queue: str, stamped: bool, publishers: int) -> None:
    conn = pika.BlockingConnection(params(address))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=1000)
    receipts = Receipts(shared, stamped, WARMUP)
    pending = [0, 0]  # unacked deliveries, last delivery tag

    def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
        pending[0] += 1
        pending[1] = method.delivery_tag
        if pending[0] >= 100:
            ch.basic_ack(method.delivery_tag, multiple=True)
            pending[0] = 0
        receipts.got(body)

    channel.basic_consume(queue, on_message)
    shared.ready.release()
    while not receipts.should_stop(publishers):
        conn.process_data_events(time_limit=0.05)
    receipts.report()
    if pending[0]:
        channel.basic_ack(pending[1], multiple=True)
    conn.close()


def publish(
    shared: Shared,
    address: Address,
    queue: str,
    count: int,
    size: int,
    rate: float,
    index: int,
    n: int,
) -> None:
    conn = pika.BlockingConnection(params(address))
    channel = conn.channel()
    wait_start(shared)
    if rate:
        body, due = stamped_body(size), pace(shared, index, n, rate)
        for i in range(count):
            delay = due(i) - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            channel.basic_publish("", queue, body())
    else:
        payload = b"x" * size
        for _ in range(count):
            channel.basic_publish("", queue, payload)
    publisher_done(shared)
    conn.close()


def publish_confirmed(
    shared: Shared,
    address: Address,
    queue: str,
    count: int,
    size: int,
    rate: float,
    index: int,
    n: int,
    window: int,
) -> None:
    payload = b"x" * size
    body, due = stamped_body(size), pace(shared, index, n, rate or 1.0)
    properties = pika.BasicProperties(delivery_mode=2)
    state: dict[str, Any] = {"sent": 0, "acked": 0, "timer": None}

    def send_more() -> None:
        channel, now = state["channel"], time.perf_counter()
        while state["sent"] < count and state["sent"] - state["acked"] < window:
            if rate and due(state["sent"]) > now:
                if state["timer"] is None:
                    delay = due(state["sent"]) - now
                    state["timer"] = conn.ioloop.call_later(delay, on_timer)
                return
            channel.basic_publish("", queue, body() if rate else payload, properties)
            state["sent"] += 1

    def on_timer() -> None:
        state["timer"] = None
        send_more()

    def on_confirm(frame: Any) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            raise RuntimeError(f"publish nacked: {method}")
        state["acked"] = max(state["acked"], method.delivery_tag)
        if state["acked"] >= count:
            publisher_done(shared)
            conn.close()
        else:
            send_more()

    def on_confirming(_frame: Any) -> None:
        wait_start(shared)
        send_more()

    def on_channel(channel: Any) -> None:
        state["channel"] = channel
        channel.confirm_delivery(on_confirm, callback=on_confirming)

    conn = pika.SelectConnection(
        params(address),
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_close_callback=lambda c, exc: c.ioloop.stop(),
    )
    conn.ioloop.start()


# -- one run --------------------------------------------------------------------------------
def run(
    args: argparse.Namespace, address: Address, broker: Any, scenario: str, size: int, rate: float
) -> dict:
    """One scenario against one broker: declare a fresh durable queue, run, delete it."""
    queue = f"bench-{scenario}-{size}-{time.monotonic_ns()}"
    setup = pika.BlockingConnection(params(address))
    setup.channel().queue_declare(queue, durable=True)
    total = int(rate * args.seconds) if rate else args.messages
    shared = Shared(total)
    stamped = bool(rate)
    consumers = [(consume, (address, queue, stamped, args.publishers))] * args.consumers
    publishers: list[tuple[Callable, tuple]] = []
    for i in range(args.publishers):
        count = total // args.publishers + (total % args.publishers if i == 0 else 0)
        common = (address, queue, count, size, rate, i, args.publishers)
        if scenario == "persistent_confirms":
            publishers.append((publish_confirmed, (*common, args.window)))
        else:
            publishers.append((publish, common))
    try:
        result = run_clients(shared, consumers, publishers, broker)
    finally:
        setup.channel().queue_delete(queue)
        setup.close()
    if result["delivered"] != 1.0:
        raise RuntimeError(f"{scenario}: delivered {result['delivered']:.3f} of the messages")
    return result


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--brokers", default="herald", help="herald,rabbitmq=[HOST:]PORT")
    parser.add_argument("--host", default="127.0.0.1", help="peers' host unless they name one")
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--sizes", default="100,4096")
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=1000.0, help="latency runs; 0: none")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of a latency run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store", default="commitlog", choices=["memory", "commitlog"])
    parser.add_argument("--scenarios", default="transient,persistent_confirms")
    args = parser.parse_args(argv)
    brokers = parse_brokers(args.brokers, {"rabbitmq": 5672}, args.host)
    sizes = [int(s) for s in args.sizes.split(",")]
    runs = [(s, size, 0.0) for s in args.scenarios.split(",") for size in sizes]
    if args.rate:
        runs += [(s, size, args.rate) for s, size, _ in list(runs)]
    with maybe_herald(brokers, ["amqp"], args.store) as (ports, herald_process):
        targets = resolve_targets(brokers, ports, herald_process, "amqp")
        results = interleaved(
            args.repeat,
            runs,
            targets,
            lambda address, process, case: run(args, address, process, *case),
            lambda case: f"{case[0]}/{case[1]}B" + ("/latency" if case[2] else ""),
        )
    return report("amqp_throughput", ["pika"], args, brokers, results)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=2))
