"""MQTT end to end with paho clients: herald against Mosquitto, RabbitMQ's MQTT plugin, amqtt.

    python benchmarks/mqtt_throughput.py [--brokers herald,mosquitto=1886,rabbitmq=1884,amqtt=1885]
        [--messages 20000] [--sizes 100,4096] [--qos 0,1] [--topologies fan-in,fan-out]
        [--rate 1000] [--seconds 5] [--store commitlog|memory] [--repeat 3]

Prints one JSON object. herald runs in its own process with the mqtt plugin
(benchmarks/_common.py); a peer is a broker already running at the given [host:]port (host
`--host`, 127.0.0.1 by default), its process found by that port for its CPU time when local.
Every client is a paho-mqtt process speaking MQTT 3.1.1 with a clean session (user
guest/guest) and TCP_NODELAY, driving its socket with select() and paho's
loop_read/loop_write, so one client costs the same against every broker:
- fan-in: 4 publishers -> one topic -> 1 subscriber; fan-out: 1 publisher -> 4 subscribers;
- QoS 0: publishers write as fast as the socket takes it; QoS 1: each publisher keeps up to
  `--inflight` PUBLISHes unacknowledged and subscribes at QoS 1 (paho acks each delivery).
A throughput run makes `--messages` deliveries (fan-out publishes a quarter of them). Each
repetition runs every case against each broker in turn (noise hits them alike); figures are
medians. msgs_per_s counts deliveries (fan-out: 4 per publish) from the common start to
the last one; `delivered` is the share of expected deliveries that arrived (QoS 0 may drop);
broker_cpu_us_per_msg is the broker's CPU time over the run per delivery. Latency runs
(fan-in) publish `--rate` msg/s in all for `--seconds`, each payload starting with its send
time, and report p50/p99 of publish -> delivery (the first 0.5 s left out).
"""

from __future__ import annotations

import argparse
import itertools
import json
import select
import socket
import sys
import time
from typing import Any

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
from paho.mqtt import client as mqtt

WARMUP = 0.5
PEERS = {"mosquitto": 1883, "rabbitmq": 1883, "amqtt": 1883}
_ids = itertools.count()


class Client:
    """A paho client on our own select() loop: no network thread, no wake-up socket pair."""

    def __init__(self, address: Address, inflight: int) -> None:
        self.events = 0  # callbacks seen: the loop reads while they keep coming
        self.acked = 0
        self.paho = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=f"bench-{time.monotonic_ns()}-{next(_ids)}",
            protocol=mqtt.MQTTv311,
            clean_session=True,
        )
        self.paho.username_pw_set("guest", "guest")
        self.paho.max_inflight_messages_set(inflight)
        self.paho.max_queued_messages_set(0)
        self.paho.on_connect = self._on_event
        self.paho.on_subscribe = self._on_event
        self.paho.on_publish = self._on_publish
        self.paho.connect(*address, keepalive=120)
        # paho leaves Nagle's algorithm on, which delays 4 KiB PUBLISHes by up to 40 ms
        sock = self.paho.socket()
        assert isinstance(sock, socket.socket)  # plain TCP: no TLS, no WebSocket
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.pump_until(lambda: self.events > 0)

    def _on_event(self, *_args: Any) -> None:
        self.events += 1

    def _on_publish(self, *_args: Any) -> None:
        self.events += 1
        self.acked += 1

    def pump(self, timeout: float) -> None:
        """Wait up to `timeout` for the socket; write what is pending, read what has come."""
        sock = self.paho.socket()
        assert sock is not None  # connected in __init__
        writing = [sock] if self.paho.want_write() else []
        readable, writable, _ = select.select([sock], writing, [], timeout)
        if writable:
            self.paho.loop_write()
        if readable:
            for _ in range(1000):  # loop_read takes one packet; stop when none completes
                before = self.events
                if self.paho.loop_read() != mqtt.MQTT_ERR_SUCCESS:
                    raise ConnectionError("the broker closed the connection")
                if self.events == before:
                    break

    def pump_until(self, condition: Any, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError("the broker did not answer")
            self.pump(0.05)

    def close(self) -> None:
        self.pump_until(lambda: not self.paho.want_write())
        self.paho.disconnect()


# -- clients (each in its own process) ------------------------------------------------------
def subscribe(
    shared: Shared, address: Address, topic: str, qos: int, stamped: bool, pubs: int
) -> None:
    client = Client(address, 20)
    receipts = Receipts(shared, stamped, WARMUP)

    def on_message(_client: Any, _userdata: Any, message: Any) -> None:
        client.events += 1
        receipts.got(message.payload)

    client.paho.on_message = on_message
    client.paho.subscribe(topic, qos)
    client.pump_until(lambda: client.events > 1)  # CONNACK, then SUBACK
    shared.ready.release()
    while not receipts.should_stop(pubs):
        client.pump(0.05)
    receipts.report()
    client.close()


def publish(
    shared: Shared, address: Address, topic: str, qos: int, count: int, size: int, rate: float,
    index: int, publishers: int, inflight: int,
) -> None:  # fmt: skip
    client = Client(address, inflight)
    paho = client.paho
    payload = b"x" * size
    body, due = stamped_body(size), pace(shared, index, publishers, rate or 1.0)
    wait_start(shared)
    for i in range(count):
        if rate:
            while (delay := due(i) - time.perf_counter()) > 0:
                client.pump(delay)
        while qos and i - client.acked >= inflight:
            client.pump(0.05)
        paho.publish(topic, body() if rate else payload, qos)
        if paho.want_write():  # the socket is full: wait until it drains
            client.pump_until(lambda: not paho.want_write())
        if not i % 1000:
            paho.loop_misc()
    if qos:
        client.pump_until(lambda: client.acked >= count, timeout=300)
    client.close()
    publisher_done(shared)


# -- one run --------------------------------------------------------------------------------
def run(args: argparse.Namespace, address: Address, broker: Any, case: tuple) -> dict:
    qos, topology, size, rate = case
    topic = f"bench/{qos}/{size}/{time.monotonic_ns()}"
    n_pubs, n_subs = (4, 1) if topology == "fan-in" else (1, 4)
    published = int(rate * args.seconds) if rate else args.messages // n_subs
    shared = Shared(published * n_subs)
    subscribers = [(subscribe, (address, topic, qos, bool(rate), n_pubs))] * n_subs
    publishers = []
    for i in range(n_pubs):
        count = published // n_pubs + (published % n_pubs if i == 0 else 0)
        publishers.append(
            (publish, (address, topic, qos, count, size, rate, i, n_pubs, args.inflight))
        )
    result = run_clients(shared, subscribers, publishers, broker)
    if qos and result["delivered"] != 1.0:
        raise RuntimeError(f"{case}: QoS 1 delivered {result['delivered']:.3f} of the messages")
    return result


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--brokers", default="herald", help="herald,mosquitto=[HOST:]PORT,...")
    parser.add_argument("--host", default="127.0.0.1", help="peers' host unless they name one")
    parser.add_argument("--messages", type=int, default=20_000, help="deliveries per run")
    parser.add_argument("--sizes", default="100,4096")
    parser.add_argument("--qos", default="0,1")
    parser.add_argument("--topologies", default="fan-in,fan-out")
    parser.add_argument("--inflight", type=int, default=100, help="QoS 1 window per publisher")
    parser.add_argument("--rate", type=float, default=1000.0, help="latency runs; 0: none")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of a latency run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store", default="commitlog", choices=["memory", "commitlog"])
    args = parser.parse_args(argv)
    brokers = parse_brokers(args.brokers, PEERS, args.host)
    qos_levels = [int(q) for q in args.qos.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    cases = [(q, t, s, 0.0) for q in qos_levels for t in args.topologies.split(",") for s in sizes]
    if args.rate:
        cases += [(q, "fan-in", s, args.rate) for q in qos_levels for s in sizes]
    with maybe_herald(brokers, ["mqtt"], args.store) as (ports, herald_process):
        targets = resolve_targets(brokers, ports, herald_process, "mqtt")
        results = interleaved(
            args.repeat,
            cases,
            targets,
            lambda address, process, case: run(args, address, process, case),
            lambda case: f"qos{case[0]}/{case[1]}/{case[2]}B" + ("/latency" if case[3] else ""),
        )
    return report("mqtt_throughput", ["paho-mqtt"], args, brokers, results)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=2))
