"""The client addresses a node publishes (node key, name-server registrations).

They come from `broker.listeners`, as bound. A listener bound to a wildcard address
(`0.0.0.0`, `::`) is published with the node's advertised host instead, since nobody can dial
a wildcard: `cluster.advertise`'s host, else `cluster.listen`'s, else, when that is a
wildcard too, the host's first non-loopback IPv4 address (from the interface list: nothing
is dialled or resolved to find it).

Keys are the URL schemes `herald.cluster.resolve` builds URLs with: `amqp`, `mqtt`, `stomp`
for plain TCP, `amqps`, `mqtts`, `stomps` over TLS, and `management` for the management
API's plain HTTP listener. The first listener of each kind wins.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import psutil

from herald.cluster.config import WILDCARD_HOSTS, ClusterConfig, join_address, split_address

if TYPE_CHECKING:
    from herald.core.plugin_types import Listener

KINDS: Mapping[tuple[str, str], str] = {
    ("amqp", "tcp"): "amqp",
    ("amqp", "tls"): "amqps",
    ("mqtt", "tcp"): "mqtt",
    ("mqtt", "tls"): "mqtts",
    ("stomp", "tcp"): "stomp",
    ("stomp", "tls"): "stomps",
    ("management", "http"): "management",
}
"""(listener protocol, transport) -> the key it is published under."""

LOOPBACK = "127.0.0.1"


def host_address() -> str:
    """The host's first non-loopback IPv4 address, or 127.0.0.1 when it has none."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return str(address.address)
    return LOOPBACK


def advertised_host(config: ClusterConfig) -> str:
    """The host the node tells others to dial (see the module's docstring)."""
    for text in (config.advertise, config.listen):
        found = split_address(text) if text else None
        if found is not None and found[0] not in WILDCARD_HOSTS:
            return found[0]
    return host_address()


def client_addresses(listeners: Iterable[Listener], host: str) -> dict[str, str]:
    """`{"amqp": "10.0.0.2:5672", ...}` from bound listeners; wildcard binds become `host`."""
    out: dict[str, str] = {}
    for listener in listeners:
        kind = KINDS.get((listener.protocol, listener.transport))
        if kind is None or kind in out:
            continue
        bound = listener.host if listener.host not in WILDCARD_HOSTS else host
        out[kind] = join_address(bound, listener.port)
    return out
