"""The `[cluster]` config section (CLUSTER.md §9).

Every key of the design is accepted now, with its default, so a config written for a later
stage (replication, shared queues) loads today; this stage reads `enabled`, `name`, `group`,
`etcd`, `lease_ttl_s`, `lease_guard_s`, `nameservers`, `register_interval_s`, `listen` and
`advertise` (`secret` is kept for the cluster port of the HA issue). `enabled` is false by
default: a broker without `[cluster]` is a standalone broker, and the cluster plugin adds
nothing to it.

The rules that involve other sections (the commit-log store, a node name of its own) are
checked by the plugin's `herald_configure` (plugin.py), since a section sees only itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs

from herald.core.errors import InvalidValue, show_value
from herald.core.validators import at_least, positive

SECTION = "cluster"

DEFAULT_ETCD = "http://127.0.0.1:2379"  # Debian's etcd-server listens there
DEFAULT_LISTEN = "0.0.0.0:25680"
REPLICATION = ("sync", "async")
SLAVE_ACK = ("flushed", "written")
MAX_NAME = 255  # as the name server's wire (nameserver/wire.py)
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})


def split_address(text: str) -> tuple[str, int] | None:
    """`host:port` (or `[v6]:port`) as (host, port), None when it is not one. The host of
    `[::1]:80` comes back without its brackets."""
    host, sep, port = text.strip().rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        return None  # a bare IPv6 address needs brackets to carry a port
    return (host, int(port)) if host and " " not in host else None


def join_address(host: str, port: int) -> str:
    """The inverse of `split_address`: IPv6 hosts in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _name(_inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not value or len(value) > MAX_NAME:
        raise InvalidValue(
            f"expected a name of 1-{MAX_NAME} characters, got {show_value(value)}", attribute.name
        )


def _group(inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value:  # "": the node's own name
        _name(inst, attribute, value)


def _address(_inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if split_address(value) is None:
        raise InvalidValue(f"expected host:port, got {show_value(value)}", attribute.name)


def _optional_address(inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value:  # "": derived from `listen` (see addresses.advertised_host)
        _address(inst, attribute, value)


def _addresses(_inst: object, attribute: attrs.Attribute[Any], value: Sequence[str]) -> None:
    for index, item in enumerate(value):
        text = item.removeprefix("http://")
        if split_address(text) is None or "/" in text:
            raise InvalidValue(
                f"[{index}]: expected host:port, got {show_value(item)}", attribute.name
            )


def _endpoints(_inst: object, attribute: attrs.Attribute[Any], value: Sequence[str]) -> None:
    if not value:
        raise InvalidValue(
            f"expected at least one endpoint, e.g. [{DEFAULT_ETCD!r}]", attribute.name
        )
    for index, item in enumerate(value):
        scheme, sep, rest = item.partition("://")
        if not sep:
            scheme, rest = "http", item
        if scheme not in ("http", "https") or split_address(rest.rstrip("/")) is None:
            raise InvalidValue(
                f"[{index}]: expected http://host:port, got {show_value(item)}", attribute.name
            )


def _one_of(choices: Sequence[str]) -> Any:
    def check(_inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
        if value not in choices:
            expected = " or ".join(repr(c) for c in choices)
            raise InvalidValue(f"expected {expected}, got {show_value(value)}", attribute.name)

    return check


def _lease_guard(inst: ClusterConfig, attribute: attrs.Attribute[Any], value: float) -> None:
    """(0, TTL/2]: the guard must end a lease's validity before etcd can expire it, and leave
    room for a keepalive every TTL/3 to renew it before the guard runs out."""
    limit = inst.lease_ttl_s / 2
    if not (math.isfinite(value) and 0 < value <= limit):
        raise InvalidValue(
            f"expected more than 0 and at most lease_ttl_s / 2 = {limit:g}, "
            f"got {show_value(value)}",
            attribute.name,
        )


@attrs.frozen
class ClusterConfig:
    """`[cluster]`: which cluster this node joins, and how it keeps its membership."""

    enabled: bool = False
    """Join the cluster; false (the default): a standalone broker."""
    name: str = attrs.field(default="herald", validator=_name)
    """The cluster's name; its etcd keys live under `/herald/<name>/`."""
    group: str = attrs.field(default="", validator=_group)
    """The broker group (one master and its slaves); "" = the node's `broker.node_name`."""
    etcd: tuple[str, ...] = attrs.field(default=(DEFAULT_ETCD,), validator=_endpoints)
    """Client URLs of the etcd cluster (every member, for failover)."""
    lease_ttl_s: int = attrs.field(default=10, validator=at_least(2))
    """The node's etcd lease: etcd forgets a node silent this long (etcd's minimum is 2)."""
    lease_guard_s: float = attrs.field(default=1.0, validator=_lease_guard)
    """The node fences itself (the `cluster` alarm) this long before etcd could expire its
    lease: valid until the last renewal's send time + lease_ttl_s - lease_guard_s."""
    nameservers: tuple[str, ...] = attrs.field(default=(), validator=_addresses)
    """Name servers (`host:port`) the node registers with, every one of them."""
    register_interval_s: float = attrs.field(default=30.0, validator=positive)
    """Seconds between registrations (RocketMQ: 30 s)."""
    listen: str = attrs.field(default=DEFAULT_LISTEN, validator=_address)
    """The cluster port (HA stream and node link, a later issue)."""
    advertise: str = attrs.field(default="", validator=_optional_address)
    """`host:port` peers dial; its host also replaces a wildcard bind address in the client
    addresses the node publishes. "": `listen`, with the host's address for a wildcard."""
    secret: str = attrs.field(default="", repr=lambda _: "'********'")
    """Shared secret of the cluster port (checked in HELLO / LINK_HELLO, a later issue)."""
    # -- read by later stages (HA replication, shared queues); accepted and checked now --
    replication: str = attrs.field(default="async", validator=_one_of(REPLICATION))
    min_in_sync_replicas: int = attrs.field(default=2, validator=at_least(1))
    slave_ack: str = attrs.field(default="flushed", validator=_one_of(SLAVE_ACK))
    sync_timeout_ms: int = attrs.field(default=3000, validator=at_least(1))
    max_lag_ms: int = attrs.field(default=15000, validator=at_least(1))
    retain_max_bytes: int = attrs.field(default=4 * 1024**3, validator=at_least(0))
    slot_window: int = attrs.field(default=1000, validator=at_least(1))
    slot_timeout_ms: int = attrs.field(default=100, validator=at_least(1))
    slots_per_queue: int = attrs.field(default=2, validator=at_least(1))
    slot_locality_ms: int = attrs.field(default=0, validator=at_least(0))
    """0: a holder takes any free slot, its own group's first (WSO2's balance: a queue's
    messages spread over every node with consumers). N > 0: another group's slot only once it
    has waited N ms, so each origin's own consumers take its slots and messages rarely cross
    the node link (less CPU when every node publishes; less balance when one does)."""
    sweep_interval_s: float = attrs.field(default=60.0, validator=positive)
    """How often a master's orphan sweep looks for stored shared-queue messages no slot covers."""
    mark_recovered_redelivered: bool = True

    def group_of(self, node_name: str) -> str:
        """The node's group: `group`, or the node's own name when none is set."""
        return self.group or node_name

    @property
    def keepalive_interval_s(self) -> float:
        """A keepalive every TTL/3 (etcd's own clients renew at TTL/3 too)."""
        return self.lease_ttl_s / 3
