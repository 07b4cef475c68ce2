"""herald's STOMP 1.0 / 1.1 / 1.2 protocol plugin: the hooks herald calls.

Registered through the `herald` entry-point group as `stomp = "herald.plugins.stomp.plugin"`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from herald.core import hookimpl
from herald.core.message import MessageCodec
from herald.core.plugin_types import ConfigSection, ManagementRoute, PluginInfo, ProtocolSpec
from herald.plugins.stomp.config import StompConfig
from herald.plugins.stomp.message_codec import PROTOCOL, StompMessageCodec
from herald.plugins.stomp.server import serve

if TYPE_CHECKING:
    from herald.core.broker import Broker

_GREETINGS = (b"CONNECT", b"STOMP")


def sniff(prefix: bytes) -> bool | None:
    """True for a connection that starts with CONNECT or STOMP; None while it still may."""
    for greeting in _GREETINGS:
        if prefix.startswith(greeting):
            return True
    if any(greeting.startswith(prefix) for greeting in _GREETINGS):
        return None
    return False


@hookimpl
def herald_plugin_info() -> PluginInfo:
    return PluginInfo("stomp", "STOMP 1.0 / 1.1 / 1.2 over TCP and WebSocket", "")


@hookimpl
def herald_config_sections() -> list[ConfigSection]:
    return [ConfigSection("stomp", StompConfig)]


@hookimpl
def herald_protocols() -> list[ProtocolSpec]:
    return [
        ProtocolSpec(
            name=PROTOCOL,
            description="STOMP 1.0, 1.1 and 1.2, as RabbitMQ's STOMP plugin maps them",
            serve=serve,
            sniff=sniff,
            sniff_bytes=max(map(len, _GREETINGS)),
        )
    ]


@hookimpl
def herald_message_codecs() -> list[MessageCodec]:
    return [StompMessageCodec()]


def _subscriptions(broker: Broker, request: Any) -> list[dict[str, Any]]:
    """Every STOMP subscription, with the connection it belongs to."""
    found = []
    for connection in broker.connections:
        if connection.protocol == PROTOCOL and connection.channels is not None:
            for subscription in connection.channels():
                found.append({"connection": connection.id, "user": connection.user, **subscription})
    return found


@hookimpl
def herald_management_routes() -> list[ManagementRoute]:
    return [
        ManagementRoute(
            "GET", "/api/stomp/subscriptions", _subscriptions, "Every STOMP subscription"
        )
    ]
