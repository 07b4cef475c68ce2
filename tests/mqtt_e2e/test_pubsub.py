"""Connecting and publish/subscribe with paho-mqtt 3.1.1 and 5.0, over TCP and WebSocket."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from herald.plugins.mqtt.codec import (
    NEED_DATA,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketReader,
    Properties,
    Publish,
    ReasonCode,
    SubAck,
    Subscribe,
    Subscription,
    SubscriptionOptions,
    UnsubAck,
    Unsubscribe,
    encode_packet,
)
from tests.mqtt_e2e.helpers import Paho, PahoTransport, RawClient, mqtt_broker, port

TRANSPORTS = ["tcp", "websockets"]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
async def test_publish_subscribe_each_qos(
    tmp_path: Path, version: int, transport: PahoTransport, qos: int
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
    """`mqtt.allow_anonymous = false` (the default is true: tests/mqtt_e2e/test_anonymous.py)."""
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path, settings=["mqtt.allow_anonymous=false"]) as broker:
            client = Paho(broker, version=5, username=None)
            assert (await client.connect()).reason_code == 0x87  # not authorized
            await client.wait_gone()
            client = Paho(broker, version=4, username=None)
            assert (await client.connect()).reason_code == 0x87  # paho reads 3.1.1's 5 as it
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
            await sys_sub.subscribe("$app/#", 1)  # clients may not publish to $SYS (test_errors)
            for topic in (
                "home/kitchen/temp",
                "home/kitchen/humidity",
                "$app/load",
                "home/a/b/temp",
            ):
                await publisher.publish(topic, topic.encode(), 1)
            await publisher.publish("end", b"end", 1)
            await publisher.publish("$app/end", b"end", 1)
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
                "$app/load",
                "$app/end",
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


async def test_a_subscribe_with_a_malformed_filter_applies_none_of_them(tmp_path: Path) -> None:
    """A malformed filter makes the whole SUBSCRIBE malformed (tests/mqtt_e2e/test_errors.py):
    the connection closes, and the well-formed filters beside it are not applied either."""
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client = await RawClient.open(broker, version=5)
            expiry = Properties(session_expiry_interval=600)  # a queue that outlives the close
            connect = Connect(
                "raw-filter",
                5,
                clean_start=False,
                properties=expiry,
                username="guest",
                password=b"guest",
            )
            await client.send(connect)
            assert isinstance(await client.receive(), ConnAck)
            subscriptions = [Subscription("ok/+", SubscriptionOptions(1)), Subscription("bad/#/x")]
            await client.send(Subscribe(1, subscriptions))
            assert await client.until_closed() == [Disconnect(ReasonCode.MALFORMED_PACKET)]
            assert "mqtt-subscription-raw-filter" not in broker.default_vhost.queues
            await client.aclose()
            client = await RawClient.open(broker, version=5)
            await client.send(connect)
            connack = await client.receive()
            assert isinstance(connack, ConnAck) and connack.session_present
            await client.send(Unsubscribe(2, ["ok/+"]))  # never subscribed
            assert await client.receive() == UnsubAck(2, [ReasonCode.NO_SUBSCRIPTION_EXISTED])
            await client.aclose()


def _sync_client(broker_port: int, client_id: str) -> tuple[socket.socket, PacketReader]:
    sock = socket.create_connection(("127.0.0.1", broker_port), timeout=10)
    sock.sendall(encode_packet(Connect(client_id, 4, username="guest", password=b"guest"), 4))
    reader = PacketReader()
    assert isinstance(_next_packet(sock, reader), ConnAck)
    return sock, reader


def _next_packet(sock: socket.socket, reader: PacketReader) -> Packet:
    while (packet := reader.next_packet(4)) is NEED_DATA:
        data = sock.recv(65536)
        assert data, "the broker closed the connection"
        reader.receive_data(data)
    assert isinstance(packet, Packet)  # the loop ends on a packet, never on NEED_DATA
    return packet


def _next_publish(sock: socket.socket, reader: PacketReader) -> Publish:
    packet = _next_packet(sock, reader)
    assert isinstance(packet, Publish), packet
    return packet


def _subscribe_then_publish(broker_port: int, rounds: int) -> list[bytes]:
    """Like the Paho interop suite: B sends SUBSCRIBE, A publishes at once, without waiting
    for the SUBACK; returns what B received."""
    publisher, _ = _sync_client(broker_port, "eager-publisher")
    subscriber, reader = _sync_client(broker_port, "eager-subscriber")
    received = []
    try:
        for n in range(rounds):
            topic = f"eager/{n}"
            subscriber.sendall(encode_packet(Subscribe(n + 1, [Subscription(topic)]), 4))
            publisher.sendall(encode_packet(Publish(topic, b"%d" % n), 4))
            assert isinstance(_next_packet(subscriber, reader), SubAck)
            publisher.sendall(encode_packet(Publish(topic, b"end"), 4))  # after the SUBACK
            while (payload := _next_publish(subscriber, reader).payload) != b"end":
                received.append(payload)
    finally:
        publisher.close()
        subscriber.close()
    return received


async def test_subscribe_sent_just_before_a_publish_elsewhere_applies_to_it(
    tmp_path: Path,
) -> None:
    """Packets that reach the broker in the same wakeup are handled SUBSCRIBE first, as by a
    broker that reads its sockets in order (Trio runs ready tasks in random order)."""
    rounds = 30
    with trio.fail_after(30):
        async with mqtt_broker(tmp_path) as broker:
            received = await trio.to_thread.run_sync(_subscribe_then_publish, port(broker), rounds)
    assert received == [b"%d" % n for n in range(rounds)]


@pytest.mark.parametrize("version", [4, 5])
async def test_subscribe_denied_filters_are_refused(tmp_path: Path, version: int) -> None:
    """`mqtt.subscribe_denied` (the Paho interop suite's "test/nosubscribe"): SUBACK 0x80 for
    the filter and any under it; the other filters of the same SUBSCRIBE are granted."""
    settings = ['mqtt.subscribe_denied=["test/nosubscribe", "private/#"]']
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path, settings=settings) as broker:
            client = Paho(broker, version=version)
            await client.connect()
            for topic_filter in ("test/nosubscribe", "private/a/+", "private/#"):
                (code,) = await client.subscribe(topic_filter, 1)
                assert code.value == 0x80
            (code,) = await client.subscribe("test/+", 1)  # wider than the denied filter: granted
            assert code.value == 1
            await client.publish("test/nosubscribe", b"via test/+", 1)
            assert (await client.message()).topic == "test/nosubscribe"
            await client.disconnect()
