"""`GET /api/cluster` of the management API (through `herald_management_routes`).

This node's own view (cluster, node, group, role, epoch, whether it is fenced, its client
addresses, its commit-log offset now, its name servers) and the cluster as the first name
server that answers sees it (its `/v1/cluster`, under `view`, where each node's `offset` is
as of its last registration there); when none answers, `view` is null and
`nameserver_errors` says why, so the page still shows the local part. A broker that is not
a cluster node answers `{"enabled": false, "node": ...}`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from herald.cluster.nameserver.client import base_url
from herald.cluster.node import running_node
from herald.cluster.plugin import cluster_config

if TYPE_CHECKING:
    from herald.core.broker import Broker

NAMESERVER_TIMEOUT_S = 2.0


async def cluster_view(broker: Broker, _request: Any) -> dict[str, Any]:
    config = cluster_config(broker.config)
    node_name = broker.config.broker.node_name
    if config is None:
        return {"enabled": False, "node": node_name}
    node = running_node(broker)
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
