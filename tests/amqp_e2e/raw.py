"""A raw-socket AMQP client for the tests that must send what no library would."""

from __future__ import annotations

import socket
from typing import TypeVar

from herald.plugins.amqp.codec import PROTOCOL_HEADER, Event, MethodFrame
from herald.plugins.amqp.codec.methods import (
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
from tests.amqp.helpers import ClientReader, method_frame
from tests.amqp_e2e.conftest import CLIENT_TIMEOUT

M = TypeVar("M", bound=Method)


class RawClient:
    """Frames in, events out, over a blocking socket with a timeout."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT)
        self.reader = ClientReader()
        self.events: list[Event] = []

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_method(self, channel: int, method: Method) -> None:
        self.send(method_frame(channel, method))

    def receive(self) -> bytes:
        """One read; b"" once the server closed the socket."""
        return self.sock.recv(65536)

    def next_method(self, kind: type[Method]) -> MethodFrame:
        """Read until a method frame of `kind` arrives (skipping heartbeats and others)."""
        while True:
            while self.events:
                event = self.events.pop(0)
                if isinstance(event, MethodFrame) and isinstance(event.method, kind):
                    return event
            data = self.receive()
            if not data:
                raise EOFError(f"socket closed while waiting for {kind.__name__}")
            self.events.extend(self.reader.feed(data))

    def expect(self, kind: type[M]) -> M:
        """The next method of `kind`, typed as such (`next_method(kind).method`)."""
        method = self.next_method(kind).method
        assert isinstance(method, kind)
        return method

    def read_until_closed(self) -> list[Event]:
        """Everything the server sends until it closes the socket."""
        while data := self.receive():
            self.events.extend(self.reader.feed(data))
        events, self.events = self.events, []
        return events

    def handshake(self, heartbeat: int = 0, open_channel: bool = True) -> ConnectionTune:
        self.send(PROTOCOL_HEADER)
        self.next_method(ConnectionStart)
        self.send_method(0, ConnectionStartOk({}, "PLAIN", b"\0guest\0guest", "en_US"))
        tune = self.next_method(ConnectionTune).method
        assert isinstance(tune, ConnectionTune)
        self.send_method(0, ConnectionTuneOk(tune.channel_max, tune.frame_max, heartbeat))
        self.send_method(0, ConnectionOpen("/"))
        self.next_method(ConnectionOpenOk)
        if open_channel:
            self.send_method(1, ChannelOpen())
            self.next_method(ChannelOpenOk)
        return tune
