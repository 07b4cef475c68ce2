"""AMQP inside one Trio program: a client over an in-memory stream, and the server side of it
run by the shared adapter (core/adapter.py) as a listener would, with no socket."""

from __future__ import annotations

from typing import Any

import trio

from herald.core.adapter import ConnectionServer
from herald.plugins.amqp.codec import PROTOCOL_HEADER, Event, MethodFrame
from herald.plugins.amqp.codec.methods import (
    BasicPublish,
    ChannelOpen,
    ChannelOpenOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    Method,
)
from tests.amqp.helpers import ClientReader, body_frame, header_frame, method_frame


async def run_connection(server: ConnectionServer, stream: trio.abc.Stream) -> None:
    """`server.run_connection(stream)`, then close the stream, as a listener does."""
    async with stream:
        await server.run_connection(stream)


async def serve_connection(server: ConnectionServer, stream: trio.abc.Stream) -> None:
    """One connection over `stream`, its writers in a nursery of their own."""
    async with trio.open_nursery() as writers:
        await writers.start(server.run)
        await run_connection(server, stream)
        writers.cancel_scope.cancel()


class AsyncClient:
    """Frames over a Trio stream, read with the codec tests' ClientReader."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.reader = ClientReader()
        self.events: list[Event] = []  # read, not yet taken by `next_event`
        self.seen: list[Event] = []  # every event taken, skipped by `expect` too

    async def send_method(self, channel: int, method: Method) -> None:
        await self.stream.send_all(method_frame(channel, method))

    async def publish(self, routing_key: str, body: bytes, properties: bytes = b"\x00\x00") -> None:
        frames = method_frame(1, BasicPublish(routing_key=routing_key))
        frames += header_frame(1, len(body), properties) + body_frame(1, body)
        await self.stream.send_all(frames)

    async def next_event(self) -> Event:
        while not self.events:
            data = await self.stream.receive_some(65536)
            assert data, "server closed the stream"
            self.events.extend(self.reader.feed(bytes(data)))
        event = self.events.pop(0)
        self.seen.append(event)
        return event

    async def nothing_arrives(self, seconds: float = 1.0) -> bool:
        """Whether no event comes for `seconds`."""
        with trio.move_on_after(seconds):
            await self.next_event()
            return False
        return True

    async def expect(self, kind: type[Method]) -> Method:
        while True:
            event = await self.next_event()
            if isinstance(event, MethodFrame) and isinstance(event.method, kind):
                return event.method

    async def read_until_closed(self) -> list[Event]:
        """Every event until the server closes the stream."""
        events, self.events = self.events, []
        while data := await self.stream.receive_some(65536):
            events.extend(self.reader.feed(bytes(data)))
        return events

    async def handshake(
        self, *, heartbeat: int = 0, capabilities: dict[str, Any] | None = None
    ) -> None:
        """connection.open-ok, then channel 1 open."""
        await self.stream.send_all(PROTOCOL_HEADER)
        await self.expect(ConnectionStart)
        client_properties = {"capabilities": capabilities or {}}
        start_ok = ConnectionStartOk(client_properties, "PLAIN", b"\0guest\0guest", "en_US")
        await self.send_method(0, start_ok)
        tune = await self.expect(ConnectionTune)
        assert isinstance(tune, ConnectionTune)
        await self.send_method(0, ConnectionTuneOk(tune.channel_max, tune.frame_max, heartbeat))
        await self.send_method(0, ConnectionOpen("/"))
        await self.expect(ConnectionOpenOk)
        await self.send_method(1, ChannelOpen())
        await self.expect(ChannelOpenOk)
