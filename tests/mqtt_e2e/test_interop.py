"""MQTT and the kernel's other users: AMQP-style queues bound to amq.topic, native publishes."""

from __future__ import annotations

from pathlib import Path

import trio

from herald.core.message import Message, Properties
from tests.mqtt_e2e.helpers import Paho, mqtt_broker, props5
from tests.sinks import RecordingSink


async def test_mqtt_publish_reaches_a_queue_bound_to_amq_topic(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            vhost = broker.default_vhost
            vhost.declare_queue("amqp-side")
            vhost.bind_queue("amqp-side", "amq.topic", "sensors.*.temp")
            sink = RecordingSink(auto_ack=True)
            vhost.queues["amqp-side"].add_consumer("tag", sink)
            publisher = Paho(broker, version=5)
            await publisher.connect()
            properties = props5(
                ContentType="text/plain",
                ResponseTopic="replies/here",
                CorrelationData=b"c-1",
                UserProperty=[("site", "lab")],
            )
            await publisher.publish("sensors/room1/temp", b"21.5", 1, properties=properties)
            await publisher.publish("sensors/room1/humidity", b"40", 1)  # not bound
            (entry,) = sink.entries
            message = entry.message
            assert (message.protocol, message.exchange, message.routing_key) == (
                "mqtt",
                "amq.topic",
                "sensors.room1.temp",
            )
            assert message.persistent
            content = message.decoded(broker.codecs)
            assert content.body == b"21.5"
            neutral = content.properties
            assert neutral.content_type == "text/plain"
            assert neutral.reply_to == "replies.here"
            assert neutral.correlation_id == "c-1"
            assert neutral.delivery_mode == 2
            assert neutral.headers == {"site": "lab", "x-mqtt-publish-qos": 1}
            # ...and converts for consumers of another protocol (here the native one).
            assert message.raw_for("herald", broker.codecs)


async def test_native_publish_reaches_mqtt_subscribers(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            v5 = Paho(broker, version=5)
            v311 = Paho(broker, version=4)
            for client in (v5, v311):
                await client.connect()
                await client.subscribe("orders/+", 2)
            message = Message.native(
                b'{"id": 7}',
                exchange="amq.topic",
                routing_key="orders.new",
                properties=Properties(
                    content_type="application/json",
                    delivery_mode=2,
                    reply_to="orders.replies",
                    correlation_id="abc",
                    headers={"priority": "high", "retries": 3},
                ),
            )
            result = broker.default_vhost.publish(message)
            assert result.queues == 2
            received = await v5.message()
            assert (received.topic, received.payload, received.qos) == (
                "orders/new",
                b'{"id": 7}',
                1,  # persistent -> QoS 1
            )
            properties = received.properties
            assert properties is not None
            assert properties.ContentType == "application/json"  # type: ignore[attr-defined]  # paho sets Properties attributes at run time
            assert properties.ResponseTopic == "orders/replies"  # type: ignore[attr-defined]  # paho sets Properties attributes at run time
            assert properties.CorrelationData == b"abc"  # type: ignore[attr-defined]  # paho sets Properties attributes at run time
            assert properties.UserProperty == [("priority", "high"), ("retries", "3")]  # type: ignore[attr-defined]  # paho sets Properties attributes at run time
            plain = await v311.message()
            assert (plain.topic, plain.payload, plain.qos) == ("orders/new", b'{"id": 7}', 1)


async def test_transient_native_message_arrives_at_qos_0(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client = Paho(broker, version=5)
            await client.connect()
            await client.subscribe("events/#", 1)
            broker.default_vhost.publish(
                Message.native(b"tick", exchange="amq.topic", routing_key="events.clock")
            )
            received = await client.message()
            assert (received.topic, received.payload, received.qos) == ("events/clock", b"tick", 0)
