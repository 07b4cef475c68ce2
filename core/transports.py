"""The byte pipes a protocol session is served over: a TCP or TLS stream, or a WebSocket.

The adapter (core/adapter.py) reads and writes through these, whatever the protocol. A plain
TCP socket is read with `os.read` and `trio.lowlevel.wait_readable`, as
`SocketStream.receive_some` does, but without its five coroutine frames and two context
managers: an idle connection waits there, and those cost 1.5 KB of each one's memory.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from typing import Protocol

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

log = logging.getLogger(__name__)

READ_SIZE = 65536
LOST = (trio.BrokenResourceError, trio.ClosedResourceError)
"""What a read or write raises once the peer is gone."""


class Transport(Protocol):
    async def receive(self) -> bytes:
        """The next bytes from the client; b"" once it is gone."""

    async def send(self, data: bytes) -> None:
        """Write `data`; raises trio.BrokenResourceError once the client is gone."""

    async def linger(self, timeout: float) -> None:
        """The session ended: let the client read what was written before the close."""


class StreamTransport:
    """A TCP or TLS stream."""

    __slots__ = ("eof", "socket", "stream")

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.eof = False
        self.socket: trio.socket.SocketType | None = None
        if type(stream) is trio.SocketStream and os.name == "posix":
            self.socket = stream.socket  # read directly (`receive_now`)

    async def receive(self) -> bytes:
        """The adapter has this inlined for a direct socket (no frame while idle)."""
        sock = self.socket
        if sock is None:
            chunk = await self.stream.receive_some(READ_SIZE)
            self.eof = not chunk
            return bytes(chunk)  # the same object when it is bytes already
        await trio.lowlevel.checkpoint_if_cancelled()
        data = self.receive_now(sock)
        if data is None:
            while data is None:
                await trio.lowlevel.wait_readable(sock)
                data = self.receive_now(sock)
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return data

    def receive_now(self, sock: trio.socket.SocketType) -> bytes | None:
        """What the direct socket holds (b"" at EOF), None if nothing yet; errors as
        `SocketStream.receive_some` raises them."""
        try:
            data = os.read(sock.fileno(), READ_SIZE)
        except BlockingIOError:
            return None
        except OSError as exc:
            if exc.errno in (errno.EBADF, errno.ENOTSOCK):
                raise trio.ClosedResourceError("this socket was already closed") from None
            raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
        self.eof = not data
        return data

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def linger(self, timeout: float) -> None:
        """Shut the write side and read and discard for up to `timeout`: a client that is
        still sending would otherwise make the kernel answer with a reset, which destroys
        the last frames (a close-ok, an ERROR) before the client read them."""
        if self.eof:
            return  # the client closed first: nothing of ours can be reset away
        with trio.move_on_after(timeout):
            try:
                send_eof = getattr(self.stream, "send_eof", None)  # TLS streams have none
                if send_eof is not None:
                    await send_eof()
                while await self.stream.receive_some(READ_SIZE):
                    pass
            except LOST:
                pass


class WebSocketTransport:
    """A WebSocket: each message holds any part of the protocol's byte stream.

    `text` says what the protocol does with text messages: MQTT forbids them (a text message
    ends the connection, and output is binary), STOMP takes them (and sends a write as text
    when it is UTF-8, as browsers' STOMP clients expect).
    """

    __slots__ = ("text", "websocket")

    def __init__(self, websocket: WebSocketConnection, *, text: bool) -> None:
        self.websocket = websocket
        self.text = text

    async def receive(self) -> bytes:
        try:
            message = await self.websocket.get_message()
        except ConnectionClosed:
            return b""
        if isinstance(message, str):
            if not self.text:
                log.info("a text WebSocket message on a binary-only protocol; closing")
                return b""
            return message.encode()
        return message

    async def send(self, data: bytes) -> None:
        message: str | bytes = data
        if self.text:
            with contextlib.suppress(UnicodeDecodeError):  # binary unless it is text
                message = data.decode("utf-8")
        try:
            await self.websocket.send_message(message)
        except ConnectionClosed as exc:
            raise trio.BrokenResourceError("WebSocket closed") from exc

    async def linger(self, timeout: float) -> None:
        """Nothing to do: the WebSocket closing handshake (core/websocket.py) flushes."""
