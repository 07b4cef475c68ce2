"""`RouteRegistry`: what a name server knows, RocketMQ's `RouteInfoManager` in herald's terms.

Nodes register every `register_interval_s` with their group, role, epoch, client addresses
and commit-log offset, and masters add their queue table. The registry answers routes
(vhost + queue -> the groups holding it, each with its master's address and its slaves) and
forgets nodes that fell silent. It is pure: no I/O, no clock; the server passes `now`
(monotonic seconds), so tests drive time by hand.

Rules (CLUSTER.md §4.2, from RocketMQ):
- queue tables come from masters only, and are replaced only when the registering master's
  `(node, epoch, data_version)` differs from the one that sent the current table;
- a master heartbeat (`queues` None) whose table the registry lacks gets `need_full`, so the
  node sends its queues next time (a restarted name server fills up within one period);
- several nodes may claim master for a while (a paused old master): the highest epoch wins;
- a node silent for more than `expiry_s` is dropped, and a group left without nodes with it;
- a node's `offset` is a snapshot, kept as of its last registration (None: the node did not
  send one); it does not move `version`, like `last_seen`, since a busy node changes it at
  every registration.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

EXPIRY_S = 120.0  # RocketMQ: a broker silent for 120 s is dropped
SCAN_S = 10.0  # RocketMQ: scanned every 10 s


class Role(enum.Enum):
    MASTER = "master"
    SLAVE = "slave"


@attrs.frozen
class QueueInfo:
    vhost: str
    name: str
    type: str = "classic"
    durable: bool = True


@attrs.frozen
class Registration:
    """One `POST /v1/register`; `queues` None is a heartbeat (the table did not change).

    `offset` is the node's commit-log durable offset (`store.durable_ticket`) when it
    registered; None when it sent none (a node from before the field existed). `data_dir` is
    the node's data dir as an absolute path on its machine (None: not sent), for readers of
    its commit-log files (the Spark pipeline, docs/pipeline.md)."""

    cluster: str
    group: str
    node: str
    role: Role
    epoch: int
    data_version: int
    addrs: Mapping[str, str]  # protocol -> "host:port" (amqp, mqtt, stomp, management, ...)
    queues: tuple[QueueInfo, ...] | None = None
    offset: int | None = None
    data_dir: str | None = None


@attrs.frozen
class RegisterResult:
    need_full: bool  # send the whole queue table with the next registration


@attrs.define
class _Node:
    reg: Registration  # without its queues
    last_seen: float

    def shown(self) -> Registration:
        """What moves `version` when it changes: all but the offset snapshot."""
        return attrs.evolve(self.reg, offset=None)


@attrs.define
class _Group:
    name: str
    cluster: str
    nodes: dict[str, _Node] = attrs.Factory(dict)
    queues: dict[tuple[str, str], QueueInfo] = attrs.Factory(dict)
    queues_from: tuple[str, int, int] | None = None  # (node, epoch, data_version)

    def master(self) -> _Node | None:
        masters = [n for n in self.nodes.values() if n.reg.role is Role.MASTER]
        return max(masters, key=lambda n: (n.reg.epoch, n.last_seen), default=None)

    def epoch(self) -> int:
        master = self.master()
        if master is not None:
            return master.reg.epoch
        return max((n.reg.epoch for n in self.nodes.values()), default=0)


@attrs.frozen
class MasterRoute:
    node: str
    addr: str | None  # the address for the protocol asked; None when not asked or not served
    addrs: Mapping[str, str]


@attrs.frozen
class GroupRoute:
    group: str
    epoch: int
    master: MasterRoute | None  # None while the group has no live master
    slaves: tuple[str, ...]


@attrs.frozen
class Route:
    vhost: str
    queue: str
    type: str
    groups: tuple[GroupRoute, ...]


@attrs.frozen
class NodeView:
    node: str
    role: Role
    epoch: int
    data_version: int
    addrs: Mapping[str, str]
    last_seen_ms_ago: int
    offset: int | None = None  # as of the last registration (None: the node sent none)
    data_dir: str | None = None  # the node's data dir on its machine (None: not sent)


@attrs.frozen
class GroupView:
    cluster: str
    group: str
    epoch: int
    master: str | None
    queues: int
    nodes: tuple[NodeView, ...]


class RouteRegistry:
    """Groups, nodes and queue tables of every cluster that registers here. `version` goes
    up at every change a route or the cluster view can show, but for the snapshots that
    change at every registration (`last_seen_ms_ago`, `offset`)."""

    def __init__(self, expiry_s: float = EXPIRY_S) -> None:
        self.expiry_s = expiry_s
        self.version = 0
        self._groups: dict[str, _Group] = {}
        self._group_of: dict[str, str] = {}  # node -> group

    def register(self, reg: Registration, now: float) -> RegisterResult:
        old = self._group_of.get(reg.node)
        if old is not None and old != reg.group:
            self._remove(reg.node)
        group = self._groups.get(reg.group)
        if group is None:
            group = self._groups[reg.group] = _Group(reg.group, reg.cluster)
        node = group.nodes.get(reg.node)
        fresh = _Node(attrs.evolve(reg, queues=None), now)
        if node is None or node.shown() != fresh.shown():
            self.version += 1
        group.cluster = reg.cluster
        group.nodes[reg.node] = fresh
        self._group_of[reg.node] = reg.group
        if reg.role is not Role.MASTER or group.master() is not group.nodes[reg.node]:
            return RegisterResult(need_full=False)  # only the winning master's table counts
        source = (reg.node, reg.epoch, reg.data_version)
        if reg.queues is None:
            return RegisterResult(need_full=group.queues_from != source)
        if group.queues_from != source:
            group.queues = {(q.vhost, q.name): q for q in reg.queues}
            group.queues_from = source
            self.version += 1
        return RegisterResult(need_full=False)

    def unregister(self, node: str) -> bool:
        """A clean shutdown; False if the node was not registered."""
        return self._remove(node)

    def expire(self, now: float) -> tuple[str, ...]:
        """Drop every node silent for more than `expiry_s`; returns their names."""
        silent = [
            name
            for group in self._groups.values()
            for name, node in group.nodes.items()
            if now - node.last_seen > self.expiry_s
        ]
        for name in silent:
            self._remove(name)
        return tuple(silent)

    def _remove(self, node: str) -> bool:
        name = self._group_of.pop(node, None)
        if name is None:
            return False
        group = self._groups[name]
        del group.nodes[node]
        if not group.nodes:
            del self._groups[name]
        self.version += 1
        return True

    def route(self, vhost: str, queue: str, protocol: str | None = None) -> Route | None:
        """The groups holding `queue` in `vhost` (by group name), or None: no route."""
        found: list[GroupRoute] = []
        kind = ""
        for name in sorted(self._groups):
            group = self._groups[name]
            info = group.queues.get((vhost, queue))
            if info is None:
                continue
            kind = kind or info.type
            master = group.master()
            master_route = None
            if master is not None:
                addrs = master.reg.addrs
                addr = addrs.get(protocol) if protocol else None
                master_route = MasterRoute(master.reg.node, addr, addrs)
            slaves = tuple(
                sorted(n for n, node in group.nodes.items() if node.reg.role is Role.SLAVE)
            )
            found.append(GroupRoute(name, group.epoch(), master_route, slaves))
        return Route(vhost, queue, kind, tuple(found)) if found else None

    def groups(self, now: float) -> tuple[GroupView, ...]:
        """Every group and node, for `/v1/cluster` and `herald cluster status`."""
        views = []
        for name in sorted(self._groups):
            group = self._groups[name]
            master = group.master()
            nodes = tuple(
                NodeView(
                    n.reg.node,
                    n.reg.role,
                    n.reg.epoch,
                    n.reg.data_version,
                    n.reg.addrs,
                    max(0, round((now - n.last_seen) * 1000)),
                    n.reg.offset,
                    n.reg.data_dir,
                )
                for n in sorted(group.nodes.values(), key=lambda n: n.reg.node)
            )
            views.append(
                GroupView(
                    group.cluster,
                    name,
                    group.epoch(),
                    master.reg.node if master else None,
                    len(group.queues),
                    nodes,
                )
            )
        return tuple(views)
