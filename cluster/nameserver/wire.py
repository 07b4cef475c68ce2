"""The name server's JSON (CLUSTER.md §4.2): requests checked field by field into registry
types, registry answers rendered back. Kept apart from the registry so the rules there stay
free of wire concerns, and apart from the server so the client can build the same payloads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from herald.cluster.nameserver.registry import (
    GroupView,
    QueueInfo,
    Registration,
    Role,
    Route,
)

MAX_NAME = 255
MAX_PATH = 4096  # PATH_MAX on Linux


class BadRequest(ValueError):
    """A request field is missing or wrong; `field` names it (dotted path, e.g.
    `queues[2].name`), and the server answers 400 with both."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _str(data: Mapping[str, Any], key: str, path: str = "", *, default: str | None = None) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise BadRequest(path + key, f"a non-empty string of at most {MAX_NAME} characters")
    return value


def _int(data: Mapping[str, Any], key: str, *, default: int | None = None) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise BadRequest(key, "a non-negative integer")
    return value


def _offset(data: Mapping[str, Any]) -> int | None:
    """`offset`: optional (a node from before it existed sends none: None), else an integer
    as `epoch`; null is taken as absent."""
    if data.get("offset") is None:
        return None
    return _int(data, "offset")


def _data_dir(data: Mapping[str, Any]) -> str | None:
    """`data_dir`: optional (None when absent or null), else an absolute path."""
    value = data.get("data_dir")
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/") or len(value) > MAX_PATH:
        raise BadRequest("data_dir", f"an absolute path of at most {MAX_PATH} characters")
    return value


def _addr(value: Any, field: str) -> str:
    """`host:port` (`[v6]:port` for IPv6) with a port in 1-65535."""
    if isinstance(value, str) and len(value) <= MAX_NAME:
        host, sep, port = value.rpartition(":")
        if sep and host and port.isdigit() and 0 < int(port) < 65536:
            return value
    raise BadRequest(field, "an address host:port")


def _queues(value: Any) -> tuple[QueueInfo, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise BadRequest("queues", "a list of queues, or null for a heartbeat")
    out = []
    for i, item in enumerate(value):
        path = f"queues[{i}]."
        if not isinstance(item, Mapping):
            raise BadRequest(f"queues[{i}]", "an object")
        durable = item.get("durable", True)
        if not isinstance(durable, bool):
            raise BadRequest(path + "durable", "true or false")
        out.append(
            QueueInfo(
                _str(item, "vhost", path),
                _str(item, "name", path),
                _str(item, "type", path, default="classic"),
                durable,
            )
        )
    return tuple(out)


def parse_registration(data: Any) -> Registration:
    """A `/v1/register` body; raises `BadRequest` naming the first wrong field."""
    if not isinstance(data, Mapping):
        raise BadRequest("body", "a JSON object")
    role = data.get("role")
    if role not in ("master", "slave"):
        raise BadRequest("role", '"master" or "slave"')
    addrs = data.get("addrs", {})
    if not isinstance(addrs, Mapping):
        raise BadRequest("addrs", "an object of protocol: host:port")
    checked = {}
    for protocol, addr in addrs.items():
        if not protocol or len(protocol) > MAX_NAME:
            raise BadRequest("addrs", "protocol names of 1-255 characters")
        checked[protocol] = _addr(addr, f"addrs.{protocol}")
    return Registration(
        cluster=_str(data, "cluster"),
        group=_str(data, "group"),
        node=_str(data, "node"),
        role=Role(role),
        epoch=_int(data, "epoch", default=0),
        data_version=_int(data, "data_version", default=0),
        addrs=checked,
        queues=_queues(data.get("queues")),
        offset=_offset(data),
        data_dir=_data_dir(data),
    )


def parse_unregister(data: Any) -> str:
    if not isinstance(data, Mapping):
        raise BadRequest("body", "a JSON object")
    return _str(data, "node")


def registration_json(reg: Registration) -> dict[str, Any]:
    """The body a node sends (the inverse of `parse_registration`)."""
    queues = None
    if reg.queues is not None:
        queues = [
            {"vhost": q.vhost, "name": q.name, "type": q.type, "durable": q.durable}
            for q in reg.queues
        ]
    return {
        "cluster": reg.cluster,
        "group": reg.group,
        "node": reg.node,
        "role": reg.role.value,
        "epoch": reg.epoch,
        "data_version": reg.data_version,
        "addrs": dict(reg.addrs),
        "queues": queues,
        "offset": reg.offset,
        "data_dir": reg.data_dir,
    }


def route_json(route: Route) -> dict[str, Any]:
    groups = []
    for g in route.groups:
        master = None
        if g.master is not None:
            master = {"node": g.master.node, "addr": g.master.addr, "addrs": dict(g.master.addrs)}
        groups.append(
            {"group": g.group, "epoch": g.epoch, "master": master, "slaves": list(g.slaves)}
        )
    return {"vhost": route.vhost, "queue": route.queue, "type": route.type, "groups": groups}


def cluster_json(version: int, groups: tuple[GroupView, ...]) -> dict[str, Any]:
    return {
        "version": version,
        "groups": [
            {
                "cluster": g.cluster,
                "group": g.group,
                "epoch": g.epoch,
                "master": g.master,
                "queues": g.queues,
                "nodes": [
                    {
                        "node": n.node,
                        "role": n.role.value,
                        "epoch": n.epoch,
                        "data_version": n.data_version,
                        "addrs": dict(n.addrs),
                        "last_seen_ms_ago": n.last_seen_ms_ago,
                        "offset": n.offset,
                        "data_dir": n.data_dir,
                    }
                    for n in g.nodes
                ],
            }
            for g in groups
        ],
    }
