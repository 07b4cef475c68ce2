"""STOMP's listeners: TCP, TLS (stomps), WebSocket and WSS (RabbitMQ's Web-STOMP), each
connection a `Session` served by the one adapter every protocol shares (core/adapter.py: one
reader task per idle connection, a writer only while there is output, the handshake deadline
and heart-beats in the kernel's timer heap, a bounded close and a linger after it).

What is STOMP's here: the `[stomp]` keys of the listeners, the WebSocket path and the
subprotocols picked from what the client offers (v12.stomp, v11.stomp, v10.stomp, stomp; none
if it offers none), text messages accepted and a write sent as text when it is UTF-8 (as
browsers' STOMP clients expect), and a WebSocket message limit of twice the largest frame (a
frame may straddle two messages).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from herald.core.adapter import ConnectionServer
from herald.core.serving import serve_protocol, standard_listeners
from herald.core.websocket import WebSocketOptions
from herald.plugins.stomp.config import StompConfig
from herald.plugins.stomp.session import Session

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.core.connections import Connection
    from herald.core.plugin_types import Listener

PROTOCOL = "stomp"
SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp", "stomp")


async def serve(
    broker: Broker,
    config: StompConfig | None,
    *,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The `ProtocolSpec.serve` of STOMP: TCP and (if enabled) WebSocket listeners, and TLS
    beside each when the broker has a certificate."""
    config = config if config is not None else StompConfig()
    tls = broker.tls_context
    await serve_protocol(
        connection_server(broker, config),
        standard_listeners(PROTOCOL, config, tls=tls is not None, websocket=config.ws_enabled),
        tls=tls,
        websocket=websocket_options(config),
        task_status=task_status,
    )


def connection_server(broker: Broker, config: StompConfig) -> ConnectionServer:
    """The adapter serving STOMP connections, each a `Session`."""
    limits = config.limits  # one for every connection's codec

    def new_session(connection: Connection, peer_host: str | None) -> Session:
        return Session(broker, config, connection, peer_host, limits)

    return ConnectionServer(broker, PROTOCOL, new_session, close_timeout=config.close_timeout)


def websocket_options(config: StompConfig) -> WebSocketOptions:
    """STOMP over WebSocket as RabbitMQ's Web-STOMP serves it."""
    return WebSocketOptions(
        path=config.ws_path,
        subprotocols=SUBPROTOCOLS,
        max_message_size=2 * config.max_frame_size,
        handshake_timeout=config.handshake_timeout,
        text=True,
    )
