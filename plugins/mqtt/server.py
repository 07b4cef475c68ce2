"""The Trio adapter: MQTT over TCP and over WebSocket, feeding `Session`; no protocol decisions.

Per connection, one task, the reader (bytes or WebSocket messages into `Session.receive`,
paused while a resource alarm blocks a publisher), in a cancel scope; a writer task
(everything the session produced, in one write) runs in the plugin's nursery only while there
is output, and the handshake and keep alive deadlines of all sessions share one task
(deadlines.py): an idle connection is what MQTT brokers hold by the ten thousand. The writer
finishing — the session is done and its last bytes are out — ends the connection; then the
socket lingers (write side shut, reading and discarding for `close_timeout`), so a client that
is still sending does not make the kernel answer with a reset that destroys the last
DISCONNECT or CONNACK before the client read it. TCP and WebSocket connections both run on
`herald.core.listeners.serve_tcp`, which isolates each handler's failures and closes every
stream when its handler returns (WebSocket ones too: trio-websocket's own server would wait
forever for a client that never answers the server's Close).
"""

from __future__ import annotations

import errno
import logging
import os
import ssl
from functools import partial
from typing import TYPE_CHECKING, Protocol

import trio
from trio_websocket import ConnectionClosed, WebSocketRequest, wrap_server_stream

from herald.core.cert_login import TLSPeer
from herald.core.listeners import peer_name, serve_tcp
from herald.core.plugin_types import Listener
from herald.plugins.mqtt.config import MQTTConfig
from herald.plugins.mqtt.context import MQTTContext
from herald.plugins.mqtt.session import Session

if TYPE_CHECKING:
    from herald.core.broker import Broker

log = logging.getLogger(__name__)

PROTOCOL = "mqtt"
SUBPROTOCOLS = ("mqtt", "mqttv3.1")
_READ_SIZE = 65536
_LOST = (trio.BrokenResourceError, trio.ClosedResourceError)
WRITER_IDLE_S = 1.0
"""How long a connection's writer task waits for output before it ends (`_write`)."""
_WRITER_NAME = "mqtt connection writer"  # one string, not a name made per task by Trio


class Transport(Protocol):
    async def receive(self) -> bytes:
        """The next bytes from the client; b"" once it is gone."""

    async def send(self, data: bytes) -> None: ...

    async def linger(self, timeout: float) -> None:
        """The session ended: let the client read what was written before the close."""


class StreamTransport:
    """MQTT over a TCP or TLS stream.

    A plain TCP socket is read with `os.read` and `trio.lowlevel.wait_readable`, as
    `SocketStream.receive_some` does, but without its five coroutine frames and two context
    managers: an idle connection waits here, and those cost 1.5 KB of each one's memory.
    """

    __slots__ = ("eof", "socket", "stream")

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.eof = False
        direct = type(stream) is trio.SocketStream and os.name == "posix"
        self.socket: trio.socket.SocketType | None = stream.socket if direct else None  # type: ignore[attr-defined]

    async def receive(self) -> bytes:
        """`run_connection` has this inlined for a direct socket (no frame while idle)."""
        sock = self.socket
        if sock is None:
            data = await self.stream.receive_some(_READ_SIZE)
            self.eof = not data
            return data
        await trio.lowlevel.checkpoint_if_cancelled()
        data = self.receive_now()
        if data is None:
            while data is None:
                await trio.lowlevel.wait_readable(sock)
                data = self.receive_now()
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return data

    def receive_now(self) -> bytes | None:
        """What the direct socket holds (b"" at EOF), None if nothing yet; errors as
        `SocketStream.receive_some` raises them."""
        try:
            data = os.read(self.socket.fileno(), _READ_SIZE)  # type: ignore[union-attr]
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
        if self.eof:
            return  # the client closed first: nothing of ours can be reset away
        with trio.move_on_after(timeout):
            try:
                await self.stream.send_eof()  # type: ignore[attr-defined]
                while await self.stream.receive_some(_READ_SIZE):
                    pass
            except (*_LOST, AttributeError):
                pass


class WebSocketTransport:
    """MQTT over WebSocket: binary messages, each holding any part of the byte stream."""

    __slots__ = ("websocket",)

    def __init__(self, websocket: object) -> None:
        self.websocket = websocket

    async def receive(self) -> bytes:
        try:
            message = await self.websocket.get_message()  # type: ignore[attr-defined]
        except ConnectionClosed:
            return b""
        if isinstance(message, str):
            log.info("MQTT over WebSocket: a text frame; closing")
            return b""
        return message

    async def send(self, data: bytes) -> None:
        try:
            await self.websocket.send_message(data)  # type: ignore[attr-defined]
        except ConnectionClosed as exc:
            raise trio.BrokenResourceError("WebSocket closed") from exc

    async def linger(self, timeout: float) -> None:
        """Nothing to do: the WebSocket closing handshake (`_websocket`) flushes."""


async def serve(
    broker: Broker,
    config: MQTTConfig | None,
    *,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The `ProtocolSpec.serve` of MQTT: TCP and (if enabled) WebSocket listeners."""
    config = config if config is not None else MQTTConfig()
    context = MQTTContext(broker, config)
    context.start()
    tls = broker.tls_context
    async with trio.open_nursery() as nursery:  # also every connection's writer task
        handle_stream = partial(run_connection, context, nursery)
        await nursery.start(context.deadlines.run)
        listeners: list[Listener] = await nursery.start(
            partial(
                serve_tcp,
                handle_stream,
                config.host,
                config.port,
                protocol=PROTOCOL,
                setting="mqtt.port",
            )
        )
        if tls is not None:
            mqtts = partial(
                serve_tcp,
                handle_stream,
                config.host,
                config.tls_port,
                protocol=PROTOCOL,
                setting="mqtt.tls_port",
            )
            listeners.extend(await nursery.start(partial(mqtts, ssl_context=tls)))
        if config.ws_enabled:
            listeners.extend(await nursery.start(serve_websocket, context, nursery))
            if tls is not None:
                wss = partial(serve_websocket, context, nursery, config.wss_port, tls)
                listeners.extend(await nursery.start(wss))
        task_status.started(listeners)


async def run_connection(
    context: MQTTContext,
    writers: trio.Nursery,
    stream: trio.abc.Stream,
    transport: Transport | None = None,
) -> None:
    """Serve one client until either side ends the connection; `stream` is the accepted one
    (TLS for mqtts and wss: its client certificate may log in, core/cert_login.py), the
    transport over it a `StreamTransport` unless given. The writer runs in `writers`.

    This task is the reader, and the one task an idle connection has: it reads in this frame,
    not in a nested coroutine, and has a cancel scope but no nursery of its own (each frame,
    nursery and partial is some 250-1000 bytes of each of 10,000 idle connections).
    """
    if transport is None:
        transport = StreamTransport(stream)
    broker = context.broker
    connection = broker.connections.open(PROTOCOL, peer_name(stream))
    connection.tls = TLSPeer.of(stream)
    session = Session(context, connection, _host(stream))
    connection.closer = session.close_from_broker
    context.deadlines.add(session)
    try:
        with trio.CancelScope() as ending:  # a writer cancels it once the session is done
            writer = _Writer(session, transport, writers, ending)
            session.spawn_writer = writer  # not a bound method: one object less
            alarms = broker.alarms
            direct = None  # a StreamTransport whose socket this loop reads itself
            if type(transport) is StreamTransport and transport.socket is not None:
                direct = transport
            try:
                while not session.done:
                    if session.reading_paused:
                        await alarms.wait_publish_allowed()
                        continue
                    if direct is None:
                        data = await transport.receive()
                    else:  # `StreamTransport.receive` inlined
                        await trio.lowlevel.checkpoint_if_cancelled()
                        data = direct.receive_now()
                        if data is None:
                            while data is None:
                                await trio.lowlevel.wait_readable(direct.socket)  # type: ignore[arg-type]
                                data = direct.receive_now()
                        else:
                            await trio.lowlevel.cancel_shielded_checkpoint()
                    if not data:
                        session.connection_lost("client closed the connection")
                        break
                    await session.receive(data)
            except _LOST as exc:
                session.connection_lost(f"connection lost: {exc or type(exc).__name__}")
            if not session.writer_running:  # the reader ended: flush what is left
                session.writer_running = True
                await _write(session, transport, ending)
            while session.writer_running:  # or let the running writer finish
                writer.stopped = trio.Event()
                await writer.stopped.wait()
    finally:
        session.spawn_writer = None
        context.deadlines.remove(session)
        session.teardown()
        broker.connections.close(connection, session.close_reason)
    await transport.linger(context.config.close_timeout)


class _Writer:
    """Starts a connection's writer task when the session has output (`Session.spawn_writer`),
    in the plugin's nursery; a writer's failure closes only its connection."""

    __slots__ = ("ending", "nursery", "session", "stopped", "transport")

    def __init__(
        self,
        session: Session,
        transport: Transport,
        nursery: trio.Nursery,
        ending: trio.CancelScope,
    ) -> None:
        self.session = session
        self.transport = transport
        self.nursery = nursery
        self.ending = ending
        self.stopped: trio.Event | None = None  # set when a writer ends, if the reader waits

    def __call__(self) -> None:
        """Start a writer task."""
        self.nursery.start_soon(self._run, name=_WRITER_NAME)

    async def _run(self) -> None:
        session = self.session
        try:
            await _write(session, self.transport, self.ending)
        except Exception:
            log.exception("mqtt connection writer failed; closing that connection")
            session.connection_lost("internal error while writing")
            self.ending.cancel()
        finally:
            if self.stopped is not None:
                self.stopped.set()


async def _write(session: Session, transport: Transport, ending: trio.CancelScope) -> None:
    """Write what the session produces; started by the session when it has output and no
    writer runs, it ends after WRITER_IDLE_S without output: an idle connection costs one
    task (the reader), not two. When the session is done it cancels `ending`, the reader's
    scope (it has written all there was, so nothing of its own is cut short)."""
    idle = False
    try:
        while True:
            data = session.data_to_send()
            if data:
                idle = False
                try:
                    await transport.send(data)
                except _LOST:
                    session.connection_lost("connection lost while writing")
                    ending.cancel()
                    return
                session.written()
                continue
            if session.done:
                ending.cancel()
                return
            if idle and not session.output_pending():
                return  # no await since the check: a later `_wake` starts a new writer
            with trio.move_on_after(WRITER_IDLE_S) as waiting:
                await session.wait_output()
            idle = waiting.cancelled_caught
    finally:
        session.writer_running = False


async def serve_websocket(
    context: MQTTContext,
    writers: trio.Nursery,
    port: int | None = None,
    ssl_context: ssl.SSLContext | None = None,
    *,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """MQTT over WebSocket on `[mqtt] ws_host:ws_port` (or `port`, over TLS with
    `ssl_context`), over TCP streams herald owns."""
    config = context.config

    async def handle(stream: trio.abc.Stream) -> None:
        async with trio.open_nursery() as nursery:  # runs trio-websocket's reader task
            accepted = False
            try:
                request = None
                with trio.move_on_after(config.handshake_timeout):
                    request = await wrap_server_stream(
                        nursery, stream, max_message_size=2 * config.max_packet_size
                    )
                if request is not None:
                    accepted = await _websocket(context, writers, request, stream)
            except ConnectionClosed:
                log.debug("mqtt WebSocket client went away during the handshake")
            finally:
                if accepted:
                    # Not at once: trio-websocket's reader may still be sending a Close of its
                    # own (1009 for a message too big), then waits for the client's. It ends
                    # when the closing handshake closes the stream (at once after a normal
                    # close), or is cut off after `close_timeout`, as `aclose` would be.
                    nursery.cancel_scope.deadline = trio.current_time() + config.close_timeout
                else:  # no handshake, or a 404: the reader has nothing left to send
                    nursery.cancel_scope.cancel()

    port = config.ws_port if port is None else port
    transport = "ws" if ssl_context is None else "wss"
    async with trio.open_nursery() as nursery:
        tcp = partial(
            serve_tcp,
            handle,
            config.ws_host,
            port,
            protocol=PROTOCOL,
            ssl_context=ssl_context,
            setting="mqtt.ws_port" if ssl_context is None else "mqtt.wss_port",
            transport=transport,
        )
        bound: list[Listener] = await nursery.start(tcp)
        task_status.started([Listener(PROTOCOL, transport, b.host, b.port) for b in bound])


async def _websocket(
    context: MQTTContext, writers: trio.Nursery, request: WebSocketRequest, stream: trio.abc.Stream
) -> bool:
    """Serve one WebSocket request; False if it was rejected (a path that is not MQTT's)."""
    path = request.path.partition("?")[0]
    if path != context.config.ws_path:
        await request.reject(404, body=b"not an MQTT endpoint\n")
        return False
    offered = request.proposed_subprotocols
    subprotocol = next((p for p in SUBPROTOCOLS if p in offered), None)
    websocket = await request.accept(subprotocol=subprotocol)
    try:
        await run_connection(context, writers, stream, WebSocketTransport(websocket))
    finally:
        with trio.move_on_after(context.config.close_timeout):
            await websocket.aclose()
    return True


def _host(stream: trio.abc.Stream) -> str | None:
    inner = getattr(stream, "transport_stream", stream)
    sock = getattr(inner, "socket", None)
    try:
        return sock.getpeername()[0] if sock is not None else None
    except OSError:
        return None
