"""pika, paho-mqtt and stomp.py on the one any-protocol port, at once (issue 20 part 5), in the
clear and over TLS; and a message crossing protocols there. Each client is the real library
over a real socket; the port tells them apart by their first bytes (core/any_protocol.py)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import paho.mqtt.client as mqtt
import pika
import trio
from paho.mqtt.enums import CallbackAPIVersion

from herald.core.embedding import embedded
from herald.core.testing import listener_port
from herald.storage.memory import MemoryStore
from tests.tls_helpers import PKI, amqp_round_trip, mqtt_round_trip, stomp_round_trip

WAIT = 15.0
ANY_PORT = ["broker.any_host=127.0.0.1", "broker.any_port=0"]
PROTOCOL_PORTS = [
    "amqp.host=127.0.0.1",
    "amqp.port=0",
    "mqtt.host=127.0.0.1",
    "mqtt.port=0",
    "mqtt.ws_port=0",
    "stomp.host=127.0.0.1",
    "stomp.port=0",
    "stomp.ws_port=0",
]


async def all_at_once(calls: dict[str, Callable[[], bytes]]) -> dict[str, bytes]:
    """Each call in a thread of its own, all started together; what each returned."""
    results: dict[str, bytes] = {}

    async def run(name: str, call: Callable[[], bytes]) -> None:
        results[name] = await trio.to_thread.run_sync(call, abandon_on_cancel=True)

    with trio.fail_after(WAIT * 3):
        async with trio.open_nursery() as nursery:
            for name, call in calls.items():
                nursery.start_soon(run, name, call)
    return results


async def test_pika_paho_and_stomppy_share_the_any_port_at_once(tmp_path: Path) -> None:
    async with embedded(
        data_dir=tmp_path,
        plugins=["amqp", "mqtt", "stomp"],
        store=MemoryStore(),
        settings=[*ANY_PORT, *PROTOCOL_PORTS],
    ) as broker:
        port = listener_port(broker, "any")
        results = await all_at_once(
            {
                "amqp": partial(amqp_round_trip, port, None, "any", body=b"amqp"),
                "mqtt": partial(mqtt_round_trip, port, None, "tcp", payload=b"mqtt"),
                "stomp": partial(stomp_round_trip, port, None, body="stomp"),
            }
        )
        assert results == {"amqp": b"amqp", "mqtt": b"mqtt", "stomp": b"stomp"}


async def test_a_message_crosses_protocols_on_the_any_port(tmp_path: Path) -> None:
    """paho publishes on `any/cross`; pika's queue bound to amq.topic with `any.cross` (MQTT's
    topic mapping, docs/mqtt.md) gets it, on the same port."""
    async with embedded(
        data_dir=tmp_path,
        plugins=["amqp", "mqtt", "stomp"],
        store=MemoryStore(),
        settings=[*ANY_PORT, *PROTOCOL_PORTS],
    ) as broker:
        port = listener_port(broker, "any")

        def cross() -> bytes:
            connection = pika.BlockingConnection(
                pika.ConnectionParameters("127.0.0.1", port, socket_timeout=WAIT)
            )
            try:
                channel = connection.channel()
                channel.queue_declare("cross")
                channel.queue_bind("cross", "amq.topic", "any.cross")
                client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
                client.username_pw_set("guest", "guest")
                client.connect("127.0.0.1", port)
                client.loop_start()
                try:
                    client.publish("any/cross", b"from paho", qos=1).wait_for_publish(WAIT)
                finally:
                    client.disconnect()
                    client.loop_stop()
                for _ in range(int(WAIT / 0.05)):
                    _, _, body = channel.basic_get("cross", auto_ack=True)
                    if body is not None:
                        return body
                    connection.sleep(0.05)
                raise AssertionError("the MQTT message never reached the AMQP queue")
            finally:
                connection.close()

        assert await all_at_once({"cross": cross}) == {"cross": b"from paho"}


async def test_the_three_clients_share_the_any_tls_port_at_once(tmp_path: Path, pki: PKI) -> None:
    settings = pki.settings("broker.any_host=127.0.0.1", "broker.any_tls_port=0")
    async with embedded(
        data_dir=tmp_path / "data", plugins=["amqp", "mqtt", "stomp"], settings=settings
    ) as broker:
        port = listener_port(broker, "any", "tls")
        context = pki.client_context()
        results = await all_at_once(
            {
                "amqp": partial(amqp_round_trip, port, context, "any-tls"),
                "mqtt": partial(mqtt_round_trip, port, pki.client_context(), "tcp"),
                "stomp": partial(stomp_round_trip, port, pki.cafile),
            }
        )
        assert results == {"amqp": b"over tls", "mqtt": b"over mqtts", "stomp": b"over stomp+tls"}
