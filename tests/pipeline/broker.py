"""A real broker for the pipeline tests: AMQP, MQTT and STOMP on the commit-log store, served
by `trio.run` in a thread (the tests themselves are synchronous, like Spark's API), and the
publishes that fill its data dir through each protocol's own client library."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pika
import stomp
import trio
from paho.mqtt.client import Client as MqttClient
from paho.mqtt.enums import CallbackAPIVersion

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.plugins.amqp import plugin as amqp_plugin
from herald.plugins.mqtt import plugin as mqtt_plugin
from herald.plugins.stomp import plugin as stomp_plugin
from herald.storage import commitlog_plugin

WAIT = 20.0
SEGMENT = 65536  # the smallest segment: small test data still spans several segments
T = TypeVar("T")


class BrokerThread:
    """An embedded broker with the three protocol plugins and the commit-log store."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.broker: Broker | None = None
        self.ports: dict[str, int] = {}
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="herald-broker", daemon=True)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to the test thread
            self._error = exc
            self._started.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        settings = ["store.backend=commitlog", f"commitlog.segment_size={SEGMENT}"]
        for name in ("amqp", "mqtt", "stomp"):
            settings += [f"{name}.host=127.0.0.1", f"{name}.port=0"]
        settings += ["mqtt.ws_enabled=false", "stomp.ws_enabled=false"]
        async with embedded(
            plugins=["amqp", "mqtt", "stomp"],
            settings=settings,
            data_dir=self.data_dir,
            load_entrypoints=False,
            extra_plugins=[amqp_plugin, mqtt_plugin, stomp_plugin, commitlog_plugin],
        ) as broker:
            self.broker = broker
            for listener in broker.listeners:
                self.ports.setdefault(listener.protocol, listener.port)
            self._started.set()
            await self._stop.wait()

    def __enter__(self) -> BrokerThread:
        self._thread.start()
        if not self._started.wait(WAIT):
            raise TimeoutError("broker did not start")
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive() and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(WAIT)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the broker's Trio thread."""
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.ports['amqp']}/%2F"

    def amqp(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(self.url + "?socket_timeout=10"))

    def queue_count(self, name: str) -> int:
        def count() -> int:
            assert self.broker is not None
            queue = self.broker.default_vhost.queues.get(name)
            return 0 if queue is None else queue.message_count

        return self.call(count)


def publish_amqp(broker: BrokerThread, count: int) -> None:
    """`count` persistent messages to durable queue `orders` (headers, ids), and `count`
    to a fanout exchange bound to two durable queues (one record, two targets each)."""
    connection = broker.amqp()
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("orders", durable=True)
        channel.exchange_declare("fan", "fanout", durable=True)
        for name in ("fan-a", "fan-b"):
            channel.queue_declare(name, durable=True)
            channel.queue_bind(name, "fan")
        for i in range(count):
            props = pika.BasicProperties(
                delivery_mode=2,
                headers={"n": i, "tag": "x"},
                message_id=f"order-{i}",
                content_type="text/plain",
            )
            channel.basic_publish("", "orders", f"order {i}".encode(), props)
            channel.basic_publish(
                "fan", "", f"fan {i}".encode(), pika.BasicProperties(delivery_mode=2)
            )
    finally:
        connection.close()


def publish_mqtt(broker: BrokerThread, count: int) -> None:
    """A persistent session subscribed to sensors/# (a durable queue), then `count` QoS 1
    publishes to sensors/t1."""
    port = broker.ports["mqtt"]
    subscriber = MqttClient(
        CallbackAPIVersion.VERSION2, client_id="pipeline-sub", clean_session=False
    )
    subscriber.username_pw_set("guest", "guest")
    subscriber.connect("127.0.0.1", port)
    subscriber.loop_start()
    try:
        subscriber.subscribe("sensors/#", qos=1)
        _wait(lambda: broker.call(_has_mqtt_queue, broker))
        publisher = MqttClient(CallbackAPIVersion.VERSION2, client_id="pipeline-pub")
        publisher.username_pw_set("guest", "guest")
        publisher.connect("127.0.0.1", port)
        publisher.loop_start()
        try:
            infos = [publisher.publish("sensors/t1", f"reading {i}", qos=1) for i in range(count)]
            for info in infos:
                info.wait_for_publish(WAIT)
        finally:
            publisher.disconnect()
            publisher.loop_stop()
    finally:
        subscriber.disconnect()
        subscriber.loop_stop()


def _has_mqtt_queue(broker: BrokerThread) -> bool:
    assert broker.broker is not None
    return any("pipeline-sub" in name for name in broker.broker.default_vhost.queues)


def publish_stomp(broker: BrokerThread, count: int) -> None:
    """`count` persistent SENDs to /queue/stomp-q, each with a receipt."""
    conn = stomp.Connection([("127.0.0.1", broker.ports["stomp"])])
    conn.connect("guest", "guest", wait=True)
    try:
        for i in range(count):
            conn.send("/queue/stomp-q", f"frame {i}", headers={"persistent": "true", "x-i": str(i)})
        _wait(lambda: broker.queue_count("stomp-q") >= count)
    finally:
        conn.disconnect()


def _wait(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.05)
