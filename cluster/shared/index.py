"""`SlotIndex`: every shared queue's declaration and slots as this node last saw them in etcd.

Fed by one watch on `P/shared/` (`SharedRuntime` runs it): a holder picks free slots from
here without asking etcd, and the acquire txn's compare on the slot's revision catches a
stale pick. A `WatchReset` (compacted history) reloads the whole prefix.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

import trio

from herald.cluster import keys
from herald.cluster.etcd_types import EventType, KeyValue, WatchEvent
from herald.cluster.shared.slots import Slot

QueueName = tuple[str, str]
"""(vhost, queue)."""


class SlotIndex:
    """Declarations (`definitions`), slots per queue (`slots`) and who owns them."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.definitions: dict[QueueName, dict[str, Any]] = {}
        self.slots: dict[QueueName, dict[tuple[str, int], Slot]] = {}
        self.owners: dict[QueueName, dict[tuple[str, int], str]] = {}
        self.marks: dict[QueueName, dict[str, int]] = {}
        self.bindings: dict[QueueName, dict[str, dict[str, Any]]] = {}
        self.values: dict[str, bytes] = {}
        """Declarations and bindings as etcd holds them, by key: what is already there."""
        self._changed = trio.Event()

    # -- feeding -----------------------------------------------------------------------------
    def load(self, kvs: Iterable[KeyValue]) -> None:
        """Start over from a whole read of the prefix."""
        self.definitions.clear()
        self.slots.clear()
        self.owners.clear()
        self.marks.clear()
        self.bindings.clear()
        self.values.clear()
        for kv in kvs:
            self._put(kv)
        self._notify()

    def apply(self, event: WatchEvent) -> None:
        if event.type is EventType.PUT:
            self._put(event.kv)
        else:
            self._delete(event.kv.key.decode())
        self._notify()

    def _put(self, kv: KeyValue) -> None:
        """Take one key in; a value of the wrong shape (written by hand, a newer version) is
        skipped, never raised: the rest of the index stays good."""
        with contextlib.suppress(KeyError, TypeError, ValueError):
            self._take(kv)

    def _take(self, kv: KeyValue) -> None:
        parsed = keys.parse_shared_key(self.cluster, kv.key.decode())
        if parsed is None:
            return
        what, vhost, queue, rest = parsed
        where = (vhost, queue)
        try:
            value = json.loads(kv.value)
        except ValueError:
            return
        if what == "queues":
            self.definitions[where] = value
            self.values[kv.key.decode()] = kv.value
            return
        if what == "bindings":
            self.bindings.setdefault(where, {})[rest] = value
            self.values[kv.key.decode()] = kv.value
            return
        if what == "reported":
            self.marks.setdefault(where, {})[unquote(rest)] = int(value)
            return
        name = keys.parse_slot_name(rest)
        if name is None:
            return
        if what == "owners":
            self.owners.setdefault(where, {})[name] = value["node"]
            slot = self.slots.get(where, {}).get(name)
            if slot is not None:
                slot.owner = value["node"]
            return
        owner = self.owners.get(where, {}).get(name, "")
        self.slots.setdefault(where, {})[name] = Slot(
            vhost, queue, name[0], name[1], value["last"], value["gen"], value["made_ms"],
            kv.mod_revision, owner,
        )  # fmt: skip

    def _delete(self, key: str) -> None:
        parsed = keys.parse_shared_key(self.cluster, key)
        if parsed is None:
            return
        what, vhost, queue, rest = parsed
        where = (vhost, queue)
        self.values.pop(key, None)
        if what == "queues":
            self.definitions.pop(where, None)
            return
        if what == "bindings":
            self.bindings.get(where, {}).pop(rest, None)
            return
        if what == "reported":
            self.marks.get(where, {}).pop(unquote(rest), None)
            return
        name = keys.parse_slot_name(rest)
        if name is None:
            return
        if what == "owners":
            self.owners.get(where, {}).pop(name, None)
            slot = self.slots.get(where, {}).get(name)
            if slot is not None:
                slot.owner = ""
        else:
            self.slots.get(where, {}).pop(name, None)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self, timeout: float) -> None:
        with trio.move_on_after(timeout):
            await self._changed.wait()

    # -- reading -----------------------------------------------------------------------------
    def free(self, where: QueueName) -> list[Slot]:
        """The queue's unowned slots, oldest first."""
        slots = [s for s in self.slots.get(where, {}).values() if not s.owner]
        slots.sort(key=lambda s: (s.made_ms, s.group, s.first))
        return slots

    def of_queue(self, where: QueueName) -> list[Slot]:
        return sorted(self.slots.get(where, {}).values(), key=lambda s: (s.group, s.first))
