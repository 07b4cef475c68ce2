"""MQTT's listeners: TCP, TLS (mqtts), WebSocket and WSS, each connection a `Session` served
by the one adapter every protocol shares (core/adapter.py: one reader task per idle
connection, a writer only while there is output, the deadlines in the kernel's timer heap).

What is MQTT's here: the `[mqtt]` keys of the listeners, the WebSocket path and subprotocols
("mqtt", and "mqttv3.1" for MQTT 3.1 clients), binary messages only (a text message closes the
connection), and a WebSocket message limit of twice the largest packet (a packet may straddle
two messages).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from herald.core.adapter import ConnectionServer
from herald.core.serving import serve_protocol, standard_listeners
from herald.core.websocket import WebSocketOptions
from herald.plugins.mqtt.config import MQTTConfig
from herald.plugins.mqtt.context import MQTTContext
from herald.plugins.mqtt.session import Session

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.core.connections import Connection
    from herald.core.plugin_types import Listener

PROTOCOL = "mqtt"
SUBPROTOCOLS = ("mqtt", "mqttv3.1")


async def serve(
    broker: Broker,
    config: MQTTConfig | None,
    *,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The `ProtocolSpec.serve` of MQTT: TCP and (if enabled) WebSocket listeners, and TLS
    beside each when the broker has a certificate."""
    config = config if config is not None else MQTTConfig()
    context = MQTTContext(broker, config)
    context.start()
    tls = broker.tls_context
    await serve_protocol(
        connection_server(context),
        standard_listeners(PROTOCOL, config, tls=tls is not None, websocket=config.ws_enabled),
        tls=tls,
        websocket=websocket_options(config),
        task_status=task_status,
    )


def connection_server(context: MQTTContext) -> ConnectionServer:
    """The adapter serving MQTT connections, each a `Session` of `context`."""

    def new_session(connection: Connection, peer_host: str | None) -> Session:
        return Session(context, connection, peer_host)

    return ConnectionServer(
        context.broker, PROTOCOL, new_session, close_timeout=context.config.close_timeout
    )


def websocket_options(config: MQTTConfig) -> WebSocketOptions:
    """MQTT over WebSocket as RabbitMQ's Web MQTT serves it."""
    return WebSocketOptions(
        path=config.ws_path,
        subprotocols=SUBPROTOCOLS,
        max_message_size=2 * config.max_packet_size,
        handshake_timeout=config.handshake_timeout,
        text=False,
    )
