"""What a protocol plugin's `serve` calls: its listeners, declared, served by the one adapter.

A plugin says where it listens (`ListenerSpec`s, usually `standard_listeners` from its config
section) and how a session is made (a `ConnectionServer`); `serve_protocol` binds them all,
reports the bound addresses, and serves until cancelled. TCP and TLS run on `serve_tcp`,
WebSocket and WSS on core/websocket.py, each connection on `ConnectionServer`.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from functools import partial
from typing import Any

import attrs
import trio

from herald.core.adapter import ConnectionServer
from herald.core.listeners import serve_tcp
from herald.core.plugin_types import Listener
from herald.core.websocket import WebSocketOptions, serve_websocket


@attrs.frozen
class ListenerSpec:
    """One address a protocol listens on, and the config key that moves it."""

    transport: str  # "tcp", "tls", "ws" or "wss"
    host: str
    port: int
    setting: str


def standard_listeners(
    section: str, config: Any, *, tls: bool, websocket: bool = False
) -> list[ListenerSpec]:
    """The listeners of a config section with herald's usual keys: `host`/`port`, `tls_port`
    (when the broker has TLS), and with `websocket` also `ws_host`/`ws_port`/`wss_port`."""
    specs = [ListenerSpec("tcp", config.host, config.port, f"{section}.port")]
    if tls:
        specs.append(ListenerSpec("tls", config.host, config.tls_port, f"{section}.tls_port"))
    if websocket:
        specs.append(ListenerSpec("ws", config.ws_host, config.ws_port, f"{section}.ws_port"))
        if tls:
            wss = ListenerSpec("wss", config.ws_host, config.wss_port, f"{section}.wss_port")
            specs.append(wss)
    return specs


async def serve_protocol(
    server: ConnectionServer,
    listeners: Sequence[ListenerSpec],
    *,
    tls: ssl.SSLContext | None = None,
    websocket: WebSocketOptions | None = None,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Bind every listener, report them through `task_status`, serve until cancelled."""
    broker = server.broker
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        broker.protocol_servers[server.protocol] = server  # for the any-protocol port
        bound: list[Listener] = []
        for spec in listeners:
            context = tls if spec.transport in ("tls", "wss") else None
            if spec.transport in ("tcp", "tls"):
                start: Any = partial(
                    serve_tcp,
                    server.run_connection,
                    spec.host,
                    spec.port,
                    protocol=server.protocol,
                    ssl_context=context,
                    setting=spec.setting,
                )
            else:
                if websocket is None:
                    raise ValueError(
                        f"{server.protocol}: a {spec.transport} listener needs options"
                    )
                start = partial(
                    serve_websocket,
                    server,
                    websocket,
                    spec.host,
                    spec.port,
                    setting=spec.setting,
                    ssl_context=context,
                )
            bound.extend(await nursery.start(start))
        task_status.started(bound)
        try:
            await trio.sleep_forever()
        finally:
            broker.protocol_servers.pop(server.protocol, None)
