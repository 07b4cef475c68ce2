"""A protocol over WebSocket (RabbitMQ's Web-MQTT and Web-STOMP): the handshake on one path,
then the same session and adapter as over TCP, through a `WebSocketTransport`.

Connections run on `serve_tcp`, over TCP streams herald owns, so each stream is closed when
its handler returns: trio-websocket's own server would wait forever for a client that never
answers the server's Close.
"""

from __future__ import annotations

import logging
import ssl
from functools import partial

import attrs
import trio
from trio_websocket import ConnectionClosed, WebSocketRequest, wrap_server_stream

from herald.core.adapter import ConnectionServer
from herald.core.listeners import serve_tcp
from herald.core.plugin_types import Listener
from herald.core.transports import WebSocketTransport

log = logging.getLogger(__name__)


@attrs.frozen
class WebSocketOptions:
    """How a protocol is served over WebSocket."""

    path: str
    """The one path upgraded; others get 404."""
    subprotocols: tuple[str, ...]
    """Offered subprotocols the server picks from, best first (none if the client offers none)."""
    max_message_size: int
    handshake_timeout: float
    text: bool
    """Text messages carry the protocol (STOMP), or end the connection (MQTT)."""


async def serve_websocket(
    server: ConnectionServer,
    options: WebSocketOptions,
    host: str,
    port: int,
    *,
    setting: str,
    ssl_context: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `server`'s protocol over WebSocket on (host, port), over TLS with a context."""
    protocol = server.protocol
    transport = "ws" if ssl_context is None else "wss"

    async def handle(stream: trio.abc.Stream) -> None:
        async with trio.open_nursery() as nursery:  # runs trio-websocket's reader task
            accepted = False
            try:
                request = None
                with trio.move_on_after(options.handshake_timeout):
                    request = await wrap_server_stream(
                        nursery, stream, max_message_size=options.max_message_size
                    )
                if request is not None:
                    accepted = await _serve_request(server, options, request, stream)
            except ConnectionClosed:
                log.debug("%s WebSocket client went away during the handshake", protocol)
            finally:
                if accepted:
                    # Not at once: trio-websocket's reader may still be sending a Close of its
                    # own (1009 for a message too big), then waits for the client's. It ends
                    # when the closing handshake closes the stream (at once after a normal
                    # close), or is cut off after `close_timeout`, as `aclose` would be.
                    nursery.cancel_scope.deadline = trio.current_time() + server.close_timeout
                else:  # no handshake, or a 404: the reader has nothing left to send
                    nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        tcp = partial(
            serve_tcp,
            handle,
            host,
            port,
            protocol=protocol,
            ssl_context=ssl_context,
            setting=setting,
            transport=transport,
        )
        bound: list[Listener] = await nursery.start(tcp)
        task_status.started([Listener(protocol, transport, b.host, b.port) for b in bound])


async def _serve_request(
    server: ConnectionServer,
    options: WebSocketOptions,
    request: WebSocketRequest,
    stream: trio.abc.Stream,
) -> bool:
    """Serve one WebSocket request; False if it was rejected (a path that is not ours)."""
    if request.path.partition("?")[0] != options.path:
        await request.reject(404, body=f"not a {server.protocol} endpoint\n".encode())
        return False
    offered = request.proposed_subprotocols
    subprotocol = next((p for p in options.subprotocols if p in offered), None)
    websocket = await request.accept(subprotocol=subprotocol)
    try:
        await server.run_connection(stream, WebSocketTransport(websocket, text=options.text))
    finally:
        with trio.move_on_after(server.close_timeout):
            await websocket.aclose()
    return True
