"""The Trio adapter: TCP and WebSocket bytes in and out of a STOMP `Session`; no protocol here.

Per connection, in one nursery:
- the reader feeds the session what the transport gives, and stops reading while the session
  says publishing is blocked (a resource alarm), so TCP backpressure reaches the publisher;
- the writer (this task) sends everything the session produced since its last write in one
  write, and tells the session when it is written (consumer backpressure);
- timers: the handshake deadline and heart-beats; and the session's receipt task (durability).

WebSocket (RabbitMQ's Web-STOMP): `ws_path` is upgraded with the best STOMP subprotocol the
client offers (v12.stomp, v11.stomp, v10.stomp, stomp; none if it offers none); each WebSocket
message carries STOMP bytes (a frame, part of one, or several), and each write goes out as one
message: text when it is UTF-8, binary otherwise.

After the session ends, TCP connections are half-closed and drained for `close_timeout`, so a
final ERROR is not lost to a reset when the client was still sending (an oversized frame).
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from functools import partial
from typing import TYPE_CHECKING, Protocol

import trio
import trio_websocket

from herald.core.cert_login import TLSPeer
from herald.core.listeners import peer_host, peer_name, serve_tcp
from herald.core.plugin_types import Listener
from herald.plugins.stomp.config import StompConfig
from herald.plugins.stomp.session import Session

if TYPE_CHECKING:
    from herald.core.broker import Broker

log = logging.getLogger(__name__)

PROTOCOL = "stomp"
RECEIVE_SIZE = 256 * 1024
SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp", "stomp")
_LOST = (trio.BrokenResourceError, trio.ClosedResourceError)


class Transport(Protocol):
    """A byte pipe to one client: TCP stream or WebSocket connection."""

    async def receive(self) -> bytes:
        """The next bytes from the client; b"" once it closed."""

    async def send(self, data: bytes) -> None:
        """Write `data`; raises trio.BrokenResourceError when the client is gone."""

    async def linger(self, timeout: float) -> None:
        """The session ended: let the client read what was written before the close."""


class TcpTransport:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream

    async def receive(self) -> bytes:
        try:
            return await self.stream.receive_some(RECEIVE_SIZE)
        except _LOST:
            return b""

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def linger(self, timeout: float) -> None:
        with trio.move_on_after(timeout):
            try:
                await self.stream.send_eof()  # type: ignore[attr-defined]
                while await self.stream.receive_some(RECEIVE_SIZE):
                    pass
            except (*_LOST, AttributeError):
                pass


class WebSocketTransport:
    def __init__(self, ws: trio_websocket.WebSocketConnection) -> None:
        self.ws = ws

    async def receive(self) -> bytes:
        try:
            message = await self.ws.get_message()
        except trio_websocket.ConnectionClosed:
            return b""
        return message.encode() if isinstance(message, str) else message

    async def send(self, data: bytes) -> None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            message: str | bytes = data
        else:
            message = text
        try:
            await self.ws.send_message(message)
        except trio_websocket.ConnectionClosed:
            raise trio.BrokenResourceError("WebSocket closed") from None

    async def linger(self, timeout: float) -> None:
        with trio.move_on_after(timeout):
            await self.ws.aclose()


async def serve(
    broker: Broker,
    config: StompConfig | None,
    *,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on `[stomp] host:port` (and the WebSocket port) until cancelled."""
    config = config if config is not None else StompConfig()

    async def handle_tcp(stream: trio.abc.Stream) -> None:
        await run_connection(
            broker, config, TcpTransport(stream), peer_name(stream), peer_host(stream), stream
        )

    tls = broker.tls_context
    async with trio.open_nursery() as nursery:
        tcp = partial(
            serve_tcp, handle_tcp, config.host, config.port, protocol=PROTOCOL, setting="stomp.port"
        )
        listeners: list[Listener] = list(await nursery.start(tcp))
        if tls is not None:
            stomps = partial(
                serve_tcp,
                handle_tcp,
                config.host,
                config.tls_port,
                protocol=PROTOCOL,
                ssl_context=tls,
                setting="stomp.tls_port",
            )
            listeners.extend(await nursery.start(stomps))
        if config.ws_enabled:
            listeners.extend(await nursery.start(serve_websocket, broker, config))
            if tls is not None:
                wss = partial(serve_websocket, broker, config, config.wss_port, tls)
                listeners.extend(await nursery.start(wss))
        task_status.started(listeners)


async def serve_websocket(
    broker: Broker,
    config: StompConfig,
    port: int | None = None,
    ssl_context: ssl.SSLContext | None = None,
    *,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Web-STOMP on `[stomp] ws_host:ws_port` (or `port`, over TLS with `ssl_context`), over
    TCP streams herald owns.

    trio-websocket's own server closes a connection only when the close handshake completes,
    so a client that never answers the server's Close (after an oversized message, say) would
    keep its socket forever; here serve_tcp closes every stream when its handler returns.
    """

    async def handle(stream: trio.abc.Stream) -> None:
        async with trio.open_nursery() as nursery:  # runs trio-websocket's reader task
            try:
                request = None
                with trio.move_on_after(config.handshake_timeout):
                    request = await trio_websocket.wrap_server_stream(
                        nursery, stream, max_message_size=2 * config.max_frame_size
                    )
                if request is not None:
                    await _serve_request(broker, config, request, stream)
            except trio_websocket.ConnectionClosed:
                log.debug("stomp websocket client went away during the handshake")
            finally:
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
            setting="stomp.ws_port" if ssl_context is None else "stomp.wss_port",
            transport=transport,
        )
        bound: list[Listener] = await nursery.start(tcp)
        task_status.started([Listener(PROTOCOL, transport, b.host, b.port) for b in bound])


async def _serve_request(
    broker: Broker,
    config: StompConfig,
    request: trio_websocket.WebSocketRequest,
    stream: trio.abc.Stream,
) -> None:
    if request.path.partition("?")[0] != config.ws_path:
        await request.reject(404, body=b"no STOMP endpoint here\n")
        return
    offered = request.proposed_subprotocols
    chosen = next((p for p in SUBPROTOCOLS if p in offered), None)
    ws = await request.accept(subprotocol=chosen)
    await run_connection(
        broker, config, WebSocketTransport(ws), peer_name(stream), peer_host(stream), stream
    )


async def run_connection(
    broker: Broker,
    config: StompConfig,
    transport: Transport,
    peer: str,
    peer_host: str | None,
    stream: trio.abc.Stream | None = None,
) -> None:
    """Serve one client connection from accept to close; `stream` is the accepted one (TLS
    for stomps and wss: its client certificate may log in, core/cert_login.py)."""
    connection = broker.connections.open(PROTOCOL, peer)
    connection.tls = TLSPeer.of(stream)
    session = Session(broker, config, connection, peer_host)
    connection.closer = session.close_from_broker
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_read, session, transport)
            nursery.start_soon(_handshake_deadline, session, config.handshake_timeout)
            nursery.start_soon(_heartbeats, session)
            nursery.start_soon(session.run_receipts)
            await _write(session, transport)
            nursery.cancel_scope.cancel()
    finally:
        session.teardown()
        broker.connections.close(connection, session.close_reason)
    await transport.linger(config.close_timeout)


async def _read(session: Session, transport: Transport) -> None:
    alarms = session.broker.alarms
    while not session.done:
        if session.reading_paused:
            await alarms.wait_publish_allowed()
            continue
        data = await transport.receive()
        if not data:
            session.finish("client closed the connection")
            return
        await session.receive(data)


async def _write(session: Session, transport: Transport) -> None:
    while True:
        await session.wait_output()
        data = session.data_to_send()
        if data:
            try:
                await transport.send(data)
            except _LOST:
                session.finish("connection lost while writing")
                return
            session.written()
        if session.done:
            rest = session.data_to_send()
            if rest:  # a last ERROR or RECEIPT; the client may be gone already
                with trio.move_on_after(session.config.close_timeout), contextlib.suppress(*_LOST):
                    await transport.send(rest)
            return


async def _handshake_deadline(session: Session, timeout: float) -> None:
    with trio.move_on_after(timeout):
        await session.wait_opened()
        return
    session.abort(f"no CONNECT frame within the handshake timeout ({timeout:g}s)")


async def _heartbeats(session: Session) -> None:
    await session.wait_opened()
    while not session.done:
        deadline = session.heartbeat_deadline()
        if deadline == float("inf"):
            return
        await trio.sleep_until(deadline)
        session.heartbeat_tick(trio.current_time())
