"""One permission model, three protocols: the same user is allowed and refused the same things
over AMQP (pika), STOMP (stomp.py) and MQTT 5 (paho), each with its own protocol's answer.

Two users on vhost "/":
- `writer` may configure and write anything and read nothing: it can publish to `amq.topic`
  but cannot subscribe (binding a queue to `amq.topic` needs read on it);
- `reader` may configure and read anything and write everything but `amq.topic`: it can
  subscribe but cannot publish to topics.

`reader` subscribes to `matrix.#` in each protocol; `writer` publishes one message from each
protocol; every subscription gets all three (a 3 x 3 delivery matrix). Then each refused
action is tried in each protocol: AMQP closes the channel with 403, STOMP sends an ERROR
`Access refused`, MQTT 5 answers PUBACK / SUBACK 0x87 (not authorized); and the connections
that were refused nothing keep working.
"""

from __future__ import annotations

import queue
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
import trio

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.testing import listener_port
from tests.mqtt_e2e.helpers import Paho
from tests.stomp_e2e.helpers import Client as Stomp

WAIT = 10.0
NOT_AUTHORIZED = 0x87
SETTINGS = [
    "amqp.host=127.0.0.1",
    "amqp.port=0",
    "stomp.host=127.0.0.1",
    "stomp.port=0",
    "stomp.ws_enabled=false",
    "mqtt.host=127.0.0.1",
    "mqtt.port=0",
    "mqtt.ws_port=0",
    "mqtt.ws_host=127.0.0.1",
]


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with embedded(
        plugins=["amqp", "stomp", "mqtt"], settings=SETTINGS, data_dir=tmp_path / "data"
    ) as broker:
        users = broker.users
        users.add_user("writer", "w-secret")
        users.set_permissions("writer", "/", ".*", ".*", "^$")
        users.add_user("reader", "r-secret")
        users.set_permissions("reader", "/", ".*", r"^(?!amq\.topic$).*", ".*")
        yield broker


def amqp_port(broker: Broker) -> int:
    return listener_port(broker, "amqp")


class Pika:
    """A pika BlockingConnection used from worker threads (one call at a time)."""

    def __init__(self, port: int, user: str, password: str) -> None:
        self.connection = pika.BlockingConnection(
            pika.ConnectionParameters(
                "127.0.0.1",
                port,
                credentials=pika.PlainCredentials(user, password),
                socket_timeout=WAIT,
                connection_attempts=1,
            )
        )
        self.channel = self.connection.channel()
        self.received: queue.Queue[bytes] = queue.Queue()

    def publish(self, routing_key: str, body: bytes) -> None:
        """Publish with a confirm; a refusal raises ChannelClosedByBroker (403)."""
        channel = self.connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("amq.topic", routing_key, body)
        channel.close()

    def subscribe(self, pattern: str) -> None:
        result = self.channel.queue_declare("", exclusive=True)
        name = result.method.queue
        self.channel.queue_bind(name, "amq.topic", pattern)
        self.channel.basic_consume(
            name, lambda ch, method, props, body: self.received.put(body), auto_ack=True
        )

    def receive(self, count: int) -> list[bytes]:
        got: list[bytes] = []
        while len(got) < count:  # bounded by the caller's trio.fail_after
            self.connection.process_data_events(time_limit=1)
            while not self.received.empty():
                got.append(self.received.get())
        return got

    def close(self) -> None:
        if self.connection.is_open:
            self.connection.close()


async def in_thread(fn: Any, *args: Any) -> Any:
    with trio.fail_after(WAIT):
        return await trio.to_thread.run_sync(partial(fn, *args), abandon_on_cancel=True)


async def test_one_permission_model_across_protocols(broker: Broker) -> None:
    # -- reader subscribes in every protocol -------------------------------------------------
    amqp_reader = await in_thread(Pika, amqp_port(broker), "reader", "r-secret")
    await in_thread(amqp_reader.subscribe, "matrix.#")
    stomp_reader = await Stomp.connect(broker, login="reader", passcode="r-secret")
    await stomp_reader.subscribe("/topic/matrix.#", "sub-1", receipt="subscribed")
    await stomp_reader.receipt("subscribed")
    mqtt_reader = Paho(
        broker, version=5, client_id="reader", username="reader", password="r-secret"
    )
    await mqtt_reader.connect()
    assert [code.value for code in await mqtt_reader.subscribe("matrix/#", qos=1)] == [1]

    # -- writer publishes from every protocol ------------------------------------------------
    amqp_writer = await in_thread(Pika, amqp_port(broker), "writer", "w-secret")
    await in_thread(amqp_writer.publish, "matrix.amqp", b"from amqp")
    stomp_writer = await Stomp.connect(broker, login="writer", passcode="w-secret")
    await stomp_writer.send("/topic/matrix.stomp", "from stomp", receipt="sent")
    await stomp_writer.receipt("sent")
    mqtt_writer = Paho(
        broker, version=5, client_id="writer", username="writer", password="w-secret"
    )
    await mqtt_writer.connect()
    assert (await mqtt_writer.publish("matrix/mqtt", b"from mqtt", qos=1)).value == 0

    expected = {b"from amqp", b"from stomp", b"from mqtt"}
    assert set(await in_thread(amqp_reader.receive, 3)) == expected
    frames = await stomp_reader.messages(3)
    assert {f.body.encode() if isinstance(f.body, str) else f.body for f in frames} == expected
    assert {(await mqtt_reader.message()).payload for _ in range(3)} == expected

    # -- what each user may not do, refused in every protocol --------------------------------
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        await in_thread(amqp_reader.publish, "matrix.amqp", b"refused")
    assert caught.value.reply_code == 403
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        await in_thread(amqp_writer.subscribe, "matrix.#")
    assert caught.value.reply_code == 403

    await stomp_reader.send("/topic/matrix.stomp", "refused", receipt="never")
    await stomp_reader.wait(lambda: bool(stomp_reader.frames.errors))
    assert stomp_reader.frames.errors[0].headers["message"] == "Access refused"
    await stomp_writer.subscribe("/topic/matrix.#", "sub-2")
    await stomp_writer.wait(lambda: bool(stomp_writer.frames.errors))
    assert stomp_writer.frames.errors[0].headers["message"] == "Access refused"

    assert (await mqtt_reader.publish("matrix/mqtt", b"refused", qos=1)).value == NOT_AUTHORIZED
    codes = await mqtt_writer.subscribe("matrix/#", qos=1)
    assert [code.value for code in codes] == [NOT_AUTHORIZED]

    # -- the MQTT connections were refused single packets, not closed: they still work -------
    assert (await mqtt_writer.publish("matrix/after", b"still here", qos=1)).value == 0
    assert (await mqtt_reader.message()).payload == b"still here"
    for client in (amqp_reader, amqp_writer):
        await in_thread(client.close)
    await mqtt_reader.disconnect()
    await mqtt_writer.disconnect()
