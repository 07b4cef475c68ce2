"""Where the cluster keeps things in etcd (CLUSTER.md §4.3): every key of a cluster lives
under `P = /herald/<cluster.name>`, with each name in a key percent-encoded whole (a vhost
"/" is `%2F`, a node "n1@host" is `n1%40host`), so a name can never split a path.

Nodes write `P/nodes/<node>`; each group keeps its state and its master's claim under
`P/groups/<group>/` (controller.py); slots and definitions get their keys here too.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

ROOT = "/herald"


def part(name: str) -> str:
    """One path segment: `name` percent-encoded, `/` included."""
    return quote(name, safe="")


def cluster_prefix(cluster: str) -> str:
    """`P`, without a trailing slash."""
    return f"{ROOT}/{part(cluster)}"


def nodes_prefix(cluster: str) -> str:
    """The prefix of every node key of `cluster` (with its trailing slash)."""
    return f"{cluster_prefix(cluster)}/nodes/"


def node_key(cluster: str, node: str) -> str:
    """`P/nodes/<node>`: held on the node's lease, so it goes when the node does."""
    return nodes_prefix(cluster) + part(node)


def node_of(cluster: str, key: str) -> str | None:
    """The node a node key names, or None for a key that is not one."""
    prefix = nodes_prefix(cluster)
    if not key.startswith(prefix) or "/" in key[len(prefix) :]:
        return None
    return unquote(key[len(prefix) :])


def groups_prefix(cluster: str, group: str) -> str:
    """`P/groups/<group>/`: both keys of one group, watched together (with the slash, so
    group "g1" never covers "g10")."""
    return f"{cluster_prefix(cluster)}/groups/{part(group)}/"


def group_state_key(cluster: str, group: str) -> str:
    """`P/groups/<group>/state`: epoch, master, sync set; on no lease, so it outlives nodes."""
    return groups_prefix(cluster, group) + "state"


def group_master_key(cluster: str, group: str) -> str:
    """`P/groups/<group>/master`: the master's claim, on its lease, so it goes when it does."""
    return groups_prefix(cluster, group) + "master"
