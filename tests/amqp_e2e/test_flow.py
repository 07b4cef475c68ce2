"""Flow control inside one Trio program: the shared adapter over in-memory streams, no sockets.

`lockstep_stream_pair` makes the server's writes wait for the client's reads, so a client that
stops reading shows what a full socket does; `wait_all_tasks_blocked` says when the broker has
done everything it can, which keeps these tests free of sleeps and timing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.message import Message
from herald.plugins.amqp import plugin as amqp_plugin
from herald.plugins.amqp.codec import Delivery
from herald.plugins.amqp.codec.methods import BasicConsume, BasicConsumeOk
from herald.plugins.amqp.config import AMQPConfig
from herald.plugins.amqp.server import connection_server
from herald.storage.memory import MemoryStore
from tests.amqp_e2e.in_memory import AsyncClient, serve_connection


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with embedded(
        plugins=[],
        settings=["memory.check_interval=3600"],
        data_dir=tmp_path,
        load_entrypoints=False,
        extra_plugins=[amqp_plugin],
        store=MemoryStore(),
    ) as running:
        yield running


async def test_a_client_that_stops_reading_suspends_its_consumer(broker: Broker) -> None:
    vhost = broker.default_vhost
    queue = vhost.declare_queue("bp")
    body = b"x" * 1000
    for _ in range(200):
        vhost.publish(Message.native(body, routing_key="bp"))
    client_stream, server_stream = trio.testing.lockstep_stream_pair()
    config = AMQPConfig(write_buffer=8192)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            server = connection_server(broker, config)
            nursery.start_soon(serve_connection, server, server_stream)
            client = AsyncClient(client_stream)
            await client.handshake()
            await client.send_method(1, BasicConsume(queue="bp", consumer_tag="c", no_ack=True))
            await client.expect(BasicConsumeOk)
            await trio.testing.wait_all_tasks_blocked()
            (consumer,) = queue.consumers
            assert consumer.suspended
            waiting = queue.statistics().messages_ready
            assert 150 < waiting < 200  # a bounded amount went to the connection, no more
            received = 0
            while received < 200:
                if isinstance(await client.next_event(), Delivery):
                    received += 1
            await trio.testing.wait_all_tasks_blocked()
            assert queue.statistics().messages_ready == 0 and not consumer.suspended
            nursery.cancel_scope.cancel()


async def test_publishers_are_not_read_while_an_alarm_is_on(broker: Broker) -> None:
    vhost = broker.default_vhost
    queue = vhost.declare_queue("target")
    client_stream, server_stream = trio.testing.memory_stream_pair()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            server = connection_server(broker, AMQPConfig())
            nursery.start_soon(serve_connection, server, server_stream)
            client = AsyncClient(client_stream)
            await client.handshake()
            await client.publish("target", b"before")
            await trio.testing.wait_all_tasks_blocked()
            assert queue.message_count == 1
            broker.alarms.set("memory", True)
            await client.publish("target", b"in flight")  # the reader was already waiting:
            await trio.testing.wait_all_tasks_blocked()  # what it read is held all the same
            await client.publish("target", b"held")
            await trio.testing.wait_all_tasks_blocked()
            assert queue.message_count == 1  # nothing sent after the alarm is taken
            broker.alarms.set("memory", False)
            await trio.testing.wait_all_tasks_blocked()
            assert queue.message_count == 3
            nursery.cancel_scope.cancel()
