"""A plugin that adds management routes through `herald_management_routes`: the shape an
MQTT plugin would use to show its sessions (here: the broker's connections of one protocol)."""

from __future__ import annotations

from typing import Any

from herald.core import hookimpl
from herald.core.broker import Broker
from herald.core.errors import NotFound
from herald.core.plugin_types import ManagementRoute


def list_sessions(broker: Broker, request: Any) -> list[dict[str, Any]]:
    protocol = request.query.get("protocol", "amqp")
    return [
        {"client_id": str(c.id), "user": c.user, "protocol": c.protocol}
        for c in broker.connections
        if c.protocol == protocol
    ]


async def get_session(broker: Broker, request: Any) -> dict[str, Any]:
    client_id = request.path_params["client_id"]
    for connection in broker.connections:
        if str(connection.id) == client_id:
            return {"client_id": client_id, "peer": connection.peer}
    raise NotFound(f"no session '{client_id}'")


def kick_session(broker: Broker, request: Any) -> None:
    reason = (request.body or {}).get("reason", "kicked")
    for connection in broker.connections:
        if str(connection.id) == request.path_params["client_id"]:
            connection.close(reason)
            return
    raise NotFound(f"no session '{request.path_params['client_id']}'")


def echo_vhost(broker: Broker, request: Any) -> dict[str, Any]:
    return {"vhost": request.path_params["vhost"], "user": request.user.name}


class SessionsPlugin:
    @hookimpl
    def herald_management_routes(self) -> list[ManagementRoute]:
        return [
            ManagementRoute("GET", "/api/demo/sessions", list_sessions, "Demo sessions"),
            ManagementRoute("GET", "/api/demo/sessions/{client_id}", get_session, "One session"),
            ManagementRoute("POST", "/api/demo/sessions/{client_id}/kick", kick_session, "Kick"),
            ManagementRoute("GET", "/api/demo/vhost/{vhost}", echo_vhost, "Echo a vhost"),
            # refused: clashes with a built-in endpoint, or is outside /api/
            ManagementRoute("GET", "/api/overview", echo_vhost, "Clash"),
            ManagementRoute("GET", "/elsewhere", echo_vhost, "Outside /api/"),
        ]
