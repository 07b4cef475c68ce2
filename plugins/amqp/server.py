"""AMQP's listeners: TCP, and TLS (amqps) when the broker has a certificate, each connection a
`Session` served by the one adapter every protocol shares (core/adapter.py: one reader task
per idle connection, a writer only while there is output, the handshake, heartbeat and
close-ok deadlines in the kernel's timer heap, connection.blocked from the registry's one
alarm watcher).

What is AMQP's here: the `[amqp]` keys of the listeners, `close_timeout` (how long a closing
connection has to finish) and `close_linger`: once the session ended with a goodbye (close-ok
sent or received, or a connection.close after a frame that did not parse), the socket lingers
before it is closed, write side shut, input read and dropped until the client closes or
`close_linger` passes. A client still sending (publishes buffered behind its connection.close)
is then not answered with a reset that makes its writes fail and can destroy the close-ok
before it is read.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import trio

from herald.core.adapter import ConnectionServer
from herald.core.serving import serve_protocol, standard_listeners
from herald.plugins.amqp.config import AMQPConfig
from herald.plugins.amqp.message_codec import PROTOCOL
from herald.plugins.amqp.session import Session

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.core.plugin_types import Listener


def connection_server(broker: Broker, config: AMQPConfig) -> ConnectionServer:
    """AMQP's connections, served by the shared adapter (also what tests run in memory)."""
    return ConnectionServer(
        broker,
        PROTOCOL,
        partial(Session, broker, config),
        close_timeout=config.close_timeout,
        linger_timeout=config.close_linger,
    )


async def serve(
    broker: Broker,
    config: AMQPConfig | None,
    *,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The `ProtocolSpec.serve` of AMQP: `[amqp] host:port`, and `tls_port` beside it when
    the broker has TLS; serves until cancelled."""
    config = config if config is not None else AMQPConfig()
    server = connection_server(broker, config)
    tls = broker.tls_context
    listeners = standard_listeners("amqp", config, tls=tls is not None)
    await serve_protocol(server, listeners, tls=tls, task_status=task_status)
