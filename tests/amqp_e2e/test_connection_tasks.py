"""What an AMQP connection costs the broker in tasks, and its deadlines served by the kernel's
timer heap (core/connection_deadlines.py) instead of timer tasks of its own: the handshake
timeout, heartbeats, the close-ok deadline; a wait for durability only while confirms are
owed; connection.blocked from the registry's one alarm watcher.

In memory (the shared adapter over `memory_stream_pair`), on an autojump clock (`autojump`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from herald.core.adapter import WRITER_IDLE_S, ConnectionServer
from herald.core.broker import Broker
from herald.plugins.amqp import plugin as amqp_plugin
from herald.plugins.amqp.codec import Heartbeat, MethodFrame
from herald.plugins.amqp.codec.methods import (
    BasicAck,
    ConfirmSelect,
    ConfirmSelectOk,
    ConnectionBlocked,
    ConnectionClose,
    ConnectionUnblocked,
    QueueDeclare,
    QueueDeclareOk,
)
from herald.plugins.amqp.config import AMQPConfig
from herald.plugins.amqp.server import connection_server
from tests.amqp_e2e.in_memory import AsyncClient, run_connection
from tests.slow_store import SlowStore, broker_with

PERSISTENT = b"\x10\x00\x02"  # the property flags and delivery-mode 2


@pytest.fixture
async def store() -> SlowStore:
    return SlowStore()


@pytest.fixture
async def broker(tmp_path: Path, store: SlowStore) -> AsyncIterator[Broker]:
    async with broker_with(store, tmp_path, amqp_plugin) as running:
        yield running


@pytest.fixture
async def autojump(mock_clock: trio.testing.MockClock, broker: Broker) -> None:
    """The test's `mock_clock` autojumps once guest's password is verified (and cached):
    scrypt runs in a worker thread, in real time, which an autojumping clock would race past.
    (A test names `mock_clock` itself: pytest-trio runs the clock among its arguments.)"""
    await broker.authenticate("guest", "guest", None)
    mock_clock.autojump_threshold = 0


async def start(
    broker: Broker, nursery: trio.Nursery, config: AMQPConfig | None = None
) -> ConnectionServer:
    server = connection_server(broker, config or AMQPConfig())
    await nursery.start(server.run)
    return server


def connect(server: ConnectionServer, nursery: trio.Nursery) -> AsyncClient:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    nursery.start_soon(run_connection, server, server_stream)
    return AsyncClient(client_stream)


def all_tasks() -> int:
    def count(task: trio.lowlevel.Task) -> int:
        return 1 + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return count(root)


async def test_an_idle_connection_holds_one_task(
    broker: Broker, nursery: trio.Nursery, mock_clock: trio.testing.MockClock, autojump: None
) -> None:
    server = await start(broker, nursery)
    await trio.testing.wait_all_tasks_blocked()
    before = all_tasks()
    clients = [connect(server, nursery) for _ in range(3)]
    for client in clients:  # heartbeats and connection.blocked asked for: no task for them
        await client.handshake(heartbeat=60, capabilities={"connection.blocked": True})
    await trio.sleep(2 * WRITER_IDLE_S)  # the writers end once there is nothing to write
    assert all_tasks() - before == 3  # each connection's reader, nothing else
    assert not server.writers.child_tasks
    assert len(broker.connections) == 3
    nursery.cancel_scope.cancel()


async def test_the_handshake_timeout_closes_a_silent_client(
    broker: Broker,
    nursery: trio.Nursery,
    mock_clock: trio.testing.MockClock,
    autojump: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "herald.core.connections")
    server = await start(broker, nursery, AMQPConfig(handshake_timeout=5.0))
    client = connect(server, nursery)
    began = trio.current_time()
    assert await client.read_until_closed() == []
    assert 5.0 <= trio.current_time() - began < 6.0
    assert "handshake timeout (5.0s)" in caplog.text
    assert server.deadlines.live == 0


async def test_heartbeats_every_half_period_and_a_silent_client_is_dropped(
    broker: Broker,
    nursery: trio.Nursery,
    mock_clock: trio.testing.MockClock,
    autojump: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "herald.core.connections")
    server = await start(broker, nursery)
    client = connect(server, nursery)
    await client.handshake(heartbeat=4)
    silent_since = trio.current_time()
    beats: list[float] = []
    while True:  # we never send: the server gives up on us
        data = await client.stream.receive_some(65536)
        if not data:
            break
        events = client.reader.feed(bytes(data))
        beats += [trio.current_time() - silent_since for e in events if isinstance(e, Heartbeat)]
        assert not any(isinstance(e, MethodFrame) for e in events)  # RabbitMQ just closes
    gone = trio.current_time() - silent_since
    assert [round(at) for at in beats][:3] == [2, 4, 6]  # and at 8 unless it gave up then
    assert 8.0 <= gone <= 10.0  # silent for (about) twice the heartbeat, at a tick
    assert "missed heartbeats from client, timeout: 4s" in caplog.text


async def test_a_publisher_paused_by_an_alarm_is_not_dropped_for_missed_heartbeats(
    broker: Broker, nursery: trio.Nursery, mock_clock: trio.testing.MockClock, autojump: None
) -> None:
    server = await start(broker, nursery)
    client = connect(server, nursery)
    await client.handshake(heartbeat=2)
    queue = broker.default_vhost.declare_queue("target")
    await client.publish("target", b"one")
    await trio.testing.wait_all_tasks_blocked()
    broker.alarms.set("memory", True)
    await trio.sleep(30)  # the server reads nothing from us, our heartbeats included
    assert len(broker.connections) == 1
    broker.alarms.set("memory", False)
    await client.publish("target", b"two")
    await trio.sleep(1)
    assert len(broker.connections) == 1 and queue.message_count == 2
    nursery.cancel_scope.cancel()


async def test_a_close_without_close_ok_ends_after_close_timeout(
    broker: Broker,
    nursery: trio.Nursery,
    mock_clock: trio.testing.MockClock,
    autojump: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "herald.core.connections")
    server = await start(broker, nursery, AMQPConfig(close_timeout=3.0))
    client = connect(server, nursery)
    await client.handshake()
    (connection,) = broker.connections
    connection.close("closed by the test")
    began = trio.current_time()
    close = await client.expect(ConnectionClose)
    assert isinstance(close, ConnectionClose) and close.reply_code == 320
    assert await client.read_until_closed() == []  # we never answer close-ok
    assert 3.0 <= trio.current_time() - began < 4.0
    assert "connection.close-ok not received in time" in caplog.text


async def test_a_task_waits_for_durability_only_while_confirms_are_owed(
    broker: Broker,
    store: SlowStore,
    nursery: trio.Nursery,
    mock_clock: trio.testing.MockClock,
    autojump: None,
) -> None:
    server = await start(broker, nursery)
    client = connect(server, nursery)
    await client.handshake()
    await client.send_method(1, QueueDeclare(queue="durable", durable=True))
    await client.expect(QueueDeclareOk)
    await client.send_method(1, ConfirmSelect())
    await client.expect(ConfirmSelectOk)
    store.flush()
    await trio.sleep(2 * WRITER_IDLE_S)
    assert not server.writers.child_tasks  # in confirm mode, nothing owed: no task

    tickets = []
    for _ in range(3):
        await client.publish("durable", b"kept", PERSISTENT)
        await trio.sleep(2 * WRITER_IDLE_S)
        tickets.append(store.appended)
        assert len(server.writers.child_tasks) == 1  # one wait for durability, never two
    assert await client.nothing_arrives()  # not confirmed before it is durable
    store.flush(upto=tickets[0])
    assert await client.expect(BasicAck) == BasicAck(1, False)
    await trio.sleep(2 * WRITER_IDLE_S)
    assert len(server.writers.child_tasks) == 1  # two more owed: it waits on
    store.flush()
    assert await client.expect(BasicAck) == BasicAck(3, True)  # one ack for the two
    await trio.sleep(2 * WRITER_IDLE_S)
    assert not server.writers.child_tasks  # none owed: the task ended

    await client.publish("durable", b"again", PERSISTENT)
    await trio.sleep(2 * WRITER_IDLE_S)
    assert len(server.writers.child_tasks) == 1
    store.flush()
    assert await client.expect(BasicAck) == BasicAck(4, False)
    await trio.sleep(2 * WRITER_IDLE_S)
    assert not server.writers.child_tasks
    nursery.cancel_scope.cancel()


async def test_connection_blocked_goes_to_the_clients_that_asked_for_it(
    broker: Broker, nursery: trio.Nursery, mock_clock: trio.testing.MockClock, autojump: None
) -> None:
    server = await start(broker, nursery)
    asked, other = connect(server, nursery), connect(server, nursery)
    await asked.handshake(capabilities={"connection.blocked": True})
    await other.handshake()
    broker.alarms.set("memory", True)
    assert await asked.expect(ConnectionBlocked) == ConnectionBlocked("low on memory")
    broker.alarms.set("memory", False)
    assert await asked.next_event() == MethodFrame(0, ConnectionUnblocked())
    assert await other.nothing_arrives()
    broker.alarms.set("disk", True)  # a client connecting while an alarm is on hears of it
    late = connect(server, nursery)
    await late.handshake(capabilities={"connection.blocked": True})
    assert MethodFrame(0, ConnectionBlocked("low on disk")) in late.seen
    nursery.cancel_scope.cancel()
