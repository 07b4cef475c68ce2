"""Connecting and publish/subscribe with paho-mqtt 3.1.1 and 5.0, over TCP and WebSocket."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from herald.plugins.mqtt.codec import (
    ConnAck,
    Connect,
    SubAck,
    Subscribe,
    Subscription,
    SubscriptionOptions,
)
from tests.mqtt_e2e.helpers import Paho, RawClient, mqtt_broker

TRANSPORTS = ["tcp", "websockets"]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
async def test_publish_subscribe_each_qos(
    tmp_path: Path, version: int, transport: str, qos: int
) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            subscriber = Paho(broker, version=version, transport=transport)
            publisher = Paho(broker, version=version, transport=transport)
            assert (await subscriber.connect()).reason_code == 0
            await publisher.connect()
            (granted,) = await subscriber.subscribe("sensors/room1/temp", qos)
            assert granted.value == qos
            rc = await publisher.publish("sensors/room1/temp", b"21.5", qos)
            if qos:
                assert rc.value == 0
            message = await subscriber.message()
            assert (message.topic, message.payload, message.qos) == (
                "sensors/room1/temp",
                b"21.5",
                qos,
            )
            assert not message.retain
            await subscriber.disconnect()
            await publisher.disconnect()


async def test_mqtt_3_1_client(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client = Paho(broker, version=3, client_id="old-timer")
            assert (await client.connect()).reason_code == 0
            await client.subscribe("legacy/#", 1)
            await client.publish("legacy/x", b"v3.1", 1)
            assert (await client.message()).payload == b"v3.1"
            await client.disconnect()


@pytest.mark.parametrize("version", [4, 5])
async def test_wrong_password_is_refused(tmp_path: Path, version: int) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client = Paho(broker, version=version, password="wrong")
            connected = await client.connect()
            # "bad user name or password": 0x86 in MQTT 5; paho reads 3.1.1's return code 4 as it
            assert connected.reason_code == 0x86
            await client.wait_gone()


async def test_anonymous_refused_unless_allowed(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client = Paho(broker, version=5, username=None)
            assert (await client.connect()).reason_code == 0x87  # not authorized
            await client.wait_gone()
        settings = ["mqtt.allow_anonymous=true", "mqtt.anonymous_user=guest"]
        async with mqtt_broker(tmp_path, settings=settings) as broker:
            client = Paho(broker, version=5, username=None)
            assert (await client.connect()).reason_code == 0
            await client.subscribe("anon/t", 1)
            await client.publish("anon/t", b"ok", 1)
            assert (await client.message()).payload == b"ok"
            await client.disconnect()


async def test_wildcards_and_dollar_topics(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            plus = Paho(broker, version=5)
            hash_all = Paho(broker, version=5)
            sys_sub = Paho(broker, version=5)
            publisher = Paho(broker, version=5)
            for client in (plus, hash_all, sys_sub, publisher):
                await client.connect()
            await plus.subscribe("home/+/temp", 1)
            await hash_all.subscribe("#", 1)
            await sys_sub.subscribe("$SYS/#", 1)
            for topic in (
                "home/kitchen/temp",
                "home/kitchen/humidity",
                "$SYS/load",
                "home/a/b/temp",
            ):
                await publisher.publish(topic, topic.encode(), 1)
            await publisher.publish("end", b"end", 1)
            await publisher.publish("$SYS/end", b"end", 1)
            await publisher.publish("home/end/temp", b"end", 1)
            assert [m.topic for m in await plus.messages_until(b"end")] == [
                "home/kitchen/temp",
                "home/end/temp",
            ]
            # "#" never matches a topic starting with "$" (MQTT 4.7.2), even though the AMQP
            # binding "#" routes it to the queue.
            assert [m.topic for m in await hash_all.messages_until(b"end")] == [
                "home/kitchen/temp",
                "home/kitchen/humidity",
                "home/a/b/temp",
                "end",
            ]
            assert [m.topic for m in await sys_sub.messages_until(b"end")] == [
                "$SYS/load",
                "$SYS/end",
            ]


async def test_qos_is_downgraded_to_the_subscription(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            subscriber = Paho(broker, version=4)
            await subscriber.connect()
            await subscriber.subscribe("down/q", 0)
            await subscriber.publish("down/q", b"x", 2)
            message = await subscriber.message()
            assert (message.payload, message.qos) == (b"x", 0)
            await subscriber.subscribe("down/q", 1)  # same filter: options replaced
            await subscriber.publish("down/q", b"y", 2)
            assert (await subscriber.message()).qos == 1


async def test_overlapping_subscriptions_deliver_once_at_highest_qos(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client = Paho(broker, version=5)
            await client.connect()
            await client.subscribe("over/+", 0)
            await client.subscribe("over/#", 2)
            await client.publish("over/x", b"one", 2)
            await client.publish("over/end", b"end", 2)  # QoS 2 too: paho delivers at PUBREL
            received = await client.messages_until(b"end")
            assert [(m.payload, m.qos) for m in received] == [(b"one", 2), (b"end", 2)]


async def test_unsubscribe_stops_delivery(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            for version in (4, 5):
                client = Paho(broker, version=version)
                await client.connect()
                await client.subscribe("u/a", 1)
                await client.subscribe("u/end", 1)
                codes = await client.unsubscribe("u/a")
                if version == 5:
                    assert [c.value for c in codes] == [0]
                    assert [c.value for c in await client.unsubscribe("u/never")] == [0x11]
                await client.publish("u/a", b"gone", 1)
                await client.publish("u/end", b"end", 1)
                assert [m.payload for m in await client.messages_until(b"end")] == [b"end"]
                await client.disconnect()


async def test_invalid_filter_gets_a_failure_code(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client = await RawClient.open(broker, version=5)
            await client.send(Connect("raw-filter", 5, username="guest", password=b"guest"))
            assert isinstance(await client.receive(), ConnAck)
            subscriptions = [
                Subscription("bad/#/filter"),
                Subscription("$share/g"),
                Subscription("ok/+", SubscriptionOptions(1)),
            ]
            await client.send(Subscribe(1, subscriptions))
            suback = await client.receive()
            assert isinstance(suback, SubAck)
            assert list(suback.reason_codes) == [0x8F, 0x8F, 1]  # topic filter invalid, granted
            await client.aclose()
