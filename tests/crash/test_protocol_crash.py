"""Crash safety per protocol (issue 8, part 1): confirmed publishing over AMQP (publisher
confirms), MQTT (QoS 1 PUBACK and QoS 2 PUBCOMP) and STOMP (receipts) to durable destinations
while a real `herald run` process is SIGKILLed at random moments; after the kills every
confirmed message is delivered at least once, in order per publisher (tests/crash/protocols.py).
All four publishers run at once against one broker; the default tier kills it twice, `-m slow`
a hundred times (so each protocol sees a hundred kills)."""

from __future__ import annotations

import os
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pika
import pytest
import stomp
from paho.mqtt.enums import CallbackAPIVersion

from tests.crash.protocols import (
    BrokerProcess,
    Connect,
    Ledger,
    check,
    kill_cycles,
)

WAIT = 10.0


def seed() -> int:
    return int(os.environ.get("HERALD_CRASH_SEED") or random.randrange(2**31))


# -- AMQP: pika, publisher confirms, a durable queue -------------------------------------------
def amqp_connection(broker: BrokerProcess) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1",
            broker.ports["amqp"],
            credentials=pika.PlainCredentials("guest", "guest"),
            socket_timeout=WAIT,
            blocked_connection_timeout=WAIT,
            connection_attempts=1,
            heartbeat=0,
        )
    )


def amqp_connect(broker: BrokerProcess) -> tuple[Callable[[bytes], None], Callable[[], None]]:
    connection = amqp_connection(broker)
    channel = connection.channel()
    channel.queue_declare("crash-amqp", durable=True)
    channel.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)

    def publish(body: bytes) -> None:
        channel.basic_publish("", "crash-amqp", body, persistent, mandatory=True)

    return publish, connection.close


def amqp_drain(broker: BrokerProcess) -> list[bytes]:
    connection = amqp_connection(broker)
    channel = connection.channel()
    bodies = []
    while True:
        method, _, body = channel.basic_get("crash-amqp", auto_ack=True)
        if method is None:
            break
        bodies.append(body)
    connection.close()
    return bodies


# -- STOMP: stomp.py, receipts, a durable queue ------------------------------------------------
class Receipts(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.received: queue.Queue[str] = queue.Queue()
        self.gone = threading.Event()
        self.messages: queue.Queue[bytes] = queue.Queue()

    def on_receipt(self, frame: stomp.utils.Frame) -> None:
        self.received.put(frame.headers["receipt-id"])

    def on_message(self, frame: stomp.utils.Frame) -> None:
        body = frame.body
        self.messages.put(body.encode() if isinstance(body, str) else body)

    def on_disconnected(self) -> None:
        self.gone.set()
        self.received.put("")  # wake a waiting publisher


def stomp_connection(broker: BrokerProcess) -> tuple[stomp.Connection12, Receipts]:
    connection = stomp.Connection12(
        [("127.0.0.1", broker.ports["stomp"])], vhost="/", reconnect_attempts_max=1
    )
    connection.set_listener("receipts", listener := Receipts())
    connection.connect("guest", "guest", wait=True)
    return connection, listener


def stomp_connect(broker: BrokerProcess) -> tuple[Callable[[bytes], None], Callable[[], None]]:
    connection, listener = stomp_connection(broker)

    def publish(body: bytes) -> None:
        receipt = body.split(b":", 2)[0] + b"-" + body.split(b":", 2)[1]
        connection.send("/queue/crash-stomp", body, persistent="true", receipt=receipt.decode())
        if listener.received.get(timeout=WAIT) != receipt.decode():
            raise ConnectionError("no receipt: the broker went away")

    return publish, connection.disconnect


def stomp_drain(broker: BrokerProcess) -> list[bytes]:
    connection, listener = stomp_connection(broker)
    connection.subscribe("/queue/crash-stomp", id="drain", ack="auto")
    bodies = []
    while True:
        try:
            bodies.append(listener.messages.get(timeout=0.5))
        except queue.Empty:
            break
    connection.disconnect()
    return bodies


# -- MQTT: paho 3.1.1, a persistent session's durable queue, QoS 1 or 2 -------------------------
def mqtt_client(broker: BrokerProcess, client_id: str) -> mqtt.Client:
    client = mqtt.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=False,
        reconnect_on_failure=False,
    )
    client.username_pw_set("guest", "guest")
    client.connect("127.0.0.1", broker.ports["mqtt"], keepalive=60)
    client.loop_start()
    return client


def mqtt_subscriber(broker: BrokerProcess, messages: queue.Queue[bytes] | None) -> mqtt.Client:
    """The persistent session whose queue keeps the messages (subscribed before any publish)."""
    subscribed = threading.Event()
    client = mqtt.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id="crash-subscriber",
        clean_session=False,
        reconnect_on_failure=False,
    )
    client.username_pw_set("guest", "guest")
    client.on_subscribe = lambda *args: subscribed.set()
    if messages is not None:
        client.on_message = lambda c, u, message: messages.put(bytes(message.payload))
    client.connect("127.0.0.1", broker.ports["mqtt"], keepalive=60)
    client.loop_start()
    client.subscribe("crash/#", qos=2)
    assert subscribed.wait(WAIT)
    return client


def mqtt_connect_qos(qos: int) -> Connect:
    def connect(broker: BrokerProcess) -> tuple[Callable[[bytes], None], Callable[[], None]]:
        client = mqtt_client(broker, f"crash-publisher-{qos}")

        def publish(body: bytes) -> None:
            info = client.publish(f"crash/q{qos}", f"q{qos}:".encode() + body, qos=qos)
            deadline = time.monotonic() + WAIT
            # Until PUBACK (1) or PUBCOMP (2) arrived; paho does not wake this wait when the
            # connection drops, so look at the connection between short waits.
            while not info.is_published():
                if not client.is_connected() or time.monotonic() > deadline:
                    raise ConnectionError("not acknowledged: the broker went away")
                info.wait_for_publish(0.1)

        def close() -> None:
            client.loop_stop()
            client.disconnect()

        return publish, close

    return connect


def mqtt_drain(broker: BrokerProcess) -> list[bytes]:
    messages: queue.Queue[bytes] = queue.Queue()
    client = mqtt_subscriber(broker, messages)
    bodies = []
    while True:
        try:
            bodies.append(messages.get(timeout=0.5))
        except queue.Empty:
            break
    client.loop_stop()
    client.disconnect()
    return bodies


def mqtt_prepare(broker: BrokerProcess) -> None:
    client = mqtt_subscriber(broker, None)
    client.loop_stop()
    client.disconnect()  # the session (and its durable queue) stays


PROTOCOLS: dict[str, tuple[Connect, Callable[[BrokerProcess], list[bytes]]]] = {
    "amqp": (amqp_connect, amqp_drain),
    "stomp": (stomp_connect, stomp_drain),
    "mqtt-qos1": (mqtt_connect_qos(1), mqtt_drain),
    "mqtt-qos2": (mqtt_connect_qos(2), mqtt_drain),
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", tmp_path / "herald.log")
    try:
        yield process
    finally:
        process.kill()


def run(broker: BrokerProcess, kills: int) -> list[str]:
    """Kill the broker `kills` times while all four publishers run, then check each."""
    chosen = seed()
    rng = random.Random(chosen)
    ledgers = {protocol: Ledger() for protocol in PROTOCOLS}
    broker.start()
    mqtt_prepare(broker)  # the persistent session whose queue keeps the MQTT messages
    publishers = {name: (PROTOCOLS[name][0], ledgers[name]) for name in PROTOCOLS}
    kill_cycles(broker, publishers, kills, rng)
    broker.start()
    try:
        delivered = {"amqp": amqp_drain(broker), "stomp": stomp_drain(broker)}
        mqtt = mqtt_drain(broker)  # one session queue receives both MQTT publishers
    finally:
        broker.stop()
    delivered["mqtt-qos1"] = [b for b in mqtt if b.startswith(b"q1:")]
    delivered["mqtt-qos2"] = [b for b in mqtt if b.startswith(b"q2:")]
    lines = []
    for protocol, ledger in ledgers.items():
        verdict = check(ledger, [_strip(b) for b in delivered[protocol]])
        assert verdict.confirmed > 0, f"{protocol}: nothing confirmed, the kills came too early"
        lines.append(
            f"{protocol}: seed {chosen}, {kills} kills, {verdict.confirmed} confirmed, 0 lost,"
            f" {verdict.duplicates} duplicates,"
            f" {verdict.unconfirmed_survivors} unconfirmed survivors"
        )
    return lines


def _strip(body: bytes) -> bytes:
    """MQTT bodies carry their QoS in front (both publishers share one session queue)."""
    return body[3:] if body[:1] == b"q" else body


def test_confirmed_messages_survive_broker_kills(broker: BrokerProcess) -> None:
    for line in run(broker, 2):
        print(line)


@pytest.mark.slow
def test_a_hundred_kills_with_every_protocol(broker: BrokerProcess) -> None:
    for line in run(broker, 100):
        print(line)
