"""STOMP end to end with stomp.py clients: SEND -> /queue/ -> client-individual acks, herald
against RabbitMQ's STOMP plugin.

    python benchmarks/stomp_throughput.py [--brokers herald,rabbitmq=61614] [--messages 20000]
        [--publishers 2] [--consumers 2] [--sizes 100,4096] [--rate 1000] [--seconds 5]
        [--persistent] [--store commitlog|memory] [--repeat 3]

Prints one JSON object. herald runs in its own process with the stomp plugin
(benchmarks/_common.py); a peer is a broker already running at the given [host:]port (host
`--host`, 127.0.0.1 by default; guest/guest, virtual host "/"), its process found by that port
for its CPU time when local. Clients are
stomp.py processes speaking STOMP 1.2 without heart-beats, with TCP_NODELAY set: publishers
SEND to one `/queue/<name>` as fast as the socket takes it (`--persistent`: persistent:true);
consumers SUBSCRIBE to it with `ack:client-individual` and `prefetch-count` 1000 and ACK every
MESSAGE from stomp.py's receiver thread. Each repetition runs every size against each broker
in turn (noise hits them alike); figures are medians. msgs_per_s counts from the common start
to the last delivery; broker_cpu_us_per_msg is the broker's CPU time over the run per message.
Latency runs publish `--rate` msg/s in all for `--seconds`, each body starting with its send
time, and report p50/p99 of SEND -> MESSAGE (the first 0.5 s left out).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from typing import Any

import stomp
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


def connect(
    address: Address, listener: stomp.ConnectionListener | None = None
) -> stomp.Connection12:
    conn = stomp.Connection12([address], vhost="/", auto_decode=False)
    if listener is not None:
        conn.set_listener("bench", listener)
    conn.connect("guest", "guest", wait=True)
    # stomp.py leaves Nagle's algorithm on, which holds 4 KiB SENDs for up to 40 ms
    conn.transport.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


# -- clients (each in its own process) ------------------------------------------------------
class Consumer(stomp.ConnectionListener):
    """ACKs each MESSAGE as it arrives (stomp.py calls this from its receiver thread)."""

    def __init__(self, receipts: Receipts) -> None:
        self.receipts = receipts
        self.conn: stomp.Connection12 | None = None
        self.subscribed = threading.Event()

    def on_receipt(self, frame: Any) -> None:
        self.subscribed.set()

    def on_error(self, frame: Any) -> None:
        print(f"STOMP ERROR: {frame.headers} {frame.body!r}", file=sys.stderr)

    def on_message(self, frame: Any) -> None:
        assert self.conn is not None  # set before subscribing
        self.conn.ack(frame.headers["ack"])
        self.receipts.got(frame.body)


def consume(
    shared: Shared, address: Address, destination: str, stamped: bool, publishers: int
) -> None:
    listener = Consumer(Receipts(shared, stamped, WARMUP))
    conn = listener.conn = connect(address, listener)
    headers = {"prefetch-count": "1000", "receipt": "subscribed"}
    conn.subscribe(destination, id="1", ack="client-individual", headers=headers)
    if not listener.subscribed.wait(60):
        raise TimeoutError("no RECEIPT for SUBSCRIBE")
    shared.ready.release()
    while not listener.receipts.should_stop(publishers):
        time.sleep(0.02)
    listener.receipts.report()
    conn.disconnect()


def publish(
    shared: Shared, address: Address, destination: str, count: int, size: int, rate: float,
    index: int, publishers: int, persistent: bool,
) -> None:  # fmt: skip
    conn = connect(address)
    headers = {"persistent": "true"} if persistent else {}
    wait_start(shared)
    if rate:
        body, due = stamped_body(size), pace(shared, index, publishers, rate)
        for i in range(count):
            delay = due(i) - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            conn.send(destination, body(), headers=headers)
    else:
        payload = b"x" * size
        for _ in range(count):
            conn.send(destination, payload, headers=headers)
    publisher_done(shared)
    conn.disconnect(receipt="bye")  # waits for the RECEIPT: every SEND before it was taken


# -- one run --------------------------------------------------------------------------------
def run(args: argparse.Namespace, address: Address, broker: Any, size: int, rate: float) -> dict:
    destination = f"/queue/bench-stomp-{size}-{time.monotonic_ns()}"
    total = int(rate * args.seconds) if rate else args.messages
    shared = Shared(total)
    consumers = [(consume, (address, destination, bool(rate), args.publishers))] * args.consumers
    publishers = []
    for i in range(args.publishers):
        count = total // args.publishers + (total % args.publishers if i == 0 else 0)
        common = (address, destination, count, size, rate, i, args.publishers, args.persistent)
        publishers.append((publish, common))
    result = run_clients(shared, consumers, publishers, broker)
    if result["delivered"] != 1.0:
        raise RuntimeError(f"{size} B: delivered {result['delivered']:.3f} of the messages")
    return result


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--brokers", default="herald", help="herald,rabbitmq=[HOST:]PORT")
    parser.add_argument("--host", default="127.0.0.1", help="peers' host unless they name one")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--sizes", default="100,4096")
    parser.add_argument("--persistent", action="store_true", help="SEND with persistent:true")
    parser.add_argument("--rate", type=float, default=1000.0, help="latency runs; 0: none")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of a latency run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store", default="commitlog", choices=["memory", "commitlog"])
    args = parser.parse_args(argv)
    brokers = parse_brokers(args.brokers, {"rabbitmq": 61613}, args.host)
    sizes = [int(s) for s in args.sizes.split(",")]
    cases = [(size, 0.0) for size in sizes] + [(size, args.rate) for size in sizes if args.rate]
    with maybe_herald(brokers, ["stomp"], args.store) as (ports, herald_process):
        targets = resolve_targets(brokers, ports, herald_process, "stomp")
        results = interleaved(
            args.repeat,
            cases,
            targets,
            lambda address, process, case: run(args, address, process, *case),
            lambda case: f"queue/{case[0]}B" + ("/latency" if case[1] else ""),
        )
    return report("stomp_throughput", ["stomp.py"], args, brokers, results)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=2))
