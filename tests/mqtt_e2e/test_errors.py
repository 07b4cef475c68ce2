"""Clients that break the protocol lose their own connection, and only that."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from trio_websocket import HandshakeError, open_websocket_url

from herald.core.broker import Broker
from herald.plugins.mqtt.codec import (
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
    Subscription,
    SubscriptionOptions,
    Unsubscribe,
    Will,
)
from tests.mqtt_e2e.helpers import LOGIN, Paho, RawClient, mqtt_broker, port


async def assert_still_serving(client: Paho, topic: str) -> None:
    await client.publish(topic, b"still here", 1)
    assert (await client.message()).payload == b"still here"


@pytest.mark.parametrize("version", [4, 5])
async def test_malformed_packet_closes_only_that_connection(tmp_path: Path, version: int) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            bystander = Paho(broker, version=5)
            await bystander.connect()
            await bystander.subscribe("calm/t", 1)
            raw = await RawClient.open(broker, version=version)
            await raw.send(Connect("vandal", version, **LOGIN))
            assert isinstance(await raw.receive(), ConnAck)
            await raw.send_bytes(b"\x36\x05\x00\x01a\x00\x01")  # PUBLISH with QoS 3
            packets = await raw.until_closed()
            if version == 5:  # MQTT 5 says why; 3.1.1 just closes
                assert packets == [Disconnect(ReasonCode.MALFORMED_PACKET)]
            else:
                assert packets == []
            await assert_still_serving(bystander, "calm/t")


@pytest.mark.parametrize(
    "first_bytes",
    [
        pytest.param(b"\xc0\x00", id="pingreq"),
        pytest.param(b"\x82\x08\x00\x01\x00\x03a/b\x00", id="subscribe"),
        pytest.param(b"GET / HTTP/1.1\r\n\r\n", id="http"),
    ],
)
async def test_packets_before_connect_close_the_connection(
    tmp_path: Path, first_bytes: bytes
) -> None:
    # An HTTP request reads as the start of a long packet: the handshake timeout ends it.
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path, settings=["mqtt.handshake_timeout=0.5"]) as broker:
            raw = await RawClient.open(broker)
            await raw.send_bytes(first_bytes)
            assert await raw.until_closed() == []
            client = Paho(broker)
            await client.connect()
            await client.subscribe("after/t", 1)
            await assert_still_serving(client, "after/t")


async def test_unsupported_protocol_level_is_refused(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            raw = await RawClient.open(broker)
            await raw.send_bytes(b"\x10\x0d\x00\x04MQTT\x06\x02\x00\x3c\x00\x01x")  # level 6
            packets = await raw.until_closed()
            assert packets == [ConnAck(ReasonCode.UNSUPPORTED_PROTOCOL_VERSION)]


async def test_second_connect_is_a_protocol_error(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            raw = await RawClient.open(broker, version=5)
            await raw.send(Connect("twice", 5, **LOGIN))
            assert isinstance(await raw.receive(), ConnAck)
            await raw.send(Connect("twice", 5, **LOGIN))
            assert await raw.until_closed() == [Disconnect(ReasonCode.PROTOCOL_ERROR)]


async def test_silent_connection_is_closed_after_the_handshake_timeout(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path, settings=["mqtt.handshake_timeout=0.2"]) as broker:
            raw = await RawClient.open(broker)
            assert await raw.until_closed() == []


async def test_subscribe_in_3_1_1_before_connack_is_answered_after_it(tmp_path: Path) -> None:
    """Packets pipelined right behind CONNECT are handled once the CONNECT is."""
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            raw = await RawClient.open(broker)
            await raw.send(Connect("eager", 4, **LOGIN), Subscribe(3, [Subscription("e/t")]))
            assert isinstance(await raw.receive(), ConnAck)
            suback = await raw.receive()
            assert isinstance(suback, SubAck) and suback.packet_id == 3
            await raw.aclose()


async def test_websocket_on_another_path_is_refused(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            url = f"ws://127.0.0.1:{port(broker, 'ws')}/not-mqtt"
            with pytest.raises(HandshakeError):
                async with open_websocket_url(url, subprotocols=["mqtt"]):
                    pass


async def test_broker_shutdown_tells_mqtt5_clients_why(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            client = Paho(broker, version=5)
            await client.connect()
        rc = await client.wait_gone()
        assert rc.value == ReasonCode.SERVER_SHUTTING_DOWN


async def test_client_still_sending_after_the_disconnect_reads_it(tmp_path: Path) -> None:
    """The socket lingers after herald's DISCONNECT: a client that answers acks a moment longer
    (as the Paho suite's does) neither hits a broken pipe nor loses the reason code."""
    settings = ["mqtt.max_inflight=2", "mqtt.close_timeout=5"]
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path, settings=settings) as broker:
            raw = await RawClient.open(broker, version=5)
            await raw.send(Connect("eager", 5, **LOGIN))
            assert isinstance(await raw.receive(), ConnAck)
            await raw.send(*(Publish("q2/t", b"x", 2, packet_id=n) for n in (1, 2)))
            for packet_id in (1, 2):  # 0x10: nobody subscribes to q2/t
                assert await raw.receive() == PubRec(packet_id, ReasonCode.NO_MATCHING_SUBSCRIBERS)
            await raw.send(Publish("q2/t", b"x", 2, packet_id=3))  # one over the maximum
            for _ in range(20):  # the client goes on talking while the DISCONNECT travels
                await raw.send(PubRel(1), PubRel(2))
                await trio.sleep(0.01)
            (disconnect,) = await raw.until_closed()
            assert isinstance(disconnect, Disconnect)
            assert disconnect.reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED


async def connected_raw(
    broker: Broker, client_id: str, version: int, *, will: Will | None = None
) -> RawClient:
    raw = await RawClient.open(broker, version=version)
    await raw.send(Connect(client_id, version, will=will, **LOGIN))
    connack = await raw.receive()
    assert isinstance(connack, ConnAck) and connack.reason_code == 0
    return raw


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize(
    ("qos", "acks"),
    [
        pytest.param(2, [PubAck], id="puback-for-qos2"),
        pytest.param(2, [PubComp], id="pubcomp-before-pubrec"),
        pytest.param(2, [PubRec, PubAck], id="puback-after-pubrec"),
        pytest.param(1, [PubRec], id="pubrec-for-qos1"),
        pytest.param(1, [PubComp], id="pubcomp-for-qos1"),
    ],
)
async def test_an_ack_that_does_not_fit_the_delivery_closes_the_connection(
    tmp_path: Path, version: int, qos: int, acks: list[type[PubAck | PubComp | PubRec]]
) -> None:
    """Mosquitto's rule (db__message_delete_outgoing / _update_outgoing): an ack of the wrong
    kind for a packet id in flight is a protocol error. The will is published, as for any
    protocol error."""
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            watcher = Paho(broker, version=5)
            await watcher.connect()
            await watcher.subscribe("wills/#", 1)
            will = Will("wills/misfit", b"gone", 1)
            raw = await connected_raw(broker, "misfit", version, will=will)
            await raw.send(Subscribe(1, [Subscription("fit/t", SubscriptionOptions(qos))]))
            await raw.receive()  # SUBACK
            await watcher.publish("fit/t", b"m", qos)
            publish = await raw.receive()
            assert isinstance(publish, Publish) and publish.qos == qos
            assert publish.packet_id is not None  # QoS 1 and 2 carry one
            await raw.send(*(ack(publish.packet_id) for ack in acks))
            answered: list[tuple[type[Packet], int]] = []
            for packet in await raw.until_closed():
                assert isinstance(packet, PubRel | Disconnect), packet
                answered.append((type(packet), packet.reason_code))
            expected: list[tuple[type[Packet], int]] = []
            if qos == 2 and acks[0] is PubRec:  # the PUBREC was right: PUBREL, then the misfit
                expected.append((PubRel, ReasonCode.SUCCESS))
            if version == 5:
                expected.append((Disconnect, ReasonCode.PROTOCOL_ERROR))
            assert answered == expected
            assert (await watcher.message()).payload == b"gone"


@pytest.mark.parametrize("version", [4, 5])
async def test_acks_for_unknown_packet_ids_are_tolerated(tmp_path: Path, version: int) -> None:
    """As before and as Mosquitto does: a PUBACK or PUBCOMP for an id not in use is ignored, a
    PUBREC is answered with PUBREL (MQTT 5: 0x92 Packet Identifier not found)."""
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            raw = await connected_raw(broker, "forgetful", version)
            await raw.send(PubAck(7), PubComp(8), PubRec(9))
            code = ReasonCode.PACKET_IDENTIFIER_NOT_FOUND if version == 5 else ReasonCode.SUCCESS
            assert await raw.receive() == PubRel(9, code)
            await raw.ping()  # still connected
            await raw.aclose()


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("text", ["", "#/x", "a/#/b", "a+", "$share/g+/a"])
@pytest.mark.parametrize("kind", ["subscribe", "unsubscribe"])
async def test_a_malformed_topic_filter_closes_the_connection(
    tmp_path: Path, version: int, text: str, kind: str
) -> None:
    """MQTT 4.7.1 / 4.7.3 / 4.8.2: a filter that breaks the wildcard rules is a malformed
    packet (Mosquitto closes too), not SUBACK 0x8F, which is for well-formed filters."""
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            raw = await connected_raw(broker, "sloppy", version)
            if kind == "subscribe":
                await raw.send(Subscribe(1, [Subscription("ok/t"), Subscription(text)]))
            else:
                await raw.send(Unsubscribe(1, ["ok/t", text]))
            packets = await raw.until_closed()
            assert packets == ([Disconnect(ReasonCode.MALFORMED_PACKET)] if version == 5 else [])


@pytest.mark.parametrize("version", [4, 5])
async def test_publishing_to_sys_topics_is_not_authorized(tmp_path: Path, version: int) -> None:
    """MQTT 4.7.2: `$SYS/` belongs to the server. MQTT 5 gets 0x87 on PUBACK / PUBREC; 3.1.1
    cannot be told, so its publish is acknowledged and dropped (as Mosquitto does); QoS 0 is
    dropped. The connection stays."""
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            watcher = Paho(broker, version=5)
            await watcher.connect()
            await watcher.subscribe("$SYS/#", 2)
            raw = await connected_raw(broker, "forger", version)
            await raw.send(
                Publish("$SYS/broker/uptime", b"0", 0),
                Publish("$SYS/broker/uptime", b"1", 1, packet_id=1),
                Publish("$SYS", b"2", 2, packet_id=2),
            )
            refused = ReasonCode.NOT_AUTHORIZED if version == 5 else ReasonCode.SUCCESS
            puback, pubrec = await raw.receive(), await raw.receive()
            assert isinstance(puback, PubAck) and isinstance(pubrec, PubRec)
            assert (puback.packet_id, puback.reason_code) == (1, refused)
            assert (pubrec.packet_id, pubrec.reason_code) == (2, refused)
            if version == 4:  # 3.1.1 goes on to PUBREL, as after any PUBREC
                await raw.send(PubRel(2))
                assert await raw.receive() == PubComp(2)
            await raw.ping()  # still connected
            await watcher.publish("$SYS-not/x", b"x", 1)  # "$SYS" must be the whole first level
            await watcher.subscribe("$SYS-not/#", 1)
            await watcher.publish("$SYS-not/end", b"end", 1)
            assert [m.topic for m in await watcher.messages_until(b"end")] == ["$SYS-not/end"]
            await raw.aclose()
            # A will is refused at CONNECT, like one the user may not publish.
            forger = await RawClient.open(broker, version=version)
            will = Will("$SYS/broker/clients", b"forged", 1)
            await forger.send(Connect("forger", version, will=will, **LOGIN))
            (connack,) = await forger.until_closed()
            assert isinstance(connack, ConnAck)
            assert connack.reason_code == ReasonCode.NOT_AUTHORIZED  # 3.1.1: return code 5


async def test_disconnect_raising_session_expiry_from_zero_is_a_protocol_error(
    tmp_path: Path,
) -> None:
    """[MQTT-3.14.2-2]: herald answers DISCONNECT 0x82 and treats it as an abnormal end, so the
    will is published."""
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            watcher = Paho(broker, version=5)
            await watcher.connect()
            await watcher.subscribe("wills/#", 1)
            raw = await connected_raw(broker, "grower", 5, will=Will("wills/grower", b"gone", 1))
            await raw.send(Disconnect(properties=Properties(session_expiry_interval=60)))
            assert await raw.until_closed() == [Disconnect(ReasonCode.PROTOCOL_ERROR)]
            message = await watcher.message()
            assert (message.topic, message.payload) == ("wills/grower", b"gone")
            assert "mqtt-subscription-grower" not in broker.default_vhost.queues
