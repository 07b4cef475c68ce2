"""What operators see of shared queues: `herald cluster status` (from etcd), `/api/cluster`
and Prometheus (from a master's runtime).

From etcd (`read_shared`): per shared queue, its slots (how many, how many free, the messages
they span) and who holds them; each master's node key adds how many messages it settled per
queue (`delivered`), so the status shows how the work is spread. From a runtime
(`shared_gauges`): `herald_shared_slots{state=free|held}` (cluster-wide, as this node's watch
sees them), `herald_shared_slots_held_here`, `herald_shared_ready_here` and
`herald_shared_delivered_here_total`, labelled `vhost` and `queue`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from herald.cluster import keys

if TYPE_CHECKING:
    from herald.cluster.etcd import EtcdClient
    from herald.cluster.shared.runtime import SharedRuntime

Sample = tuple[tuple[str, ...], float]
Gauge = tuple[str, str, tuple[str, ...], tuple[Sample, ...]]
_QUEUE = ("vhost", "queue")


async def read_shared(etcd: EtcdClient, cluster: str) -> dict[str, dict[str, Any]]:
    """`{"<vhost>/<queue>": {"slots", "free", "messages", "holders": {node: slots}}}` for every
    shared queue etcd knows (one prefix read)."""
    found = await etcd.range(keys.shared_prefix(cluster), prefix=True)
    queues: dict[str, dict[str, Any]] = {}
    owners: dict[tuple[str, str], str] = {}
    slots: list[tuple[str, str, int]] = []
    for kv in found.kvs:
        parsed = keys.parse_shared_key(cluster, kv.key.decode(errors="replace"))
        if parsed is None:
            continue
        what, vhost, queue, rest = parsed
        name = f"{vhost}/{queue}"
        try:
            value = json.loads(kv.value)
        except ValueError:
            continue
        if what == "queues":
            queues.setdefault(name, {"slots": 0, "free": 0, "messages": 0, "holders": {}})
        elif what == "owners" and isinstance(value, dict):
            owners[(name, rest)] = str(value.get("node"))
        elif what == "slots" and isinstance(value, dict):
            first = keys.parse_slot_name(rest)
            if first is not None:
                slots.append((name, rest, int(value.get("last", first[1])) - first[1] + 1))
    for name, rest, size in slots:
        entry = queues.setdefault(name, {"slots": 0, "free": 0, "messages": 0, "holders": {}})
        entry["slots"] += 1
        entry["messages"] += size
        holder = owners.get((name, rest))
        if holder is None:
            entry["free"] += 1
        else:
            entry["holders"][holder] = entry["holders"].get(holder, 0) + 1
    return dict(sorted(queues.items()))


def shared_table(
    shared: Mapping[str, Mapping[str, Any]], nodes: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Lines for `herald cluster status`: one row per shared queue, with each master's
    delivered count from its node key."""
    if not shared:
        return []
    delivered: dict[str, dict[str, int]] = {}
    for node, data in nodes.items():
        for name, count in (data.get("shared") or {}).items():
            delivered.setdefault(name, {})[node] = int(count)
    head = ["SHARED QUEUE", "SLOTS", "FREE", "MESSAGES IN SLOTS", "HELD BY", "DELIVERED BY"]
    rows = [
        [
            name,
            str(entry["slots"]),
            str(entry["free"]),
            str(entry["messages"]),
            _pairs(entry["holders"]),
            _pairs(delivered.get(name, {})),
        ]
        for name, entry in shared.items()
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [head, *rows]
    ]


def _pairs(counts: Mapping[str, int]) -> str:
    return " ".join(f"{node}:{n}" for node, n in sorted(counts.items())) or "-"


def delivered(runtime: SharedRuntime) -> dict[str, int]:
    """Messages settled here per shared queue (for the node key)."""
    return {
        f"{vhost}/{queue}": feed.delivered
        for (vhost, queue), feed in sorted(runtime.feeds.feeds.items())
    }


def shared_gauges(runtime: SharedRuntime) -> list[Gauge]:
    names = sorted(runtime.queues)
    index, feeds = runtime.index, runtime.feeds.feeds
    free: list[Sample] = []
    held: list[Sample] = []
    for where in names:
        slots = index.of_queue(where)
        unowned = sum(1 for s in slots if not s.owner)
        free.append(((*where, "free"), float(unowned)))
        held.append(((*where, "held"), float(len(slots) - unowned)))

    def per_queue(value: Any) -> tuple[Sample, ...]:
        return tuple((where, float(value(where))) for where in names)

    held_here = per_queue(lambda w: len(feeds[w].held) if w in feeds else 0)
    return [
        (
            "herald_shared_slots",
            "Slots of the shared queue in etcd, free or held by some node",
            (*_QUEUE, "state"),
            (*free, *held),
        ),
        ("herald_shared_slots_held_here", "Slots this node holds", _QUEUE, held_here),
        (
            "herald_shared_ready_here",
            "Messages of held slots ready for this node's consumers",
            _QUEUE,
            per_queue(lambda w: runtime.queues[w].message_count),
        ),
        (
            "herald_shared_delivered_here_total",
            "Messages settled by this node's consumers since it became master",
            _QUEUE,
            per_queue(lambda w: feeds[w].delivered if w in feeds else 0),
        ),
    ]
