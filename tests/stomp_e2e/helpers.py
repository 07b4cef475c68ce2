"""End-to-end helpers: an embedded broker with the STOMP plugin, stomp.py clients, raw sockets.

The broker runs in the test's own Trio loop (`stomp_broker`). stomp.py is blocking and runs a
receiver thread of its own, so every call into it goes through `trio.to_thread.run_sync`
(`Client.call`), abandoned on cancellation so that `trio.fail_after` bounds a hung client.
Frames stomp.py receives are collected by a `Collector` listener that test code waits on,
also from a worker thread (`Client.wait`). `RawClient` speaks bytes over a Trio socket, for
the malformed input no client library sends, and reads the answers with the codec's reader.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import stomp
import trio
from stomp.adapter.ws import WSStompConnection

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.store import Store
from herald.core.testing import listener_port
from herald.plugins.stomp import plugin as stomp_plugin
from herald.plugins.stomp.codec import (
    NEED_DATA,
    SERVER_COMMANDS,
    Frame,
    FrameReader,
    StompLimits,
)
from herald.storage.memory import MemoryStore, MemoryStoreData

T = TypeVar("T")
WAIT = 10.0
"""Seconds a test waits for something that should happen (never a timing assertion)."""


@asynccontextmanager
async def stomp_broker(
    data_dir: Path,
    *,
    data: MemoryStoreData | None = None,
    settings: Sequence[str] = (),
    store: Store | None = None,
) -> AsyncIterator[Broker]:
    """A broker serving STOMP on free ports of 127.0.0.1, on `store` or the memory store."""
    async with embedded(
        plugins=["stomp"],
        settings=[
            "stomp.host=127.0.0.1",
            "stomp.port=0",
            "stomp.ws_host=127.0.0.1",
            "stomp.ws_port=0",
            *settings,
        ],
        data_dir=data_dir,
        load_entrypoints=False,
        extra_plugins=[stomp_plugin],
        store=store or MemoryStore(data if data is not None else MemoryStoreData()),
    ) as broker:
        yield broker


def port(broker: Broker, transport: str = "tcp") -> int:
    return listener_port(broker, "stomp", transport)


class Collector(stomp.ConnectionListener):
    """Everything a stomp.py connection receives, for tests to wait on."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.connected: list[stomp.utils.Frame] = []
        self.messages: list[stomp.utils.Frame] = []
        self.errors: list[stomp.utils.Frame] = []
        self.receipts: list[str] = []
        self.sent: list[stomp.utils.Frame] = []
        """Frames stomp.py sent (its CONNECT first)."""
        self.heartbeats = 0
        self.disconnected = False

    def _add(self, items: list[Any], item: Any) -> None:
        with self.cond:
            items.append(item)
            self.cond.notify_all()

    def on_send(self, frame: stomp.utils.Frame) -> None:
        self._add(self.sent, frame)

    def on_connected(self, frame: stomp.utils.Frame) -> None:
        self._add(self.connected, frame)

    def on_message(self, frame: stomp.utils.Frame) -> None:
        self._add(self.messages, frame)

    def on_error(self, frame: stomp.utils.Frame) -> None:
        self._add(self.errors, frame)

    def on_receipt(self, frame: stomp.utils.Frame) -> None:
        self._add(self.receipts, frame.headers["receipt-id"])

    def on_heartbeat(self) -> None:
        with self.cond:
            self.heartbeats += 1
            self.cond.notify_all()

    def on_disconnected(self) -> None:
        with self.cond:
            self.disconnected = True
            self.cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout)


class Client:
    """A stomp.py connection driven from a Trio test."""

    def __init__(self, conn: stomp.connect.BaseConnection, collector: Collector) -> None:
        self.conn = conn
        self.frames = collector

    @classmethod
    async def connect(
        cls,
        broker: Broker,
        version: str = "1.2",
        *,
        login: str | None = "guest",
        passcode: str | None = "guest",
        vhost: str | None = "/",
        heartbeats: tuple[int, int] = (0, 0),
        websocket: bool = False,
        ws_path: str = "/ws",
        wait: bool = True,
        **headers: str,
    ) -> Client:
        address = [("127.0.0.1", port(broker, "ws" if websocket else "tcp"))]
        if websocket:
            conn: Any = WSStompConnection(
                address, heartbeats=heartbeats, vhost=vhost, ws_path=ws_path
            )
        elif version == "1.0":
            conn = stomp.Connection10(address)
        elif version == "1.1":
            conn = stomp.Connection11(address, heartbeats=heartbeats, vhost=vhost)
        else:
            conn = stomp.Connection12(address, heartbeats=heartbeats, vhost=vhost)
        return await cls.attach(conn, login=login, passcode=passcode, wait=wait, **headers)

    @classmethod
    async def attach(
        cls,
        conn: stomp.connect.BaseConnection,
        *,
        login: str | None = "guest",
        passcode: str | None = "guest",
        wait: bool = True,
        **headers: str,
    ) -> Client:
        """Connect `conn`, a stomp.py connection the test built itself, as `login`."""
        collector = Collector()
        conn.set_listener("collector", collector)
        client = cls(conn, collector)
        await client.call(conn.connect, login, passcode, wait=wait, headers=headers)
        return client

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await trio.to_thread.run_sync(partial(fn, *args, **kwargs), abandon_on_cancel=True)

    async def wait(self, predicate: Callable[[], bool]) -> None:
        assert await self.call(self.frames.wait_for, predicate), "timed out waiting"

    async def messages(self, count: int) -> list[stomp.utils.Frame]:
        """Wait until `count` messages arrived; returns them all."""
        await self.wait(lambda: len(self.frames.messages) >= count)
        return list(self.frames.messages)

    async def receipt(self, receipt_id: str) -> None:
        await self.wait(lambda: receipt_id in self.frames.receipts)

    async def send(self, destination: str, body: str | bytes, **headers: Any) -> None:
        await self.call(self.conn.send, destination, body, headers=headers)

    async def subscribe(
        self, destination: str, sub_id: str, ack: str = "auto", **headers: Any
    ) -> None:
        await self.call(self.conn.subscribe, destination, sub_id, ack=ack, headers=headers)

    async def disconnect(self, receipt: str | None = None) -> None:
        await self.call(self.conn.disconnect, receipt)

    async def close_socket(self) -> None:
        """Go away without DISCONNECT (a crash)."""
        await self.call(self.conn.transport.disconnect_socket)

    async def wait_disconnected(self) -> None:
        await self.wait(lambda: self.frames.disconnected)


class RawClient:
    """A STOMP client made of bytes, for what well-behaved libraries never send."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.reader = FrameReader(
            StompLimits(max_frame_size=64 * 1024 * 1024), SERVER_COMMANDS, peer="server"
        )
        self.closed = False

    @classmethod
    async def open(cls, broker: Broker) -> RawClient:
        return cls(await trio.open_tcp_stream("127.0.0.1", port(broker)))

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def connect(self, version: str = "1.2") -> Frame:
        await self.send(
            f"CONNECT\naccept-version:{version}\nhost:/\nlogin:guest\npasscode:guest\n\n\x00".encode()
        )
        frame = await self.frame()
        assert frame.command == "CONNECTED", frame
        return frame

    async def frame(self, version: str = "1.2") -> Frame:
        """The next frame from the server (heart-beats skipped); EOFError once it closed."""
        while True:
            event = self.reader.next_event(version)
            if isinstance(event, Frame):
                return event
            if event is NEED_DATA:
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    data = b""
                if not data:
                    self.closed = True
                    raise EOFError("the server closed the connection")
                self.reader.feed(data)

    async def until_closed(self) -> list[Frame]:
        """Every frame until the server closes the connection."""
        frames = []
        while True:
            try:
                frames.append(await self.frame())
            except EOFError:
                return frames

    async def aclose(self) -> None:
        await self.stream.aclose()


async def no_connections(broker: Broker) -> None:
    """Wait until the broker has forgotten every connection (they close asynchronously)."""
    while len(broker.connections):
        await trio.sleep(0.01)
