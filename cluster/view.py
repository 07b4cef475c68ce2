"""`herald cluster status`: the cluster as the name server sees it (its `/v1/cluster`), with
each group's replication as etcd holds it.

`--nameserver HOST:PORT` (repeatable: the first that answers is used), or `--dir DIR` of a
`herald cluster dev` (the name server in `DIR/cluster.json`); neither: 127.0.0.1:9876. The
name server gives the rows: groups, nodes, roles, epochs, how long ago each node last
registered, its commit-log offset as of that registration (`-`: the node sent none) and its
client addresses.

etcd (`--etcd URL`, repeatable, or the `etcd` of `DIR/cluster.json`) adds what only it knows
(CLUSTER.md §4.3): each group's state (epoch, master, sync set), whether the master's claim
is alive, and from the node keys each node's replication: for a slave its lag behind the
master (bytes, ms) as the master last published it in its node key (every lease renewal,
TTL/3), for the master its confirm offset and log end. The cluster's etcd prefix is its name:
`--name`, else the `cluster` of `DIR/cluster.json`, else each cluster the name server lists.
Without etcd (not given, or not answering) the output is the name server's alone, as before,
and a note on stderr says why.

`--json` prints `/v1/cluster` as received, with `nameserver`, `etcd` (the endpoints asked,
or null) and `etcd_error` (why etcd was not read, or null) added, each group with `ha` (see
`group_ha`) and each node with `in_sync`, `lag_bytes`, `lag_ms` and `replication` (see
`node_ha`), null when etcd was not read, and `shared` (per cluster, each shared queue's
slots: how many, free, the messages they span, who holds them). With etcd read, the table
gains the columns `IN SYNC`, `LAG BYTES` and `LAG MS`, a second table of the groups as etcd
has them, and a third of the shared queues with each master's delivered count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import attrs
import click
import httpx
import trio

from herald.cluster import keys
from herald.cluster.controller import GroupState, MasterClaim
from herald.cluster.etcd import EtcdClient, EtcdError
from herald.cluster.nameserver.client import NameServerUnavailable, base_url
from herald.cluster.shared.status import read_shared, shared_table
from herald.core.errors import HeraldError

DEFAULT_NAMESERVER = "127.0.0.1:9876"
ETCD_NOT_GIVEN = "no etcd given (--etcd URL or --dir DIR)"


def dev_info(dir_: Path) -> dict[str, Any]:
    """`DIR/cluster.json` of a `herald cluster dev`."""
    path = dir_ / "cluster.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise HeraldError(f"cannot read {path}: {exc}") from None
    if not isinstance(info, dict):
        raise HeraldError(f"{path} is not a JSON object")
    return info


def nameservers_of(dir_: Path) -> list[str]:
    """The name server a `herald cluster dev` in `dir_` started."""
    found = dev_info(dir_).get("nameserver")
    if not isinstance(found, str) or not found:
        raise HeraldError(f"{dir_ / 'cluster.json'} names no name server")
    return [found]


def etcd_of(dir_: Path) -> tuple[list[str], str | None]:
    """The etcd endpoint and the cluster name of a `herald cluster dev` in `dir_` (an
    empty list / None for what its cluster.json does not say)."""
    info = dev_info(dir_)
    etcd, name = info.get("etcd"), info.get("cluster")
    return (
        [etcd] if isinstance(etcd, str) and etcd else [],
        name if isinstance(name, str) and name else None,
    )


def fetch_cluster(nameservers: Sequence[str], timeout: float = 3.0) -> dict[str, Any]:
    """`/v1/cluster` of the first name server that answers, plus `nameserver`: which."""
    problems = []
    for nameserver in nameservers:
        try:
            response = httpx.get(f"{base_url(nameserver)}/v1/cluster", timeout=timeout)
            response.raise_for_status()
            view = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            problems.append(f"{nameserver}: {exc}")
            continue
        if isinstance(view, dict):
            return {"nameserver": nameserver, **view}
        problems.append(f"{nameserver}: not a cluster view")
    raise NameServerUnavailable("no name server answered: " + "; ".join(problems))


# -- etcd's side -------------------------------------------------------------------------------


@attrs.frozen
class GroupKeys:
    """One group's two keys (controller.py); `problem` says why one could not be read."""

    state: GroupState | None = None
    claim: MasterClaim | None = None
    problem: str | None = None


@attrs.frozen
class ClusterKeys:
    """What etcd holds of one cluster: its groups' keys and its node keys (as JSON)."""

    cluster: str
    groups: Mapping[str, GroupKeys]
    nodes: Mapping[str, Mapping[str, Any]]
    shared: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    """Shared queues and their slots (cluster/shared/status.py `read_shared`)."""


async def read_cluster_keys(etcd: EtcdClient, cluster: str) -> ClusterKeys:
    """Every group's state and claim and every node key of `cluster` (two prefix reads).
    A key holding something else is reported in its group's `problem`, or skipped (a node
    key), never raised: the rest is still worth showing."""
    groups_prefix = f"{keys.cluster_prefix(cluster)}/groups/"
    found = await etcd.range(groups_prefix, prefix=True)
    parts: dict[str, dict[str, Any]] = {}
    for kv in found.kvs:
        group, _, leaf = kv.key.decode(errors="replace")[len(groups_prefix) :].partition("/")
        if leaf not in ("state", "master"):
            continue
        entry = parts.setdefault(unquote(group), {})
        try:
            if leaf == "state":
                entry["state"] = GroupState.from_kv(kv)
            else:
                entry["claim"] = MasterClaim.from_kv(kv)
        except ValueError as exc:
            entry["problem"] = f"etcd key {kv.key.decode(errors='replace')}: {exc}"
    nodes: dict[str, Mapping[str, Any]] = {}
    for kv in (await etcd.range(keys.nodes_prefix(cluster), prefix=True)).kvs:
        node = keys.node_of(cluster, kv.key.decode(errors="replace"))
        try:
            data = json.loads(kv.value)
        except ValueError:
            continue
        if node is not None and isinstance(data, dict):
            nodes[node] = data
    groups = {name: GroupKeys(**entry) for name, entry in sorted(parts.items())}
    return ClusterKeys(cluster, groups, nodes, await read_shared(etcd, cluster))


def read_etcd(
    endpoints: Sequence[str], clusters: Sequence[str], timeout: float
) -> dict[str, ClusterKeys]:
    """`read_cluster_keys` of each cluster, from the etcd at `endpoints`.

    :raises HeraldError: etcd did not answer within `timeout` (per request).
    """

    async def read() -> dict[str, ClusterKeys]:
        connect = min(1.0, timeout)
        async with EtcdClient(endpoints, timeout=timeout, connect_timeout=connect) as etcd:
            return {name: await read_cluster_keys(etcd, name) for name in clusters}

    try:
        return trio.run(read)
    except (EtcdError, httpx.HTTPError) as exc:
        raise HeraldError(f"etcd {', '.join(endpoints)}: {exc}") from None


def group_ha(found: GroupKeys, nodes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A group's `ha` in the JSON: its state (`epoch`, `master`, `sync_set`, `master_addr`;
    null without a state), `master_alive` (the master's claim is in etcd, i.e. its lease
    lives), `claim` (`{node, epoch}` or null), and from the master's node key `confirmed` and
    `log_end` (null when its key says otherwise, e.g. it is gone); `problem` when a key is
    unreadable."""
    state, claim = found.state, found.claim
    out: dict[str, Any] = {
        "epoch": None,
        "master": None,
        "sync_set": None,
        "master_addr": None,
        "master_alive": False,
        "claim": None if claim is None else {"node": claim.node, "epoch": claim.epoch},
        "confirmed": None,
        "log_end": None,
        "problem": found.problem,
    }
    if state is None:
        return out
    out.update(
        epoch=state.epoch,
        master=state.master,
        sync_set=list(state.sync_set),
        master_addr=state.master_addr,
        master_alive=claim is not None and claim.node == state.master,
    )
    replication = _replication(nodes.get(state.master))
    if "confirmed" in replication:
        out.update(confirmed=replication.get("confirmed"), log_end=replication.get("log_end"))
    return out


def _replication(node_key: Mapping[str, Any] | None) -> Mapping[str, Any]:
    replication = None if node_key is None else node_key.get("replication")
    return replication if isinstance(replication, dict) else {}


def node_ha(node: str, found: GroupKeys, nodes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A node's additions: `in_sync` (in the group's sync set; null without a state),
    `lag_bytes` / `lag_ms` (this slave as the master last reported it in its node key: null
    for the master itself, for a node the master does not report, and `lag_ms` while the
    slave is disconnected or has never caught up), `replication` (the node key's own, null
    without a node key: its lease is gone)."""
    state, mine = found.state, nodes.get(node)
    seen: Any = None
    if state is not None and node != state.master:
        slaves = _replication(nodes.get(state.master)).get("slaves")
        seen = slaves.get(node) if isinstance(slaves, dict) else None
    seen = seen if isinstance(seen, dict) else {}
    return {
        "in_sync": None if state is None else node in state.sync_set,
        "lag_bytes": seen.get("lag_bytes"),
        "lag_ms": seen.get("lag_ms"),
        "replication": None if mine is None else mine.get("replication"),
    }


NO_NODE_HA = {"in_sync": None, "lag_bytes": None, "lag_ms": None, "replication": None}


def with_etcd(view: Mapping[str, Any], found: Mapping[str, ClusterKeys] | None) -> dict[str, Any]:
    """`view` (a `/v1/cluster`) with each group's `ha` and each node's replication fields;
    null for a cluster etcd was not read for (`found` None: not read at all)."""
    groups = []
    for group in view.get("groups", []):
        cluster = (found or {}).get(str(group.get("cluster")))
        if cluster is None:
            nodes = [{**node, **NO_NODE_HA} for node in group.get("nodes", [])]
            groups.append({**group, "ha": None, "nodes": nodes})
            continue
        group_keys = cluster.groups.get(str(group.get("group")), GroupKeys())
        nodes = [
            {**node, **node_ha(str(node.get("node")), group_keys, cluster.nodes)}
            for node in group.get("nodes", [])
        ]
        groups.append({**group, "ha": group_ha(group_keys, cluster.nodes), "nodes": nodes})
    shared = {name: dict(cluster_keys.shared) for name, cluster_keys in (found or {}).items()}
    return {**view, "groups": groups, "shared": shared if found is not None else None}


# -- output ------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [head, *rows]
    ]


def status_table(view: Mapping[str, Any], found: Mapping[str, ClusterKeys] | None = None) -> str:
    """The name server's nodes; with `found` (etcd read, `view` merged by `with_etcd`) the
    replication columns and, per cluster, a table of its groups as etcd has them."""
    head = ["GROUP", "NODE", "ROLE", "EPOCH", "LAST SEEN", "OFFSET"]
    if found is not None:
        head += ["IN SYNC", "LAG BYTES", "LAG MS"]
    head += ["AMQP", "MQTT", "STOMP", "MANAGEMENT"]
    rows = []
    for group in view.get("groups", []):
        for node in group.get("nodes", []):
            addrs = node.get("addrs", {})
            row = [
                str(group.get("group")),
                str(node.get("node")),
                str(node.get("role")),
                str(node.get("epoch")),
                f"{node.get('last_seen_ms_ago', 0) / 1000:.1f} s ago",
                _text(node.get("offset")),  # as of that registration
            ]
            if found is not None:
                row += [_yes(node.get("in_sync")), _text(node.get("lag_bytes"))]
                row += [_text(node.get("lag_ms"))]
            row += [addrs.get(k, "-") for k in ("amqp", "mqtt", "stomp", "management")]
            rows.append(row)
    lines = [f"name server {view.get('nameserver')}: {len(rows)} node(s)", *_table(head, rows)]
    etcd = ", ".join(view.get("etcd") or [])
    for cluster in (found or {}).values():
        lines += ["", f"etcd {etcd}, cluster {cluster.cluster}: {len(cluster.groups)} group(s)"]
        if cluster.groups:
            lines += _table(*_groups_table(cluster))
        if cluster.shared:
            lines += ["", *shared_table(cluster.shared, cluster.nodes)]
    return "\n".join(lines)


def _groups_table(cluster: ClusterKeys) -> tuple[list[str], list[list[str]]]:
    head = ["GROUP", "EPOCH", "MASTER", "ALIVE", "SYNC SET", "CONFIRMED", "LOG END"]
    rows = []
    for name, group_keys in cluster.groups.items():
        ha = group_ha(group_keys, cluster.nodes)
        alive = _yes(ha["master_alive"] if ha["master"] else None)
        if ha["claim"] and not ha["master_alive"]:
            alive = f"no (claim: {ha['claim']['node']})"
        sync_set = ",".join(ha["sync_set"]) if ha["sync_set"] else "-"
        confirmed, log_end = _text(ha["confirmed"]), _text(ha["log_end"])
        rows.append(
            [name, _text(ha["epoch"]), _text(ha["master"]), alive, sync_set, confirmed, log_end]
        )
        if ha["problem"]:
            rows[-1][-1] += f"  ({ha['problem']})"
    return head, rows


@click.command(name="status")
@click.option(
    "--nameserver",
    "nameservers",
    multiple=True,
    metavar="HOST:PORT",
    help=f"A name server to ask (repeatable; default {DEFAULT_NAMESERVER}).",
)
@click.option(
    "--dir",
    "dir_",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The --dir of a `herald cluster dev`: ask the name server and etcd in its cluster.json.",
)
@click.option(
    "--etcd",
    "etcd",
    multiple=True,
    metavar="URL",
    help="An etcd endpoint (repeatable) to read epochs, sync sets and lag from "
    "(default: the one in --dir's cluster.json; none: name server only).",
)
@click.option(
    "--name",
    default=None,
    metavar="CLUSTER",
    help="The cluster's name in etcd (default: --dir's, else each cluster the name server lists).",
)
@click.option("--json", "as_json", is_flag=True, help="Print /v1/cluster as JSON, etcd's added.")
@click.option(
    "--timeout", type=click.FloatRange(min=0, min_open=True), default=3.0, show_default=True
)
def status(
    nameservers: tuple[str, ...],
    dir_: Path | None,
    etcd: tuple[str, ...],
    name: str | None,
    as_json: bool,
    timeout: float,
) -> None:
    """Groups, nodes, roles, epochs, offsets, sync sets and replication lag.

    The name server gives the nodes; etcd (--etcd, or --dir's) each group's epoch, master
    and sync set and each slave's lag as its master last published it.
    """
    if nameservers and dir_ is not None:
        raise click.UsageError("give --nameserver or --dir, not both")
    asked = list(nameservers) or (nameservers_of(dir_) if dir_ else [DEFAULT_NAMESERVER])
    endpoints, cluster = list(etcd), name
    if dir_ is not None:
        dev_etcd, dev_name = etcd_of(dir_)
        endpoints, cluster = endpoints or dev_etcd, cluster or dev_name
    view = fetch_cluster(asked, timeout)
    found: dict[str, ClusterKeys] | None = None
    problem: str | None = ETCD_NOT_GIVEN
    if endpoints:
        clusters = [cluster] if cluster else sorted({str(g.get("cluster")) for g in view["groups"]})
        try:
            found = read_etcd(endpoints, clusters, timeout)
            problem = None
        except HeraldError as exc:
            problem = str(exc)
    view = with_etcd({**view, "etcd": endpoints or None, "etcd_error": problem}, found)
    click.echo(json.dumps(view, indent=2) if as_json else status_table(view, found))
    if problem is not None:
        click.echo(f"herald: note: {problem}: epochs, sync sets and lag not shown", err=True)
