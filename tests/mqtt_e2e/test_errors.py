"""Clients that break the protocol lose their own connection, and only that."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from trio_websocket import HandshakeError, open_websocket_url

from herald.plugins.mqtt.codec import (
    ConnAck,
    Connect,
    Disconnect,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    Subscribe,
    Subscription,
)
from tests.mqtt_e2e.helpers import Paho, RawClient, mqtt_broker, port

LOGIN = {"username": "guest", "password": b"guest"}


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
            assert suback is not None and suback.packet_id == 3  # type: ignore[attr-defined]
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
