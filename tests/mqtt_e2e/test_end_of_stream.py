"""The end of a client's stream over a real socket: the adapter hands it to the session as
`receive(b"")`, and the codec tells a clean end from a packet cut short (core/codec_kit.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from herald.plugins.mqtt.codec import ConnAck, Connect, Publish, Will, encode_packet
from tests.mqtt_e2e.helpers import Paho, RawClient, mqtt_broker, no_errors_logged

PUBLISH = encode_packet(Publish("cut/short", b"never whole"), 5)  # QoS 0: no PUBACK


@pytest.mark.parametrize(
    ("sent", "reply"),
    [
        (PUBLISH[: len(PUBLISH) // 2], b"\xe0\x01\x81"),  # DISCONNECT 0x81 Malformed Packet
        (PUBLISH, None),  # the end between two packets: nothing to say
    ],
    ids=["half a PUBLISH", "a whole PUBLISH"],
)
async def test_half_close_without_disconnect_publishes_the_will(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, sent: bytes, reply: bytes | None
) -> None:
    with trio.fail_after(20):
        async with mqtt_broker(tmp_path) as broker:
            watcher = Paho(broker, version=5)
            await watcher.connect()
            await watcher.subscribe("wills/#", 1)
            raw = await RawClient.open(broker, version=5)
            will = Will("wills/cut", b"cut off", 1)
            await raw.send(Connect("cut", 5, will=will, username="guest", password=b"guest"))
            connack = await raw.receive()
            assert isinstance(connack, ConnAck) and connack.reason_code == 0
            await raw.send_bytes(sent)
            raw.stream.socket.shutdown(socket.SHUT_WR)  # our end of the stream; still reading
            assert await raw.receive_raw() == reply
            assert await raw.receive_raw() is None  # then the broker closes
            await raw.aclose()
            message = await watcher.message()
            assert (message.topic, message.payload, message.qos) == ("wills/cut", b"cut off", 1)
            await watcher.publish("wills/end", b"end", 1)  # the watcher carries on
            assert [m.payload for m in await watcher.messages_until(b"end")] == [b"end"]
            await watcher.disconnect()
    no_errors_logged(caplog)
