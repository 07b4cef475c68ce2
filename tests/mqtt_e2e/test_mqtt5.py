"""MQTT 5 features: properties, expiry, no-local, subscription identifiers, limits, reasons."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from herald.core.broker import Broker
from herald.plugins.mqtt.codec import (
    NO_PROPERTIES,
    ConnAck,
    Connect,
    Disconnect,
    Properties,
    PubAck,
    Publish,
    ReasonCode,
    SubAck,
    Subscribe,
    Subscription,
    SubscriptionOptions,
)
from tests.mqtt_e2e.helpers import (
    LOGIN,
    Paho,
    RawClient,
    connect_props5,
    mqtt_broker,
    no_errors_logged,
    props5,
)


async def raw_v5(
    broker: Broker, client_id: str, properties: Properties = NO_PROPERTIES
) -> RawClient:
    client = await RawClient.open(broker, version=5)
    await client.send(Connect(client_id, 5, properties=properties, **LOGIN))
    connack = await client.receive()
    assert isinstance(connack, ConnAck) and connack.reason_code == 0
    return client


async def test_publish_properties_round_trip(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client = Paho(broker, version=5)
            await client.connect()
            await client.subscribe("rpc/request", 1)
            properties = props5(
                ContentType="application/json",
                ResponseTopic="rpc/reply/42",
                CorrelationData=b"\x00\x01corr",
                PayloadFormatIndicator=1,
                UserProperty=[("trace", "a"), ("trace", "b"), ("tenant", "t1")],
            )
            await client.publish("rpc/request", b'{"op": 1}', 1, properties=properties)
            received = (await client.message()).properties
            assert received is not None
            assert received.ContentType == "application/json"  # type: ignore[attr-defined]  # paho sets Properties attributes at run time
            assert received.ResponseTopic == "rpc/reply/42"  # type: ignore[attr-defined]  # paho sets Properties attributes at run time
            assert received.CorrelationData == b"\x00\x01corr"  # type: ignore[attr-defined]  # paho sets Properties attributes at run time
            assert received.PayloadFormatIndicator == 1  # type: ignore[attr-defined]  # paho sets Properties attributes at run time
            assert received.UserProperty == [("trace", "a"), ("trace", "b"), ("tenant", "t1")]  # type: ignore[attr-defined]  # paho sets Properties attributes at run time


async def test_message_expiry(tmp_path: Path) -> None:
    """An expired message is never delivered; a live one carries the time it has left."""
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            session = connect_props5(SessionExpiryInterval=600)
            away = Paho(broker, version=5, client_id="away")
            await away.connect(clean_start=False, properties=session)
            await away.subscribe("exp/t", 1)
            await away.disconnect()
            publisher = Paho(broker, version=5)
            await publisher.connect()
            await publisher.publish(
                "exp/t", b"short", 1, properties=props5(MessageExpiryInterval=1)
            )
            await publisher.publish(
                "exp/t", b"long", 1, properties=props5(MessageExpiryInterval=60)
            )
            await trio.sleep(1.5)  # past the first message's expiry
            away = Paho(broker, version=5, client_id="away")
            assert (await away.connect(clean_start=False, properties=session)).session_present
            message = await away.message()
            assert message.payload == b"long"
            assert message.properties is not None
            assert 1 <= message.properties.MessageExpiryInterval <= 59  # type: ignore[attr-defined]  # paho sets Properties attributes at run time


async def test_no_local(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client = Paho(broker, version=5, client_id="chatty")
            await client.connect()
            await client.subscribe("room/1", 1, noLocal=True)
            await client.publish("room/1", b"my own words", 1)
            other = Paho(broker, version=5)
            await other.connect()
            await other.publish("room/1", b"end", 1)
            assert [m.payload for m in await client.messages_until(b"end")] == [b"end"]


async def test_subscription_identifiers(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client = Paho(broker, version=5)
            await client.connect()
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties as PahoProperties

            for topic, identifier in (("si/+", 5), ("si/#", 9)):
                properties = PahoProperties(PacketTypes.SUBSCRIBE)
                properties.SubscriptionIdentifier = identifier
                await client.subscribe(topic, 1, properties=properties)
            await client.publish("si/x", b"both", 1)
            await client.publish("si/x/y", b"one", 1)
            first, second = await client.message(), await client.message()
            assert first.properties is not None and second.properties is not None
            assert first.properties.SubscriptionIdentifier == [5, 9]  # type: ignore[attr-defined]  # paho sets Properties attributes at run time
            assert second.properties.SubscriptionIdentifier == [9]  # type: ignore[attr-defined]  # paho sets Properties attributes at run time


async def test_unauthorized_publish_and_subscribe_get_reason_codes(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            broker.users.add_user("reader", "secret")
            # may declare and bind its own queues, read everything, write no exchange
            broker.users.set_permissions("reader", "/", "^mqtt-", "^mqtt-", ".*")
            client = Paho(broker, version=5, username="reader", password="secret")
            assert (await client.connect()).reason_code == 0
            (granted,) = await client.subscribe("ro/t", 1)
            assert granted.value == 1
            rc = await client.publish("ro/t", b"nope", 1)
            assert rc.value == 0x87  # not authorized
            broker.users.add_user("nobody", "secret")
            broker.users.set_permissions("nobody", "/", "", "", "")
            denied = Paho(broker, version=5, username="nobody", password="secret")
            assert (await denied.connect()).reason_code == 0
            (code,) = await denied.subscribe("ro/t", 1)
            assert code.value == 0x87


async def test_unauthorized_publish_closes_a_3_1_1_connection(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            broker.users.add_user("reader", "secret")
            broker.users.set_permissions("reader", "/", "^mqtt-", "^mqtt-", ".*")
            client = Paho(broker, version=4, username="reader", password="secret")
            await client.connect()
            client.client.publish("ro/t", b"nope", 1)
            await client.wait_gone()


async def test_assigned_client_identifier_and_connack_properties(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client = Paho(broker, version=5, client_id="")
            connected = await client.connect()
            properties = connected.properties
            assert properties.AssignedClientIdentifier.startswith("herald-")
            assert properties.ReceiveMaximum == 64
            assert properties.MaximumPacketSize == 16 * 1024 * 1024
            assert properties.TopicAliasMaximum == 16


async def test_inbound_topic_alias(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            subscriber = Paho(broker, version=5)
            await subscriber.connect()
            await subscriber.subscribe("alias/#", 0)
            raw = await raw_v5(broker, "aliaser")
            await raw.send(Publish("alias/long/topic", b"1", properties=Properties(topic_alias=3)))
            await raw.send(Publish("", b"2", properties=Properties(topic_alias=3)))
            first, second = await subscriber.message(), await subscriber.message()
            assert [(m.topic, m.payload) for m in (first, second)] == [
                ("alias/long/topic", b"1"),
                ("alias/long/topic", b"2"),
            ]
            await raw.aclose()


async def test_packet_too_large_is_refused_with_disconnect(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path, settings=["mqtt.max_packet_size=1024"]) as broker:
            raw = await raw_v5(broker, "too-big")
            await raw.send(Publish("big/t", b"x" * 2000))
            packets = await raw.until_closed()
            assert [type(p) for p in packets] == [Disconnect]
            assert isinstance(packets[0], Disconnect)
            assert packets[0].reason_code == ReasonCode.PACKET_TOO_LARGE


async def test_client_maximum_packet_size_drops_larger_messages(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            raw = await raw_v5(broker, "small-reader", Properties(maximum_packet_size=200))
            await raw.send(Subscribe(1, [Subscription("size/t", SubscriptionOptions(1))]))
            assert await raw.receive() == SubAck(1, [1])
            publisher = Paho(broker, version=5)
            await publisher.connect()
            await publisher.publish("size/t", b"x" * 500, 1)  # too large for the client
            await publisher.publish("size/t", b"fits", 1)
            packet = await raw.receive()
            assert isinstance(packet, Publish) and packet.payload == b"fits"
            assert packet.packet_id is not None  # QoS 1
            await raw.send(PubAck(packet.packet_id))
            await raw.ping()
            queue = broker.default_vhost.queues["mqtt-subscription-small-reader"]
            assert queue.statistics().messages_unacknowledged == 0  # the large one was dropped
            await raw.aclose()


async def test_client_receive_maximum_limits_messages_in_flight(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            raw = await raw_v5(broker, "slow-reader", Properties(receive_maximum=2))
            await raw.send(Subscribe(1, [Subscription("rm/t", SubscriptionOptions(1))]))
            assert await raw.receive() == SubAck(1, [1])
            publisher = Paho(broker, version=5)
            await publisher.connect()
            for n in range(5):
                await publisher.publish("rm/t", f"m{n}".encode(), 1)
            queue = broker.default_vhost.queues["mqtt-subscription-slow-reader"]
            stats = queue.statistics()
            assert (stats.messages_unacknowledged, stats.messages_ready) == (2, 3)
            first = await raw.receive()
            assert isinstance(first, Publish) and first.payload == b"m0"
            assert first.packet_id is not None  # QoS 1
            await raw.send(PubAck(first.packet_id))
            payloads = []
            for _ in range(2):
                packet = await raw.receive()
                assert isinstance(packet, Publish)
                payloads.append(packet.payload)
            assert payloads == [b"m1", b"m2"]
            await raw.aclose()


async def test_outbound_topic_aliases_when_the_client_allows_them(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            raw = await raw_v5(broker, "alias-reader", Properties(topic_alias_maximum=1))
            await raw.send(Subscribe(1, [Subscription("out/#", SubscriptionOptions(0))]))
            assert await raw.receive() == SubAck(1, [0])
            publisher = Paho(broker, version=5)
            await publisher.connect()
            for topic in ("out/long/topic/name", "out/long/topic/name", "out/other"):
                await publisher.publish(topic, b"m", 1)
            received = []
            for _ in range(3):
                packet = await raw.receive()
                assert isinstance(packet, Publish)
                received.append((packet.topic, packet.properties.topic_alias))
            # the raw reader resolves nothing: it shows the wire
            assert received == [("out/long/topic/name", 1), ("", 1), ("out/other", 1)]
            await raw.aclose()


@pytest.mark.parametrize("version", [4, 5])
async def test_a_qos2_delivery_holds_its_receive_maximum_slot_until_pubcomp(
    tmp_path: Path, version: int
) -> None:
    """[MQTT-3.3.4-9]: the send quota comes back on PUBACK, PUBCOMP or a refusing PUBREC, not on
    PUBREC: with a window of 1, herald sends PUBREL 1, waits for PUBCOMP 1, then PUBLISH 2.
    MQTT 5 asks with Receive Maximum; 3.1.1 gets `mqtt.max_inflight`, counted the same way."""
    props = "00 " if version == 5 else ""  # MQTT 5: an empty property block
    settings = ["mqtt.max_inflight=1"] if version == 4 else []
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path, settings=settings) as broker:
            raw = await RawClient.open(broker, version=version)
            properties = Properties(receive_maximum=1) if version == 5 else NO_PROPERTIES
            await raw.send(Connect("qos2-reader", version, properties=properties, **LOGIN))
            assert isinstance(await raw.receive(), ConnAck)
            await raw.send(Subscribe(1, [Subscription("rm2/t", SubscriptionOptions(2))]))
            assert await raw.receive_raw() == bytes.fromhex(
                f"90 {3 + len(props) // 3:02x} 0001 {props}02"
            )
            publisher = Paho(broker, version=5)
            await publisher.connect()
            for payload in (b"m1", b"m2"):
                await publisher.publish("rm2/t", payload, 2)  # queued for the reader, in order
            length = f"{11 + len(props) // 3:02x}"
            topic = "0005 726d322f74"  # "rm2/t"
            assert await raw.receive_raw() == bytes.fromhex(f"34 {length} {topic} 0001 {props}6d31")
            await raw.send_bytes(bytes.fromhex("50 02 0001"))  # PUBREC 1
            await raw.send_bytes(bytes.fromhex("c0 00"))  # PINGREQ: handled after the PUBREC
            assert await raw.receive_raw() == bytes.fromhex("62 02 0001")  # PUBREL 1
            assert await raw.receive_raw() == bytes.fromhex("d0 00")  # PINGRESP: no PUBLISH 2
            await raw.send_bytes(bytes.fromhex("70 02 0001"))  # PUBCOMP 1: the slot is free
            assert await raw.receive_raw() == bytes.fromhex(f"34 {length} {topic} 0002 {props}6d32")
            await raw.aclose()


async def test_a_connack_larger_than_the_clients_maximum_packet_size_closes_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No CONNACK fits in 2 bytes: the connection closes without an error logged, and nothing
    is left behind for the client id (no session, no registered client)."""
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            tiny = await RawClient.open(broker, version=5)
            props = Properties(maximum_packet_size=2, session_expiry_interval=600)
            await tiny.send(Connect("tiny", 5, clean_start=False, properties=props, **LOGIN))
            assert await tiny.until_closed() == []
            await tiny.aclose()
            again = await RawClient.open(broker, version=5)
            props = Properties(session_expiry_interval=600)
            await again.send(Connect("tiny", 5, clean_start=False, properties=props, **LOGIN))
            assert await again.receive() == ConnAck(
                properties=Properties(
                    receive_maximum=64,
                    maximum_packet_size=16 * 1024 * 1024,
                    topic_alias_maximum=16,
                )
            )  # accepted, and no session was left from the refused attempt ("session present" 0)
            await again.aclose()
    no_errors_logged(caplog)


async def test_reason_strings_are_left_out_when_they_would_not_fit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """MQTT 5 lets a server leave out a reason string that would take a packet past the
    client's Maximum Packet Size ([MQTT-3.2.2-19] and its twins): the keep alive DISCONNECT
    then comes without one, and nothing escapes the session (here: the shared deadlines task)."""
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client = await RawClient.open(broker, version=5)
            props = Properties(maximum_packet_size=20)
            await client.send(Connect("terse", 5, keepalive=1, properties=props, **LOGIN))
            assert isinstance(await client.receive(), ConnAck)  # 16 bytes: fits
            assert await client.receive_raw() == bytes.fromhex("e0 01 8d")  # keep alive timeout
            assert await client.receive_raw() is None
            other = Paho(broker, version=5)  # the broker still serves
            await other.connect()
            await other.subscribe("terse/t", 1)
            await other.publish("terse/t", b"ok", 1)
            assert (await other.message()).payload == b"ok"
    no_errors_logged(caplog)
