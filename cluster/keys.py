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


# -- shared queues (CLUSTER.md §5) ---------------------------------------------------------------


def shared_prefix(cluster: str) -> str:
    """`P/shared/`: every key of every shared queue (definitions, slots, owners, marks), one
    watch for a node's whole slot index."""
    return f"{cluster_prefix(cluster)}/shared/"


def shared_queue_key(cluster: str, vhost: str, queue: str) -> str:
    """`P/shared/queues/<vhost>/<queue>`: a shared queue's declaration, known on every master."""
    return f"{shared_prefix(cluster)}queues/{part(vhost)}/{part(queue)}"


def _queue_path(cluster: str, what: str, vhost: str, queue: str) -> str:
    return f"{shared_prefix(cluster)}{what}/{part(vhost)}/{part(queue)}/"


def slots_prefix(cluster: str, vhost: str, queue: str) -> str:
    """`P/shared/slots/<vhost>/<queue>/`: the queue's slots, all origins."""
    return _queue_path(cluster, "slots", vhost, queue)


def owners_prefix(cluster: str, vhost: str, queue: str) -> str:
    """`P/shared/owners/<vhost>/<queue>/`: who holds which slot, each key on its holder's lease."""
    return _queue_path(cluster, "owners", vhost, queue)


def marks_prefix(cluster: str, vhost: str, queue: str) -> str:
    """`P/shared/reported/<vhost>/<queue>/`: per origin group, the last offset made a slot."""
    return _queue_path(cluster, "reported", vhost, queue)


def bindings_prefix(cluster: str, vhost: str, queue: str) -> str:
    """`P/shared/bindings/<vhost>/<queue>/`: the queue's bindings, one key each."""
    return _queue_path(cluster, "bindings", vhost, queue)


def slot_name(group: str, first: int) -> str:
    """A slot's name under its queue: its origin group and first offset, zero-padded so that
    keys sort oldest first within an origin."""
    return f"{part(group)}/{first:020d}"


def parse_shared_key(cluster: str, key: str) -> tuple[str, str, str, str] | None:
    """(what, vhost, queue, rest) of a key under `shared_prefix`: what is "queues", "slots",
    "owners", "reported" or "bindings", rest the part after the queue ("" for a
    declaration). None for any other key."""
    prefix = shared_prefix(cluster)
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix) :].split("/", 3)
    if len(parts) < 3 or parts[0] not in ("queues", "slots", "owners", "reported", "bindings"):
        return None
    rest = parts[3] if len(parts) == 4 else ""
    return parts[0], unquote(parts[1]), unquote(parts[2]), rest


def parse_slot_name(rest: str) -> tuple[str, int] | None:
    """(group, first offset) of a slot name; None if `rest` is not one."""
    group, _, first = rest.partition("/")
    if not group or not first.isdigit():
        return None
    return unquote(group), int(first)
