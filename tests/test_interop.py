"""One message's trip through all three protocols, with real clients on 127.0.0.1.

pika publishes to amq.topic; a stomp.py subscriber on /topic/ receives it and sends it on;
a paho-mqtt subscriber receives that and publishes it back; pika consumes the result. Each
hop converts the message once (the kernel's codecs) and keeps what both sides can carry.
The broker is the `herald_broker` fixture (every installed protocol on a free port); the
clients run their own threads, driven from the trio test through `trio.to_thread`.
"""

from __future__ import annotations

import queue as stdqueue
import threading
import uuid
from typing import Any, Protocol, cast

import paho.mqtt.client as paho
import pika
import stomp
import trio

from herald.core.broker import Broker
from herald.core.testing import listener_port

TIMEOUT = 10  # seconds any one hop may take: a hang guard, not a timing assertion


port_of = listener_port


class Mqtt5Properties(Protocol):
    """The MQTT 5 properties read here, which paho sets on its `Properties` by name."""

    ContentType: str
    CorrelationData: bytes
    UserProperty: list[tuple[str, str]]


class StompInbox(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.frames: stdqueue.Queue[Any] = stdqueue.Queue()
        self.receipts: stdqueue.Queue[str] = stdqueue.Queue()

    def on_message(self, frame: Any) -> None:
        self.frames.put(frame)

    def on_receipt(self, frame: Any) -> None:
        self.receipts.put(frame.headers["receipt-id"])


async def test_amqp_to_stomp_to_mqtt_and_back(herald_broker: Broker) -> None:
    amqp_port = port_of(herald_broker, "amqp")
    stomp_port = port_of(herald_broker, "stomp")
    mqtt_port = port_of(herald_broker, "mqtt")
    correlation = str(uuid.uuid4())

    # STOMP subscriber on /topic/hop.one
    inbox = StompInbox()
    stomp_conn = stomp.Connection12([("127.0.0.1", stomp_port)], vhost="/")
    stomp_conn.set_listener("inbox", inbox)
    await trio.to_thread.run_sync(lambda: stomp_conn.connect("guest", "guest", wait=True))
    await trio.to_thread.run_sync(
        lambda: stomp_conn.subscribe("/topic/hop.one", id="s1", ack="auto", receipt="sub")
    )
    assert await trio.to_thread.run_sync(lambda: inbox.receipts.get(timeout=TIMEOUT)) == "sub"

    # MQTT 5 subscriber on hop/two (amq.topic key hop.two)
    mqtt_inbox: stdqueue.Queue[paho.MQTTMessage] = stdqueue.Queue()
    subscribed = threading.Event()
    mqtt = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="interop", protocol=paho.MQTTv5)
    mqtt.username_pw_set("guest", "guest")
    mqtt.on_message = lambda client, userdata, message: mqtt_inbox.put(message)
    mqtt.on_subscribe = lambda *args: subscribed.set()
    mqtt.on_connect = lambda client, userdata, flags, reason, props: client.subscribe(
        "hop/two", qos=1
    )
    await trio.to_thread.run_sync(mqtt.connect, "127.0.0.1", mqtt_port)
    mqtt.loop_start()
    try:
        assert await trio.to_thread.run_sync(subscribed.wait, TIMEOUT)

        # AMQP: a queue bound to the end of the trip, then the first publish.
        def amqp_start() -> pika.BlockingConnection:
            connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", amqp_port))
            channel = connection.channel()
            channel.queue_declare("back-home", exclusive=True)
            channel.queue_bind("back-home", "amq.topic", "hop.three")
            channel.basic_publish(
                "amq.topic",
                "hop.one",
                b"travelling",
                pika.BasicProperties(
                    content_type="text/plain",
                    correlation_id=correlation,
                    headers={"x-trip": "amqp"},
                ),
            )
            return connection

        amqp = await trio.to_thread.run_sync(amqp_start)

        # Hop 1: AMQP -> STOMP, properties as headers.
        frame = await trio.to_thread.run_sync(lambda: inbox.frames.get(timeout=TIMEOUT))
        assert frame.body == "travelling"
        assert frame.headers["content-type"].startswith("text/plain")
        assert frame.headers["correlation-id"] == correlation
        assert frame.headers["x-trip"] == "amqp"

        # Hop 2: STOMP -> MQTT 5 (amq.topic key hop.two is MQTT topic hop/two).
        await trio.to_thread.run_sync(
            lambda: stomp_conn.send(
                "/topic/hop.two",
                frame.body,
                content_type="text/plain",
                headers={"correlation-id": correlation, "x-trip": "stomp"},
            )
        )
        message = await trio.to_thread.run_sync(lambda: mqtt_inbox.get(timeout=TIMEOUT))
        assert message.topic == "hop/two"
        assert message.payload == b"travelling"
        assert message.properties is not None
        props = cast(Mqtt5Properties, message.properties)
        assert props.ContentType.startswith("text/plain")
        assert props.CorrelationData == correlation.encode()
        assert ("x-trip", "stomp") in props.UserProperty

        # Hop 3: MQTT -> AMQP.
        published = mqtt.publish("hop/three", b"home again", qos=1)
        await trio.to_thread.run_sync(published.wait_for_publish, TIMEOUT)
        assert published.is_published()

        def amqp_get() -> tuple[Any, bytes]:
            channel = amqp.channel()
            for _ in range(100):
                method, properties, body = channel.basic_get("back-home", auto_ack=True)
                if method is not None:
                    return properties, body
                amqp.sleep(0.05)
            raise AssertionError("nothing arrived in back-home")

        _properties, body = await trio.to_thread.run_sync(amqp_get)
        assert body == b"home again"
        await trio.to_thread.run_sync(amqp.close)
    finally:
        await trio.to_thread.run_sync(mqtt.loop_stop)
        mqtt.disconnect()
        await trio.to_thread.run_sync(stomp_conn.disconnect)
