"""`GET /api/cluster` of the management API (through `herald_management_routes`).

This node's own view (cluster, node, group, role, epoch, whether it is fenced, its client
addresses, its commit-log offset now, its name servers), its `replication` now
(`ClusterNode.replication()`: a master's epoch, sync set, confirm offset, log end and each
slave's ack and lag; a slave's master and offsets; `{}` between roles), its group's keys as
the node last saw them in etcd (`group_state`: epoch, master, sync set, master address;
`master_claim`: the master's claim, present while its lease lives; each null when absent),
and the cluster as the first name server that answers sees it (its `/v1/cluster`, under
`view`, where each node's `offset` is as of its last registration there); when none answers,
`view` is null and `nameserver_errors` says why, so the page still shows the local part. A
broker that is not a cluster node answers `{"enabled": false, "node": ...}`.

`node_gauges(broker)`: the node's Prometheus series for the management plugin's `/metrics`.
plugins/management/metrics.py asks for them in its scrape snapshot (on the broker's Trio
thread), only for a broker whose `[cluster]` is enabled, and turns the plain data returned
into gauge families in its worker thread. On every cluster node: `herald_cluster_fenced` (1
while the lease guard has run out: etcd unreachable, publishers blocked, no confirm
released). On a master (a node running the HA streams), from `ClusterNode.replication()`:

- `herald_ha_epoch`, `herald_ha_sync_set_size` (the master included),
  `herald_ha_confirmed_offset` (every record ending at or below it may be confirmed),
  `herald_ha_log_end_offset`;
- per slave the master has seen (label `slave`): `herald_ha_slave_connected`,
  `herald_ha_slave_in_sync` (in the sync set), `herald_ha_lag_bytes` (log end minus the
  slave's ack) and `herald_ha_lag_seconds` (how long ago the slave last held everything the
  master had; no sample while it is disconnected or has never caught up: unknown, not 0);
- with shared queues, `herald_shared_*` (cluster/shared/status.py).

`shared` in the answer is the master's shared queues now (`SharedRuntime.describe`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from herald.cluster.nameserver.client import base_url
from herald.cluster.node import running_node
from herald.cluster.plugin import cluster_config

if TYPE_CHECKING:
    from herald.cluster.controller import GroupView
    from herald.cluster.node import ClusterNode
    from herald.core.broker import Broker
    from herald.core.config import HeraldConfig

NAMESERVER_TIMEOUT_S = 2.0


async def cluster_view(broker: Broker, _request: Any) -> dict[str, Any]:
    return await node_view(broker.config, running_node(broker))


async def node_view(herald_config: HeraldConfig, node: ClusterNode | None) -> dict[str, Any]:
    """The answer for the node `herald_config` configures (a slave's read-only management
    API, which has no broker, answers with it too: plugins/management/replica_api.py)."""
    config = cluster_config(herald_config)
    node_name = herald_config.broker.node_name
    if config is None:
        return {"enabled": False, "node": node_name}
    out: dict[str, Any] = {
        "enabled": True,
        "cluster": config.name,
        "node": node_name,
        "group": config.group_of(node_name),
        "role": None if node is None else node.status.role.value,
        "epoch": None if node is None else node.status.epoch,
        "fenced": None if node is None or node.membership is None else node.membership.fenced,
        "addrs": {} if node is None else node.addresses(),
        "offset": None if node is None else node.offset(),  # live, not as of a registration
        "replication": None if node is None else node.replication(),
        "shared": None if node is None or node.shared is None else node.shared.describe(),
        **group_keys(None if node is None else node.view),
        "nameservers": list(config.nameservers),
        "nameserver": None,
        "view": None,
        "nameserver_errors": [],
    }
    async with httpx.AsyncClient(timeout=NAMESERVER_TIMEOUT_S) as http:
        for nameserver in config.nameservers:
            try:
                response = await http.get(f"{base_url(nameserver)}/v1/cluster")
                response.raise_for_status()
                out["view"] = response.json()
            except (httpx.HTTPError, ValueError) as exc:
                out["nameserver_errors"].append(f"{nameserver}: {exc}")
                continue
            out["nameserver"] = nameserver
            break
    return out


def group_keys(view: GroupView | None) -> dict[str, Any]:
    """`group_state` and `master_claim` as the node's watch last saw them (no etcd request)."""
    state = None if view is None else view.state
    claim = None if view is None else view.master
    return {
        "group_state": None
        if state is None
        else {
            "epoch": state.epoch,
            "master": state.master,
            "sync_set": list(state.sync_set),
            "master_addr": state.master_addr,
        },
        "master_claim": None if claim is None else {"node": claim.node, "epoch": claim.epoch},
    }


# -- /metrics ----------------------------------------------------------------------------------

Sample = tuple[tuple[str, ...], float]
Gauge = tuple[str, str, tuple[str, ...], tuple[Sample, ...]]
"""(name, documentation, label names, samples): plain data, safe for another thread."""

_SLAVE = ("slave",)


def node_gauges(broker: Broker) -> tuple[Gauge, ...]:
    """The series of the node `broker` belongs to (none: not a running cluster node)."""
    node = running_node(broker)
    if node is None:
        return ()
    fenced = node.membership is not None and node.membership.fenced
    out: list[Gauge] = [
        (
            "herald_cluster_fenced",
            "1 while this node's lease guard has run out (etcd unreachable): no confirm "
            "is released and publishers are blocked",
            (),
            (((), float(fenced)),),
        )
    ]
    if node.shared is not None:
        from herald.cluster.shared.status import shared_gauges

        out += shared_gauges(node.shared)
    replication = node.replication()
    slaves = replication.get("slaves")
    if not isinstance(slaves, dict):  # not a master now
        return tuple(out)
    out += [
        ("herald_ha_epoch", "This master's epoch", (), (((), replication["epoch"]),)),
        (
            "herald_ha_sync_set_size",
            "Nodes in the sync set, this master included",
            (),
            (((), len(replication["sync_set"])),),
        ),
        (
            "herald_ha_confirmed_offset",
            "Commit-log offset up to which records may be confirmed to publishers",
            (),
            (((), replication["confirmed"]),),
        ),
        (
            "herald_ha_log_end_offset",
            "Commit-log offset where this master's log ends",
            (),
            (((), replication["log_end"]),),
        ),
    ]
    names = sorted(slaves)
    out += [
        (
            "herald_ha_slave_connected",
            "1 while the slave's replication stream is connected",
            _SLAVE,
            tuple(((n,), float(bool(slaves[n]["connected"]))) for n in names),
        ),
        (
            "herald_ha_slave_in_sync",
            "1 while the slave is in the sync set (a sync confirm waits for its ack)",
            _SLAVE,
            tuple(((n,), float(bool(slaves[n]["in_sync"]))) for n in names),
        ),
        (
            "herald_ha_lag_bytes",
            "Bytes of this master's log the slave has not acknowledged",
            _SLAVE,
            tuple(((n,), slaves[n]["lag_bytes"]) for n in names),
        ),
        (
            "herald_ha_lag_seconds",
            "Seconds since the slave last held everything this master had "
            "(no sample while disconnected or never caught up)",
            _SLAVE,
            tuple(
                ((n,), slaves[n]["lag_ms"] / 1000) for n in names if slaves[n]["lag_ms"] is not None
            ),
        ),
    ]
    return tuple(out)
