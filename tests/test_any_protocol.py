"""The any-protocol port (core/any_protocol.py): telling a protocol from its first bytes, and
serving it there exactly as on its own port. pika, paho-mqtt and stomp.py on one port are in
tests/test_any_protocol_clients.py; here the example echo plugin and raw bytes."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from herald.core.any_protocol import Sniffer, detect
from herald.core.embedding import embedded
from herald.core.testing import listener_port
from herald.plugins.amqp.plugin import sniff as amqp_sniff
from herald.plugins.mqtt.plugin import sniff as mqtt_sniff
from herald.plugins.stomp.plugin import sniff as stomp_sniff
from herald.storage.memory import MemoryStore
from tests.test_plugins import example_on_path  # noqa: F401  (a fixture)

CANDIDATES = [
    Sniffer("amqp", amqp_sniff, 8),
    Sniffer("mqtt", mqtt_sniff, 8),
    Sniffer("stomp", stomp_sniff, 8),
]
MQTT_311_CONNECT = bytes.fromhex("101000044d5154540402003c0004") + b"abcd"


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        (b"AMQP\x00\x00\x09\x01", "amqp"),
        (MQTT_311_CONNECT, "mqtt"),
        (b"CONNECT\n", "stomp"),
        (b"STOMP\naccept-version:1.2\n", "stomp"),
        (b"AM", True),  # could still be AMQP
        (b"\x10", True),  # could still be MQTT
        (b"GET / HTTP/1.1\r\n", False),
        (b"\x16\x03\x01", False),  # a TLS ClientHello on a plain port
    ],
)
def test_detect(prefix: bytes, expected: str | bool) -> None:
    assert detect(CANDIDATES, prefix) == expected


@pytest.mark.usefixtures("example_on_path")
async def test_echo_and_garbage_on_the_any_port(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="herald")
    settings = ["broker.any_port=0", "broker.any_host=127.0.0.1"]
    with trio.fail_after(20):
        async with embedded(
            data_dir=tmp_path, plugins=["echo"], store=MemoryStore(), settings=settings
        ) as broker:
            any_port = listener_port(broker, "any")
            client = await trio.open_tcp_stream("127.0.0.1", any_port)
            await client.send_all(b"EC")  # not enough to tell yet
            await trio.sleep(0.05)
            await client.send_all(b"HO one\nECHO two\n")
            received = b""
            while received.count(b"\n") < 2:
                received += await client.receive_some(100)
            assert received == b"ECHO one\nECHO two\n"
            (connection,) = list(broker.connections)
            assert connection.protocol == "echo"

            garbage = await trio.open_tcp_stream("127.0.0.1", any_port)
            await garbage.send_all(b"GET / HTTP/1.1\r\n\r\n")
            assert await garbage.receive_some(100) == b""  # closed, not reset
            await client.aclose()
            await garbage.aclose()
    (line,) = [r.getMessage() for r in caplog.records if "any-protocol port" in r.getMessage()]
    assert "no protocol matches its first bytes" in line
