"""Slots and their etcd transactions (CLUSTER.md §4.3, §5).

A slot is a range of one origin group's queue offsets of one shared queue: `P/shared/slots/
<vhost>/<queue>/<group>/<first>` holds `{"last", "gen", "made_ms"}`. A node delivering it
holds `P/shared/owners/...` with the same name, on its membership lease, so a dead holder's
slots come free when its lease ends (WSO2 reassigns them by hand; etcd does it for us). `gen`
counts acquisitions: a slot acquired before (gen > 1 once taken) is delivered flagged
redelivered. `P/shared/reported/<vhost>/<queue>/<group>` is the last offset an origin made a
slot of, so a new master knows where its reporting starts.

Every change is one txn; a lost compare answers False (somebody else moved first), never
raises: the callers try another slot or drop theirs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import attrs

from herald.cluster import keys
from herald.cluster.etcd import EtcdClient
from herald.cluster.etcd_types import Compare, DeleteOp, PutOp, TxnOp

MAX_OPS = 120
"""etcd takes at most 128 ops per txn."""


@attrs.define(eq=False)
class Slot:
    """One slot as the index last saw it; `revision` is its key's mod revision (the acquire
    txn's compare), `owner` the node holding it ("" when free)."""

    vhost: str
    queue: str
    group: str
    first: int
    last: int
    gen: int = 0
    made_ms: int = 0
    revision: int = 0
    owner: str = ""

    @property
    def name(self) -> str:
        return keys.slot_name(self.group, self.first)

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def describe(self) -> dict[str, object]:
        return {
            "group": self.group,
            "first": self.first,
            "last": self.last,
            "gen": self.gen,
            "owner": self.owner or None,
        }


def slot_value(last: int, gen: int, made_ms: int) -> bytes:
    return json.dumps({"last": last, "gen": gen, "made_ms": made_ms}).encode()


def owner_value(node: str, gen: int) -> bytes:
    return json.dumps({"node": node, "gen": gen}, sort_keys=True).encode()


@attrs.frozen
class NewSlot:
    """A slot an origin makes: offsets `first`..`last` of `queue` in its group."""

    vhost: str
    queue: str
    first: int
    last: int
    gen: int = 0


class SlotTable:
    """The etcd side of slots, for one node of `cluster` (`node`, in `group`)."""

    def __init__(self, etcd: EtcdClient, cluster: str, node: str, group: str) -> None:
        self.etcd = etcd
        self.cluster = cluster
        self.node = node
        self.group = group

    def slot_key(self, slot: Slot | NewSlot) -> str:
        group = slot.group if isinstance(slot, Slot) else self.group  # a new slot is mine
        name = keys.slot_name(group, slot.first)
        return keys.slots_prefix(self.cluster, slot.vhost, slot.queue) + name

    def owner_key(self, slot: Slot) -> str:
        return keys.owners_prefix(self.cluster, slot.vhost, slot.queue) + slot.name

    def mark_key(self, vhost: str, queue: str, group: str | None = None) -> str:
        return keys.marks_prefix(self.cluster, vhost, queue) + keys.part(group or self.group)

    async def make(self, slots: Sequence[NewSlot]) -> None:
        """Put this origin's new slots and move its marks past them (txns of ≤ MAX_OPS)."""
        now = int(time.time() * 1000)
        ops: list[TxnOp] = []
        marks: dict[tuple[str, str], int] = {}
        for slot in slots:
            key = self.slot_key(slot)
            ops.append(PutOp(key, slot_value(slot.last, slot.gen, now)))
            where = (slot.vhost, slot.queue)
            marks[where] = max(marks.get(where, -1), slot.last)
        for (vhost, queue), last in marks.items():
            ops.append(PutOp(self.mark_key(vhost, queue), str(last).encode()))
        for start in range(0, len(ops), MAX_OPS):
            await self.etcd.txn([], ops[start : start + MAX_OPS])

    async def marks(self, vhost: str, queue: str) -> int:
        """The last offset this origin made a slot of for the queue (-1: none yet)."""
        found = await self.etcd.get(self.mark_key(vhost, queue))
        return int(found.value) if found is not None else -1

    async def my_ranges(self, vhost: str, queue: str) -> list[tuple[int, int]]:
        """(first, last) of every slot this origin has for the queue now (read from etcd, not
        from a watch that may lag)."""
        prefix = keys.slots_prefix(self.cluster, vhost, queue) + keys.part(self.group) + "/"
        found = await self.etcd.range(prefix, prefix=True)
        out = []
        for kv in found.kvs:
            first = kv.key.decode()[len(prefix) :]
            if first.isdigit():
                out.append((int(first), int(json.loads(kv.value)["last"])))
        return out

    async def acquire(self, slot: Slot, lease: int) -> bool:
        """Take a free slot on `lease`, bumping its generation."""
        if not lease:
            return False
        gen = slot.gen + 1
        result = await self.etcd.txn(
            [
                Compare.create(self.owner_key(slot), 0),
                Compare.mod(self.slot_key(slot), slot.revision),
            ],
            [
                PutOp(self.owner_key(slot), owner_value(self.node, gen), lease),
                PutOp(self.slot_key(slot), slot_value(slot.last, gen, slot.made_ms)),
            ],
        )
        if result.succeeded:
            slot.gen, slot.owner = gen, self.node
        return result.succeeded

    async def done(self, slot: Slot) -> bool:
        """Every message of the slot is settled and its acks durable at the origin: delete it
        (only while this node still holds it)."""
        return await self._while_held(
            slot, [DeleteOp(self.slot_key(slot)), DeleteOp(self.owner_key(slot))]
        )

    async def release(self, slot: Slot) -> bool:
        """Give a slot back unfinished (its last local consumer left, its origin is away)."""
        return await self._while_held(slot, [DeleteOp(self.owner_key(slot))])

    async def _while_held(self, slot: Slot, ops: list[TxnOp]) -> bool:
        held = Compare.value(self.owner_key(slot), owner_value(self.node, slot.gen))
        result = await self.etcd.txn([held], ops)
        return result.succeeded

    async def forget_queue(self, vhost: str, queue: str) -> None:
        """A deleted shared queue: its declaration, bindings, slots, owners and marks go."""
        cluster = self.cluster
        await self.etcd.txn(
            [],
            [
                DeleteOp(keys.shared_queue_key(cluster, vhost, queue)),
                DeleteOp(keys.slots_prefix(cluster, vhost, queue), prefix=True),
                DeleteOp(keys.owners_prefix(cluster, vhost, queue), prefix=True),
                DeleteOp(keys.marks_prefix(cluster, vhost, queue), prefix=True),
                DeleteOp(keys.bindings_prefix(cluster, vhost, queue), prefix=True),
            ],
        )
