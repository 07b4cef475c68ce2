"""Where each group of a cluster is read from: `.option("cluster", ...)` resolved into one data
dir per group, on the driver.

A group's nodes hold byte-identical commit logs (CLUSTER.md §3), so its messages are read
once, from one node: a slave where one exists (RocketMQ's slaveReadEnable: the load stays off
the master), the most advanced one by the commit-log offset it last registered; else the
master. The cluster is described either by a `herald cluster dev`'s `cluster.json` (its nodes,
groups and data dirs; the live roles and offsets come from the name server it names, or from
the file when that name server does not answer: a stopped cluster's dirs read the same), or by
a name server's URL (`/v1/cluster`: groups, roles, offsets, and each node's registered data
dir). Data dirs are paths on the node's machine; `dataDir` (a template with `{node}` and
`{group}`) gives them as this machine mounts them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from herald.pipeline.log_view import DataDirError, store_root
from herald.pipeline.options import OptionError, _get, _names

log = logging.getLogger(__name__)

CLUSTER_FILE = "cluster.json"
READ_FROM = ("slave", "master")
TIMEOUT_S = 5.0
RANK = {"slave": 0, "master": 1}  # unknown roles (a node the name server lost) come last


class ClusterError(OptionError):
    """`.option("cluster", ...)` cannot be resolved; the message says what and where."""


@attrs.frozen
class ClusterOptions:
    """The cluster options of `format("herald")`: what to read and from which nodes."""

    spec: str  # a cluster.json, the dir holding one, or a name server's http(s):// URL
    groups: frozenset[str] = frozenset()  # only these groups (empty: every group)
    data_dir: str | None = None  # a template with {node} and {group}, overriding data dirs
    read_from: str = "slave"  # slave: a slave where one exists; master: the master

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ClusterOptions | None:
        spec = _get(options, "cluster")
        if spec is None:
            return None
        if not spec.strip():
            raise ClusterError("option cluster: expected a cluster.json or a name server URL")
        read_from = (_get(options, "readFrom") or "slave").strip().lower()
        if read_from not in READ_FROM:
            raise ClusterError(f"option readFrom: expected slave or master, not {read_from!r}")
        return cls(spec.strip(), _names(options, "groups"), _get(options, "dataDir"), read_from)

    @property
    def is_url(self) -> bool:
        return self.spec.startswith(("http://", "https://"))


@attrs.frozen
class NodeDir:
    """One node of a group as the reader sees it."""

    node: str
    group: str
    role: str  # master, slave, or unknown (listed in cluster.json, not by the name server)
    data_dir: Path | None  # None: nobody said where it is
    offset: int | None = None  # the commit-log offset it last registered

    def describe(self) -> str:
        return f"{self.node} ({self.role}, {self.data_dir})"


@attrs.frozen
class Layout:
    """A cluster's nodes by group, and where they came from (`origin`)."""

    origin: str
    nodes: tuple[NodeDir, ...]

    def groups(self) -> tuple[str, ...]:
        return tuple(sorted({n.group for n in self.nodes}))

    def candidates(self, group: str, read_from: str = "slave") -> list[NodeDir]:
        """The group's nodes in the order they are tried: slaves by offset (the most
        advanced first), then the master; with `read_from="master"`, the master first."""
        rank = dict(RANK) if read_from == "slave" else {"master": 0, "slave": 1}
        return sorted(
            (n for n in self.nodes if n.group == group),
            key=lambda n: (rank.get(n.role, 2), -(n.offset or 0), n.node),
        )


def _node_entries(view: Mapping[str, Any], cluster: str | None = None) -> Iterable[NodeDir]:
    """The nodes of a name server's `/v1/cluster` (of `cluster` only, when given)."""
    for group in view.get("groups", []):
        if cluster is not None and group.get("cluster") != cluster:
            continue
        for node in group.get("nodes", []):
            data_dir = node.get("data_dir")
            offset = node.get("offset")
            yield NodeDir(
                str(node["node"]),
                str(group["group"]),
                str(node.get("role", "unknown")),
                Path(data_dir) if isinstance(data_dir, str) and data_dir else None,
                offset if isinstance(offset, int) else None,
            )


def fetch_view(url: str, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """A name server's `/v1/cluster`; ClusterError when it does not answer with one."""
    import httpx  # only on the driver: executors never resolve a cluster

    base = url.strip().rstrip("/")
    base = base if "://" in base else f"http://{base}"
    try:
        response = httpx.get(f"{base}/v1/cluster", timeout=timeout)
        response.raise_for_status()
        view = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ClusterError(
            f"option cluster: no answer from the name server at {base}: {exc}"
        ) from None
    if not isinstance(view, dict) or not isinstance(view.get("groups"), list):
        raise ClusterError(f"option cluster: {base}/v1/cluster is not a herald name server's")
    return view


def read_cluster_file(spec: str) -> tuple[Path, dict[str, Any]]:
    """(path, content) of a `cluster.json`, given it or the dir holding it."""
    path = Path(spec)
    if path.is_dir():
        path = path / CLUSTER_FILE
    try:
        info = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(
            f"option cluster: {path} does not exist (expected the cluster.json of a "
            "`herald cluster dev`, its dir, or a name server's http://host:port)"
        ) from None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"option cluster: cannot read {path}: {exc}") from None
    if not isinstance(info, dict) or not isinstance(info.get("nodes"), list):
        raise ClusterError(f"option cluster: {path} is not a cluster.json (no nodes list)")
    return path, info


def from_file(spec: str) -> Layout:
    """A cluster.json's nodes, with the roles and offsets its name server gives now."""
    path, info = read_cluster_file(spec)
    try:
        listed = {
            str(n["name"]): NodeDir(
                str(n["name"]),
                str(n["group"]),
                str(n.get("role", "unknown")),
                Path(n["data_dir"]) if n.get("data_dir") else None,
            )
            for n in info["nodes"]
        }
    except (KeyError, TypeError):
        raise ClusterError(f"option cluster: {path}: a node without a name or group") from None
    nameserver = info.get("nameserver")
    if not isinstance(nameserver, str) or not nameserver:
        return Layout(str(path), tuple(listed.values()))
    try:
        view = fetch_view(nameserver, timeout=2.0)
    except ClusterError as exc:
        log.warning("%s; the roles of %s are used as written", exc, path)
        return Layout(str(path), tuple(listed.values()))
    live = {n.node: n for n in _node_entries(view, info.get("cluster"))}
    nodes = []
    for name, entry in listed.items():
        now = live.get(name)
        if now is None:  # not registered now (stopped, or expired): tried last
            nodes.append(attrs.evolve(entry, role="unknown"))
        else:
            nodes.append(attrs.evolve(entry, group=now.group, role=now.role, offset=now.offset))
    return Layout(f"{path} (roles from the name server {nameserver})", tuple(nodes))


def from_nameserver(url: str) -> Layout:
    return Layout(url, tuple(_node_entries(fetch_view(url))))


def resolve(options: ClusterOptions) -> Layout:
    """The cluster's layout, its groups cut to `options.groups`, data dirs from the
    `dataDir` template when given."""
    layout = from_nameserver(options.spec) if options.is_url else from_file(options.spec)
    if not layout.nodes:
        raise ClusterError(f"option cluster: {layout.origin} lists no nodes")
    known = set(layout.groups())
    unknown = sorted(options.groups - known)
    if unknown:
        raise ClusterError(
            f"option groups: unknown group(s) {', '.join(unknown)}; "
            f"{layout.origin} has {', '.join(sorted(known))}"
        )
    nodes = [n for n in layout.nodes if not options.groups or n.group in options.groups]
    if options.data_dir is not None:
        template = options.data_dir
        try:
            nodes = [
                attrs.evolve(n, data_dir=Path(template.format(node=n.node, group=n.group)))
                for n in nodes
            ]
        except (KeyError, IndexError, ValueError):
            raise ClusterError(
                f"option dataDir: {template!r} may name only {{node}} and {{group}}"
            ) from None
    return Layout(layout.origin, tuple(nodes))


def readable(node: NodeDir) -> str | None:
    """Why `node`'s data dir cannot be read here, or None when it can."""
    if node.data_dir is None:
        return "no data dir known (give .option('dataDir', '/path/{node}'))"
    try:
        store_root(node.data_dir)
    except DataDirError as exc:
        return str(exc)
    return None


def choose(layout: Layout, group: str, read_from: str = "slave") -> NodeDir:
    """The node whose data dir the group is read from: the first readable candidate."""
    problems = []
    for node in layout.candidates(group, read_from):
        problem = readable(node)
        if problem is None:
            return node
        problems.append(f"{node.node}: {problem}")
    raise ClusterError(
        f"group {group} of {layout.origin}: no node's data dir can be read here: "
        + "; ".join(problems)
    )


def sources(options: ClusterOptions) -> dict[str, NodeDir]:
    """group -> the node it is read from, for every group (sorted by name)."""
    layout = resolve(options)
    return {g: choose(layout, g, options.read_from) for g in layout.groups()}
