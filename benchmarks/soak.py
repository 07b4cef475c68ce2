"""Soak: a bounded run of mixed protocols, reporting the broker's RSS, open file descriptors
and delivery latency over time (issue 8, part 6).

    python benchmarks/soak.py [--minutes 20] [--rate 200] [--interval 10] [--churn 2]

Prints one JSON line per interval, then a summary object. One `herald run` (commit-log store,
AMQP, MQTT and STOMP on free ports) serves, for `minutes`:
- per protocol a publisher at `rate` messages/s and a consumer: pika (persistent messages
  with publisher confirms to a durable queue, basic.consume with acks), paho (QoS 1 to a
  topic, a QoS 1 subscriber), stomp.py (persistent SEND with receipts to a queue,
  client-individual acks);
- every `churn` seconds one short-lived connection per protocol that connects, publishes,
  and goes away (half of them without closing cleanly), so per-connection state that leaks
  shows as growth.

Each message carries its send time; consumers record latency. Per interval: broker RSS and
open fds (psutil), messages delivered per protocol, p50 / p99 latency. The summary compares
the last interval with the first after warm-up (a fifth of the run): "no growth after
warm-up" is what the issue asks for.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pika
import psutil
import stomp
from paho.mqtt.enums import CallbackAPIVersion

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floods import Herald

MB = 1_000_000


class Latencies:
    """Latencies (ms) recorded by consumer threads, taken per interval."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, list[float]] = {}

    def add(self, protocol: str, body: bytes | bytearray) -> None:
        sent = int(body.split(b":", 1)[0])
        with self._lock:
            self._values.setdefault(protocol, []).append((time.time_ns() - sent) / 1e6)

    def take(self) -> dict[str, list[float]]:
        with self._lock:
            values, self._values = self._values, {}
        return values


def stamped() -> bytes:
    return f"{time.time_ns()}:".encode() + b"x" * 100


def paced(rate: float, stop: threading.Event, send: Callable[[], None]) -> None:
    interval = 1 / rate
    next_at = time.monotonic()
    while not stop.is_set():
        send()
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def amqp_pair(port: int, rate: float, stop: threading.Event, lat: Latencies) -> None:
    params = pika.ConnectionParameters("127.0.0.1", port, heartbeat=0)
    consumer = pika.BlockingConnection(params)
    channel = consumer.channel()
    channel.queue_declare("soak-amqp", durable=True)
    channel.basic_qos(prefetch_count=100)

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        lat.add("amqp", body)
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume("soak-amqp", on_message)
    publisher = pika.BlockingConnection(params)
    pub = publisher.channel()
    pub.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)

    def send() -> None:
        pub.basic_publish("", "soak-amqp", stamped(), persistent)
        consumer.process_data_events(0)

    paced(rate, stop, send)
    consumer.process_data_events(1)
    publisher.close()
    consumer.close()


def mqtt_client(port: int, client_id: str) -> mqtt.Client:
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=client_id)
    client.username_pw_set("guest", "guest")
    client.connect("127.0.0.1", port, keepalive=30)
    client.loop_start()
    return client


def mqtt_pair(port: int, rate: float, stop: threading.Event, lat: Latencies) -> None:
    subscriber = mqtt_client(port, "soak-sub")
    subscriber.on_message = lambda c, u, message: lat.add("mqtt", message.payload)
    subscriber.subscribe("soak/mqtt", qos=1)
    publisher = mqtt_client(port, "soak-pub")

    def send() -> None:
        publisher.publish("soak/mqtt", stamped(), qos=1).wait_for_publish(10)

    time.sleep(0.5)
    paced(rate, stop, send)
    for client in (publisher, subscriber):
        client.disconnect()
        client.loop_stop()


class StompSink(stomp.ConnectionListener):
    def __init__(self, connection: stomp.Connection12, lat: Latencies) -> None:
        self.connection = connection
        self.lat = lat

    def on_message(self, frame: Any) -> None:
        body = frame.body.encode() if isinstance(frame.body, str) else frame.body
        self.lat.add("stomp", body)
        # STOMP 1.2 acks the MESSAGE's `ack` header (message-id is for 1.0 and 1.1).
        self.connection.ack(frame.headers["ack"])


def stomp_pair(port: int, rate: float, stop: threading.Event, lat: Latencies) -> None:
    consumer = stomp.Connection12([("127.0.0.1", port)], vhost="/")
    consumer.set_listener("sink", StompSink(consumer, lat))
    consumer.connect("guest", "guest", wait=True)
    consumer.subscribe("/queue/soak-stomp", id="1", ack="client-individual")
    publisher = stomp.Connection12([("127.0.0.1", port)], vhost="/")
    publisher.connect("guest", "guest", wait=True)

    def send() -> None:
        publisher.send("/queue/soak-stomp", stamped(), persistent="true")

    paced(rate, stop, send)
    publisher.disconnect()
    time.sleep(0.5)
    consumer.disconnect()


def churn(ports: dict[str, int], every: float, stop: threading.Event) -> None:
    """Short-lived connections: connect, publish one message, leave (every other one rudely)."""
    n = 0
    while not stop.wait(every):
        n += 1
        rude = n % 2 == 0
        amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", ports["amqp"]))
        amqp.channel().basic_publish("", "soak-churn", b"churn")
        if rude:
            amqp._impl._transport._sock.close()  # a crash
        else:
            amqp.close()
        client = mqtt_client(ports["mqtt"], f"churn-{n}")
        client.publish("soak/churn", b"churn", qos=1).wait_for_publish(10)
        client.loop_stop()
        if rude:
            sock = client.socket()
            assert sock is not None  # connected: loop_stop leaves the socket open
            sock.close()
        else:
            client.disconnect()
        conn = stomp.Connection12([("127.0.0.1", ports["stomp"])], vhost="/")
        conn.connect("guest", "guest", wait=True)
        conn.send("/queue/soak-churn", "churn")
        if rude:
            conn.transport.disconnect_socket()
        else:
            conn.disconnect()


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))], 2)


def main(args: argparse.Namespace) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="herald-soak-"))
    herald = Herald(base / "data", watermark_mb=1000)
    broker = psutil.Process(herald.process.pid)
    stop = threading.Event()
    lat = Latencies()
    workers = [
        threading.Thread(target=pair, args=(herald.ports[name], args.rate, stop, lat))
        for name, pair in (("amqp", amqp_pair), ("mqtt", mqtt_pair), ("stomp", stomp_pair))
    ]
    workers.append(threading.Thread(target=churn, args=(herald.ports, args.churn, stop)))
    samples: list[dict[str, Any]] = []
    try:
        for worker in workers:
            worker.start()
        start = time.monotonic()
        end = start + args.minutes * 60
        while time.monotonic() < end:
            time.sleep(args.interval)
            values = lat.take()
            sample: dict[str, Any] = {
                "t": round(time.monotonic() - start),
                "rss_mb": round(broker.memory_info().rss / MB, 1),
                "fds": broker.num_fds(),
                "connections": len(broker.net_connections()),
            }
            for name in ("amqp", "mqtt", "stomp"):
                got = values.get(name, [])
                sample[name] = {
                    "delivered": len(got),
                    "p50_ms": percentile(got, 0.5),
                    "p99_ms": percentile(got, 0.99),
                }
            samples.append(sample)
            print(json.dumps(sample), flush=True)
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)
        herald.stop()
        shutil.rmtree(base, ignore_errors=True)
    warm = samples[max(0, len(samples) // 5)]
    last = samples[-1]
    return {
        "benchmark": "soak",
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
        "minutes": args.minutes,
        "rate_per_protocol": args.rate,
        "samples": len(samples),
        "rss_after_warmup_mb": warm["rss_mb"],
        "rss_last_mb": last["rss_mb"],
        "rss_max_mb": max(s["rss_mb"] for s in samples),
        "fds_after_warmup": warm["fds"],
        "fds_last": last["fds"],
        "p99_ms_median_over_intervals": {
            name: statistics.median(
                [s[name]["p99_ms"] for s in samples if s[name]["p99_ms"] is not None] or [0]
            )
            for name in ("amqp", "mqtt", "stomp")
        },
        "delivered": {
            name: sum(s[name]["delivered"] for s in samples) for name in ("amqp", "mqtt", "stomp")
        },
    }


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--rate", type=float, default=200, help="messages/s per protocol")
    parser.add_argument("--interval", type=float, default=10, help="seconds between samples")
    parser.add_argument("--churn", type=float, default=2, help="seconds between short connections")
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(main(parse(sys.argv[1:])), indent=2))
