"""The one connection adapter (core/adapter.py) with a small line protocol built on
`SessionIO`: the reader loop, the writer that runs only while there is output, deadlines in
the kernel's timer heap, the bounded close, crash isolation and lingering.

Deadline tests run on memory streams with the autojump clock; the direct socket read runs on
real TCP streams on 127.0.0.1.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from herald.core.adapter import WRITER_IDLE_S, ConnectionServer
from herald.core.broker import Broker
from herald.core.connections import Connection
from herald.core.embedding import embedded
from herald.core.listeners import serve_tcp
from herald.core.session_io import SessionIO
from herald.storage.memory import MemoryStore

HANDSHAKE_S = 10.0
CLOSE_S = 3.0


class LineCodec:
    """Sans-IO: lines in, lines out."""

    def __init__(self) -> None:
        self.inbox = bytearray()
        self.outbox = bytearray()

    def lines(self, data: bytes) -> list[bytes]:
        self.inbox += data
        *whole, rest = self.inbox.split(b"\n")
        self.inbox = bytearray(rest)
        return [bytes(line) for line in whole]

    def send(self, line: bytes) -> None:
        self.outbox += line + b"\n"

    def data_to_send(self) -> bytes:
        data, self.outbox = bytes(self.outbox), bytearray()
        return data


class LineSession(SessionIO):
    """HELLO opens; every later line is echoed; QUIT says BYE and ends; a line before HELLO
    is a protocol error; CRASH makes the writer fail; no HELLO in HANDSHAKE_S ends it."""

    def __init__(self, connection: Connection, peer_host: str | None) -> None:
        super().__init__(write_buffer=4096)
        self.codec = LineCodec()
        self.connection = connection
        self.opened_at = trio.current_time()
        self.opened = False
        self.torn_down = False
        self.publisher = False  # said PUB: paused while a resource alarm is on
        self.closing = False  # the broker asked it to close: it waits for the client's OK

    async def receive(self, data: bytes) -> None:
        for line in self.codec.lines(data):
            if line == b"HELLO":
                self.opened = True
                self.codec.send(b"WELCOME")
            elif not self.opened:
                self.finish("protocol error: HELLO first")
            elif line == b"QUIT":
                self.codec.send(b"BYE")
                self.finish("client said QUIT")
            elif line == b"PUB":
                self.publisher = True
            elif line == b"OK" and self.closing:
                self.finish("closed by the broker")
            elif line == b"CRASH":
                self.codec.data_to_send = self._crash  # a bug in the protocol
            else:
                self.codec.send(line)
        self.wake()

    def _crash(self) -> bytes:
        raise RuntimeError("a bug in the protocol")

    def deadline(self) -> float:
        return math.inf if self.opened or self.done else self.opened_at + HANDSHAKE_S

    def check_timers(self, now: float) -> None:
        if not self.opened and now >= self.deadline():
            self.finish("handshake timeout")

    def finish(self, reason: str) -> None:
        if not self.done:
            self.done = True
            self.close_reason = reason
        self.wake()

    def connection_lost(self, reason: str) -> None:
        self.finish(reason)

    def teardown(self) -> None:
        self.torn_down = True

    @property
    def reading_paused(self) -> bool:
        alarms = self.connection_alarms
        return self.publisher and alarms is not None and alarms.blocked and not self.closing

    connection_alarms: Any = None  # the broker's Alarms, set by the fixture

    def close_from_broker(self, reason: str) -> None:
        self.codec.send(b"GOING AWAY")
        if self.publisher:  # a polite close: wait for the client's OK
            self.closing = True
            self.wake()
        else:
            self.finish(reason)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with embedded(data_dir=tmp_path, plugins=[], store=MemoryStore()) as running:
        yield running


class LineServer(ConnectionServer):
    """The adapter, with the sessions it made for the tests to look at."""

    sessions: list[LineSession]


@pytest.fixture
async def server(broker: Broker, nursery: trio.Nursery) -> LineServer:
    sessions: list[LineSession] = []

    def new_session(connection: Connection, peer_host: str | None) -> LineSession:
        session = LineSession(connection, peer_host)
        session.connection_alarms = broker.alarms
        sessions.append(session)
        return session

    running = LineServer(broker, "lines", new_session, close_timeout=CLOSE_S)
    running.sessions = sessions
    await nursery.start(running.run)
    return running


async def read_until(stream: trio.abc.ReceiveStream, end: bytes) -> bytes:
    data = b""
    while not data.endswith(end):
        chunk = await stream.receive_some(4096)
        if not chunk:
            break
        data += chunk
    return data


async def test_echo_over_tcp_with_a_writer_only_while_there_is_output(
    server: LineServer, nursery: trio.Nursery, broker: Broker
) -> None:
    listeners = await nursery.start(
        partial(serve_tcp, server.run_connection, "127.0.0.1", 0, protocol="lines")
    )
    client = await trio.open_tcp_stream("127.0.0.1", listeners[0].port)
    with trio.fail_after(10):
        await client.send_all(b"HELLO\nping\n")
        assert await read_until(client, b"ping\n") == b"WELCOME\nping\n"
        session = server.sessions[0]
        assert session.link is not None
        while session.link.writing is not None:  # the writer ends once idle
            await trio.sleep(WRITER_IDLE_S / 4)
        assert len(broker.connections) == 1
        await client.send_all(b"again\nQUIT\n")
        assert await read_until(client, b"BYE\n") == b"again\nBYE\n"
        assert await client.receive_some(100) == b""  # the server closed
        while len(broker.connections):
            await trio.sleep(0.01)
    assert session.torn_down and session.close_reason == "client said QUIT"
    await client.aclose()


async def test_handshake_deadline_is_served_by_the_kernel_timer(
    server: LineServer, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    server_side, client = trio.testing.memory_stream_pair()
    nursery.start_soon(server.run_connection, server_side)
    start = trio.current_time()
    with trio.fail_after(HANDSHAKE_S * 2):
        assert await client.receive_some(100) == b""  # closed by the deadline
    session = server.sessions[0]
    assert session.close_reason == "handshake timeout"
    assert trio.current_time() - start >= HANDSHAKE_S
    assert server.deadlines.live == 0


async def test_an_opened_session_has_no_deadline(
    server: LineServer, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    server_side, client = trio.testing.memory_stream_pair()
    nursery.start_soon(server.run_connection, server_side)
    await client.send_all(b"HELLO\n")
    assert await client.receive_some(100) == b"WELCOME\n"
    await trio.sleep(HANDSHAKE_S * 3)
    session = server.sessions[0]
    assert not session.done and session.link is not None and session.link.writing is None
    await client.send_all(b"QUIT\n")
    assert await read_until(client, b"BYE\n") == b"BYE\n"


async def test_a_done_session_whose_client_does_not_read_is_cut_after_close_timeout(
    server: LineServer, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    server_side, client = trio.testing.lockstep_stream_pair()  # a write waits for a read
    nursery.start_soon(server.run_connection, server_side)
    await client.send_all(b"HELLO\n")
    await trio.testing.wait_all_tasks_blocked()  # the writer is stuck sending WELCOME
    session = server.sessions[0]
    start = trio.current_time()
    session.close_from_broker("shutting down")
    while not session.torn_down:
        await trio.sleep(0.1)
    assert trio.current_time() - start >= CLOSE_S
    assert session.close_reason == "shutting down"


async def test_a_failing_writer_closes_only_its_connection(
    server: LineServer,
    nursery: trio.Nursery,
    broker: Broker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    crashing, crash_client = trio.testing.memory_stream_pair()
    healthy, client = trio.testing.memory_stream_pair()
    nursery.start_soon(server.run_connection, crashing)
    nursery.start_soon(server.run_connection, healthy)
    with trio.fail_after(10):
        await crash_client.send_all(b"HELLO\n")
        assert await read_until(crash_client, b"\n") == b"WELCOME\n"
        await crash_client.send_all(b"CRASH\nx\n")
        assert await crash_client.receive_some(100) == b""  # closed
        await client.send_all(b"HELLO\nstill here\n")
        assert await read_until(client, b"here\n") == b"WELCOME\nstill here\n"
    assert "lines connection writer failed" in caplog.text
    assert len(broker.connections) == 1


async def test_linger_reads_and_discards_what_the_client_still_sends(
    server: LineServer, nursery: trio.Nursery
) -> None:
    listeners = await nursery.start(
        partial(serve_tcp, server.run_connection, "127.0.0.1", 0, protocol="lines")
    )
    client = await trio.open_tcp_stream("127.0.0.1", listeners[0].port)
    with trio.fail_after(10):
        # A line before HELLO ends the session at once; the client goes on writing.
        await client.send_all(b"oops\n" + b"more\n" * 1000)
        await client.send_all(b"still more\n" * 1000)  # no reset: the server still reads
        assert await client.receive_some(100) == b""  # the server's write side is shut
        await client.send_all(b"last\n")
    assert server.sessions[0].close_reason == "protocol error: HELLO first"
    await client.aclose()


async def test_a_reader_paused_by_an_alarm_reads_again_to_close(
    server: LineServer, nursery: trio.Nursery, broker: Broker
) -> None:
    server_side, client = trio.testing.memory_stream_pair()
    nursery.start_soon(server.run_connection, server_side)
    with trio.fail_after(10):
        await client.send_all(b"HELLO\nPUB\n")
        assert await read_until(client, b"\n") == b"WELCOME\n"
        broker.alarms.set(
            "test", True
        )  # the publisher's reader stops reading (no monitor clears it)
        await client.send_all(b"x\n")  # read by the read already waiting, but held
        await trio.testing.wait_all_tasks_blocked()
        session = server.sessions[0]
        assert session.reading_paused
        session.close_from_broker("shutting down")
        assert await read_until(client, b"x\n") == b"GOING AWAY\nx\n"
        await client.send_all(b"OK\n")  # read although the alarm is still on
        assert await client.receive_some(100) == b""
    assert session.close_reason == "closed by the broker"
    broker.alarms.set("test", False)
