"""What a STOMP connection costs the broker in tasks, on the adapter every protocol shares
(core/adapter.py): an idle connection is one task, the reader; the handshake deadline and the
heart-beats are entries in the kernel's timer heap (core/connection_deadlines.py), not tasks;
receipts wait for the store in a task that runs only while such receipts are owed.

In memory (the adapter over `memory_stream_pair`), on the autojump clock. The same behaviour
over real sockets and stomp.py is in test_connect.py and test_broker_side.py.
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
from herald.plugins.stomp import plugin as stomp_plugin
from herald.plugins.stomp.codec import (
    SERVER_COMMANDS,
    Event,
    Frame,
    FrameReader,
    Heartbeat,
    StompLimits,
)
from herald.plugins.stomp.config import StompConfig
from herald.plugins.stomp.server import connection_server
from herald.plugins.stomp.session import Session
from tests.slow_store import SlowStore, broker_with

CONNECT = "CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n"


class MemoryClient:
    """STOMP bytes over an in-memory stream; the server's frames and heart-beats read back
    with the codec's reader."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.reader = FrameReader(StompLimits(), SERVER_COMMANDS, peer="server")

    async def send(self, data: str | bytes) -> None:
        await self.stream.send_all(data.encode() if isinstance(data, str) else data)

    async def connect(self, headers: str = "") -> Frame:
        await self.send(f"{CONNECT}{headers}\n\0")
        frame = await self.frame()
        assert frame.command == "CONNECTED", frame
        return frame

    async def event(self) -> Frame | Heartbeat:
        """The next frame or heart-beat; EOFError once the server closed the stream."""
        while True:
            event = self.reader.next_event("1.2")
            if isinstance(event, Event):  # not NEED_DATA
                return event
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("the server closed the connection")
            self.reader.feed(bytes(data))

    async def frame(self) -> Frame:
        """The next frame, heart-beats skipped."""
        while True:
            event = await self.event()
            if isinstance(event, Frame):
                return event

    async def nothing_arrives(self, seconds: float = 1.0) -> bool:
        with trio.move_on_after(seconds):
            await self.event()
            return False
        return True


@pytest.fixture
async def store() -> SlowStore:
    return SlowStore()


@pytest.fixture
async def broker(tmp_path: Path, store: SlowStore) -> AsyncIterator[Broker]:
    async with broker_with(store, tmp_path, stomp_plugin) as running:
        yield running


async def start(
    broker: Broker, nursery: trio.Nursery, config: StompConfig | None = None
) -> ConnectionServer:
    server = connection_server(broker, config or StompConfig())
    await nursery.start(server.run)
    return server


def connect(server: ConnectionServer, nursery: trio.Nursery) -> MemoryClient:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    nursery.start_soon(server.run_connection, server_stream)
    return MemoryClient(client_stream)


def all_tasks() -> int:
    def count(task: trio.lowlevel.Task) -> int:
        return 1 + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return count(root)


async def test_an_idle_connection_holds_one_task(
    broker: Broker, nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    server = await start(broker, nursery)
    await trio.testing.wait_all_tasks_blocked()
    before = all_tasks()
    for _ in range(3):  # heart-beats both ways: no task for them
        await connect(server, nursery).connect("heart-beat:60000,60000\n")
    await trio.sleep(2 * WRITER_IDLE_S)  # the writers end once there is nothing to write
    assert all_tasks() - before == 3  # each connection's reader, nothing else
    assert not server.writers.child_tasks
    for connection in broker.connections:
        session = getattr(connection.closer, "__self__", None)  # session.close_from_broker
        assert isinstance(session, Session)
        assert session.timer_at is not None  # its heart-beats: an entry in the kernel's heap
    nursery.cancel_scope.cancel()


async def test_the_handshake_timeout_closes_a_silent_client(
    broker: Broker,
    nursery: trio.Nursery,
    autojump_clock: trio.abc.Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "herald.core.connections")
    server = await start(broker, nursery, StompConfig(handshake_timeout=5.0))
    client = connect(server, nursery)
    began = trio.current_time()
    with pytest.raises(EOFError):
        await client.event()  # closed without an ERROR
    assert 5.0 <= trio.current_time() - began < 6.0
    assert "no CONNECT frame within the handshake timeout (5s)" in caplog.text
    while server.deadlines.live:
        await trio.sleep(0.1)  # the linger after the close


async def test_heart_beats_are_sent_on_time_and_a_silent_client_is_dropped(
    broker: Broker,
    nursery: trio.Nursery,
    autojump_clock: trio.abc.Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "herald.core.connections")
    server = await start(broker, nursery)
    client = connect(server, nursery)
    connected = await client.connect("heart-beat:4000,2000\n")  # we send every 4 s, want 2 s
    assert connected.get("heart-beat") == "2000,4000"
    silent_since = trio.current_time()
    beats = []
    with pytest.raises(EOFError):
        while True:  # we never send: the server gives up on us
            event = await client.event()
            assert isinstance(event, Heartbeat), event  # no ERROR: the socket just closes
            beats.append(round(trio.current_time() - silent_since, 1))
    assert beats == [2.0, 4.0, 6.0]
    assert 8.0 <= trio.current_time() - silent_since < 9.0  # twice the client's interval
    assert "no heart-beat from the client for 8s" in caplog.text


async def test_a_publisher_paused_by_an_alarm_is_not_dropped_for_missed_heart_beats(
    broker: Broker, nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    server = await start(broker, nursery)
    client = connect(server, nursery)
    await client.connect("heart-beat:2000,0\n")  # silent for 4 s: dropped, unless paused
    queue = broker.default_vhost.declare_queue("target")
    await client.send("SEND\ndestination:/queue/target\n\none\0")
    await trio.testing.wait_all_tasks_blocked()
    broker.alarms.set("memory", True)
    await client.send("SEND\ndestination:/queue/target\nreceipt:two\n\ntwo\0")
    await trio.sleep(30)  # the server reads nothing from us, our heart-beats included
    assert len(broker.connections) == 1 and queue.message_count == 1
    broker.alarms.set("memory", False)
    receipt = await client.frame()
    assert (receipt.command, receipt.get("receipt-id")) == ("RECEIPT", "two")
    assert len(broker.connections) == 1 and queue.message_count == 2
    nursery.cancel_scope.cancel()


PERSISTENT_SEND = "SEND\ndestination:/queue/durable\npersistent:true\nreceipt:{}\n\nkept\0"


async def test_a_task_waits_for_durability_only_while_receipts_are_owed(
    broker: Broker, store: SlowStore, nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    server = await start(broker, nursery)
    client = connect(server, nursery)
    await client.connect()
    await client.send("SEND\ndestination:/queue/durable\nreceipt:declared\n\nfirst\0")
    assert (await client.frame()).get("receipt-id") == "declared"  # transient: at once
    store.flush()
    await trio.sleep(2 * WRITER_IDLE_S)
    assert not server.writers.child_tasks  # nothing owed: no task

    for n in range(3):
        await client.send(PERSISTENT_SEND.format(n))
        await trio.sleep(2 * WRITER_IDLE_S)
        assert len(server.writers.child_tasks) == 1  # one wait for durability, never two
    await client.send("SEND\ndestination:/queue/durable\nreceipt:after\n\ntransient\0")
    assert await client.nothing_arrives()  # no receipt before the earlier ones are durable
    store.flush()
    frames = [await client.frame() for _ in range(4)]
    assert [f.get("receipt-id") for f in frames] == ["0", "1", "2", "after"]  # in order
    await trio.sleep(2 * WRITER_IDLE_S)
    assert not server.writers.child_tasks  # none owed: the task ended

    await client.send(PERSISTENT_SEND.format("again"))
    await trio.sleep(2 * WRITER_IDLE_S)
    assert len(server.writers.child_tasks) == 1
    store.flush()
    assert (await client.frame()).get("receipt-id") == "again"
    await trio.sleep(2 * WRITER_IDLE_S)
    assert not server.writers.child_tasks
    nursery.cancel_scope.cancel()


async def test_a_wait_for_durability_ends_with_its_connection(
    broker: Broker, store: SlowStore, nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    server = await start(broker, nursery)
    client = connect(server, nursery)
    await client.connect()
    store.flush()
    await client.send(PERSISTENT_SEND.format("never"))
    await trio.sleep(2 * WRITER_IDLE_S)
    assert len(server.writers.child_tasks) == 1
    await client.stream.aclose()  # gone before the store made the message durable
    while len(broker.connections):
        await trio.sleep(0.1)
    await trio.testing.wait_all_tasks_blocked()
    assert not server.writers.child_tasks  # not left waiting for a store that never flushes
    nursery.cancel_scope.cancel()


async def test_disconnect_waits_for_the_receipts_asked_before_it(
    broker: Broker, store: SlowStore, nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    server = await start(broker, nursery)
    client = connect(server, nursery)
    await client.connect()
    store.flush()
    await client.send(PERSISTENT_SEND.format("stored") + "DISCONNECT\nreceipt:bye\n\n\0")
    assert await client.nothing_arrives()  # the message is not durable yet
    store.flush()
    with trio.fail_after(10):
        frames = [await client.frame() for _ in range(2)]
        assert [f.get("receipt-id") for f in frames] == ["stored", "bye"]
        with pytest.raises(EOFError):
            await client.event()  # then the server closes
    while len(broker.connections):
        await trio.sleep(0.1)
    assert not server.writers.child_tasks
    nursery.cancel_scope.cancel()
