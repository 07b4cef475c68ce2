"""Connection limits (issue 8, part 4): `broker.max_connections` for all protocols together,
`broker.max_connections_per_user` per login; real pika and stomp.py clients over 127.0.0.1.

Over the global limit a connection is closed as soon as it is accepted (RabbitMQ's
`connection_max`); over a user's limit the login is refused with the protocol's "not allowed"
(AMQP 530, STOMP ERROR), with a log line either way, and the other connections carry on.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

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
BASE = [
    "amqp.host=127.0.0.1",
    "amqp.port=0",
    "stomp.host=127.0.0.1",
    "stomp.port=0",
    "stomp.ws_enabled=false",
    "mqtt.host=127.0.0.1",
    "mqtt.port=0",
    "mqtt.ws_enabled=false",
]


@asynccontextmanager
async def limited_broker(tmp_path: Path, settings: Sequence[str]) -> AsyncIterator[Broker]:
    async with embedded(
        plugins=["amqp", "stomp", "mqtt"],
        settings=[*BASE, *settings],
        data_dir=tmp_path / "data",
    ) as broker:
        broker.users.add_user("other", "secret")
        broker.users.set_permissions("other", "/", ".*", ".*", ".*")
        yield broker


def amqp_port(broker: Broker) -> int:
    return listener_port(broker, "amqp")


def pika_connect(
    port: int, user: str = "guest", password: str = "guest"
) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1",
            port,
            credentials=pika.PlainCredentials(user, password),
            socket_timeout=WAIT,
            connection_attempts=1,
        )
    )


async def connect(
    port: int, user: str = "guest", password: str = "guest"
) -> pika.BlockingConnection:
    with trio.fail_after(WAIT):
        return await trio.to_thread.run_sync(partial(pika_connect, port, user, password))


async def close(connection: pika.BlockingConnection) -> None:
    await trio.to_thread.run_sync(connection.close)


async def wait_until(predicate: Callable[[], object]) -> None:
    with trio.fail_after(WAIT):
        while not predicate():
            await trio.sleep(0.01)


async def test_the_global_limit_closes_new_connections_at_accept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with limited_broker(tmp_path, ["broker.max_connections=2"]) as broker:
        port = amqp_port(broker)
        first = await connect(port)
        stomp = await Stomp.connect(broker)  # STOMP counts against the same limit
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            await connect(port)
        assert "limit of 2 connections is reached" in caplog.text
        assert len(broker.connections) == 2
        channel = await trio.to_thread.run_sync(first.channel)  # the others carry on
        await trio.to_thread.run_sync(partial(channel.queue_declare, "still-fine"))
        await stomp.disconnect()
        await wait_until(lambda: len(broker.connections) == 1)
        second = await connect(port)  # room again
        await close(second)
        await close(first)


async def test_a_user_over_its_limit_is_refused_at_login(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with limited_broker(tmp_path, ["broker.max_connections_per_user=1"]) as broker:
        port = amqp_port(broker)
        first = await connect(port)
        # pika reports a connection.close during connection.open as ProbableAccessDeniedError
        # (as for RabbitMQ's own limits); the close it got is in the message.
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
            await connect(port)
        assert "(530)" in str(refused.value) and "limit of 1 connections" in str(refused.value)
        stomp = await Stomp.connect(broker, wait=False)
        await stomp.wait(lambda: bool(stomp.frames.errors))
        assert stomp.frames.errors[0].headers["message"] == "Not allowed"
        # MQTT 5: quota exceeded; 3.1.1: return code 3, server unavailable (which paho 2
        # reports as MQTT 5's 0x88).
        for version, code in ((5, 0x97), (4, 0x88)):
            paho = Paho(broker, version=version)
            assert (await paho.connect()).reason_code == code
        assert "user 'guest' has 1 connections, its limit" in caplog.text
        other = await connect(port, "other", "secret")  # another user is not affected
        await close(other)
        await close(first)
        await wait_until(lambda: not any(c.user == "guest" for c in broker.connections))
        again = await connect(port)  # the limit counts open connections only
        await close(again)
