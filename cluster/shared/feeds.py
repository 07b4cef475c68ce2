"""`Feeds`: this node as a slot holder (CLUSTER.md §5 "Acquire", "Read", "Ack", "Delete").

One task per shared queue with local interest (`SharedQueue.wants_slots`) keeps it fed: while
it holds fewer than `slots_per_queue` slots and its ready count is below half a slot, it
acquires the oldest free slot (its own group's first, unless a remote one has waited a
second longer), reads the slot's live messages (from its own log, or from the origin group's
master over the node link) and feeds them to the queue. A slot acquired before (gen > 1)
comes back flagged redelivered.

Settling a fed entry acks it at its origin: at once in the local log for a local origin, in
batched ACKS for a remote one. A slot whose every message is settled, and whose acks the
origin has made durable, is deleted (`SlotTable.done`). The last consumer leaving gives the
node's slots back (`release`) once their delivered messages are settled; a slot whose origin
cannot be read is released and that origin left alone for `ORIGIN_BACKOFF_S`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs
import trio

from herald.cluster.etcd_types import EtcdError
from herald.cluster.peer import PeerGone
from herald.cluster.shared.link import LinkFailed
from herald.cluster.shared.slots import Slot

if TYPE_CHECKING:
    from herald.cluster.shared.queue import SharedQueue
    from herald.cluster.shared.runtime import SharedRuntime
    from herald.core.message import Message
    from herald.core.queue_entry import QueueEntry

log = logging.getLogger("herald.cluster.shared")

ORIGIN_BACKOFF_S = 2.0
STALE_MS = 1000
"""A remote slot made this much before this node's oldest own slot is taken first: an origin
whose node has no consumers is not starved (CLUSTER.md §5 "Acquire")."""
IDLE_S = 1.0
"""A feed looks again at least this often (a slot may have come free unseen)."""
ACK_BATCH_S = 0.005
MAX_READ_BYTES = 1 << 19
"""Per READ: one ENTRIES frame's worth (link.ENTRIES_BUDGET); a slot is read in parts."""


@attrs.define(eq=False)
class HeldSlot:
    slot: Slot
    entries: dict[int, int] = attrs.field(factory=dict)
    """Fed entry offset (the queue's sequence) -> origin offset, until settled."""
    to_ack: list[int] = attrs.field(factory=list)
    """Origin offsets settled here, not yet sent to a remote origin."""
    in_flight: int = 0
    """ACKS sent, not yet ACKED."""
    local_acks: bool = False
    """Acked in this node's own log (a local origin): made durable before `done`."""
    gone: bool = False


class Feed:
    """One shared queue's slots on this node."""

    def __init__(self, queue: SharedQueue) -> None:
        self.queue = queue
        self.held: dict[tuple[str, int], HeldSlot] = {}
        self.by_offset: dict[int, HeldSlot] = {}
        self.wake = trio.Event()
        self.delivered = 0
        self.from_links = 0  # of them, read from another group's master over the node link


class Feeds:
    def __init__(self, runtime: SharedRuntime) -> None:
        self.runtime = runtime
        self.feeds: dict[tuple[str, str], Feed] = {}
        self.away: dict[str, float] = {}  # origin group -> until when it is left alone
        self._acks_due = trio.Event()
        self._nursery: trio.Nursery | None = None

    # -- from the queue (synchronous, on its hot path) ------------------------------------------
    def wake(self, queue: SharedQueue) -> None:
        feed = self.feeds.get(queue.key)
        if feed is None or feed.queue is not queue:  # new, or declared again after a delete
            feed = self.feeds[queue.key] = Feed(queue)
            if self._nursery is not None:
                self._nursery.start_soon(self._run_feed, feed)
        feed.wake.set()

    def slots_changed(self, where: tuple[str, str]) -> None:
        """A slot of the queue was made or came free (the runtime's watch): look now, not
        at the next idle round."""
        feed = self.feeds.get(where)
        if feed is not None:
            feed.wake.set()

    def settled(self, queue: SharedQueue, entry: QueueEntry) -> None:
        feed = self.feeds.get(queue.key)
        if feed is None:
            return
        held = feed.by_offset.pop(entry.offset, None)
        if held is None:
            return
        origin_offset = held.entries.pop(entry.offset)
        feed.delivered += 1
        if held.slot.group != self.runtime.group:
            feed.from_links += 1
        if held.slot.group == self.runtime.group:
            store = self.runtime.store
            assert queue.store_id is not None
            store.ack(queue.store_id, origin_offset)
            held.local_acks = True
        else:
            held.to_ack.append(origin_offset)
        self._acks_due.set()
        if queue.ready.count < self.runtime.config.slot_window // 2:
            feed.wake.set()

    def requeued(self, queue: SharedQueue, entry: QueueEntry) -> None:
        feed = self.feeds.get(queue.key)
        held = feed.by_offset.get(entry.offset) if feed is not None else None
        if held is not None and held.slot.group == self.runtime.group:
            assert queue.store_id is not None
            origin_offset = held.entries[entry.offset]
            self.runtime.store.note_delivery(queue.store_id, origin_offset, entry.delivery_count)

    # -- tasks -----------------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for feed in self.feeds.values():
                nursery.start_soon(self._run_feed, feed)
            nursery.start_soon(self._ack_loop)
            task_status.started()

    async def _run_feed(self, feed: Feed) -> None:
        runtime = self.runtime
        while not feed.queue.deleted:
            with trio.move_on_after(IDLE_S):
                await feed.wake.wait()
            feed.wake = trio.Event()
            try:
                await self._settle_finished(feed)
                if feed.queue.wants_slots():
                    await self._fill(feed)
                else:
                    await self._give_back(feed)
            except (EtcdError, OSError) as exc:
                log.info("shared queue %s: %s; trying again", feed.queue.name, exc)
                await trio.sleep(0.2)
            if feed.queue.deleted:
                break
            if not feed.held and not feed.queue.wants_slots():
                await runtime.index.wait_changed(IDLE_S)
        if self.feeds.get(feed.queue.key) is feed:
            del self.feeds[feed.queue.key]

    async def _fill(self, feed: Feed) -> None:
        runtime, queue = self.runtime, feed.queue
        window = runtime.config.slot_window
        while (
            len(feed.held) < runtime.config.slots_per_queue
            and queue.ready.count < max(1, window // 2)
            and queue.wants_slots()
        ):
            slot = self._pick(feed)
            if slot is None:
                return
            if not await runtime.table.acquire(slot, runtime.lease()):
                await trio.sleep(0)
                continue
            held = HeldSlot(slot)
            feed.held[(slot.group, slot.first)] = held
            try:
                await self._read(feed, held)
            except (LinkFailed, PeerGone, OSError) as exc:
                log.info("shared queue %s: slot %s unreadable (%s)", queue.name, slot.name, exc)
                self.away[slot.group] = runtime.now() + ORIGIN_BACKOFF_S
                await self._drop(feed, held, release=True)
                continue
            if not held.entries:
                await self._finish(feed, held)

    def _pick(self, feed: Feed) -> Slot | None:
        runtime = self.runtime
        now = runtime.now()
        free = [
            s for s in runtime.index.free(feed.queue.key)
            if (s.group, s.first) not in feed.held and self.away.get(s.group, 0) <= now
        ]  # fmt: skip
        local = [s for s in free if s.group == runtime.group]
        remote = [s for s in free if s.group != runtime.group]
        locality = runtime.config.slot_locality_ms
        if locality:  # another group's slot once its own consumers left it waiting
            wall = runtime.wall_ms()
            remote = [s for s in remote if wall - s.made_ms >= locality]
        if local and remote:  # its own log first (no link), unless a remote slot waits longer
            older = remote[0].made_ms + STALE_MS < local[0].made_ms
            return remote[0] if older else local[0]
        candidates = local or remote
        return candidates[0] if candidates else None

    async def _read(self, feed: Feed, held: HeldSlot) -> None:
        runtime, queue, slot = self.runtime, feed.queue, held.slot
        redelivered = slot.gen > 1
        first = slot.first
        while first <= slot.last:
            found: list[tuple[int, Message, int]]
            if slot.group == runtime.group:
                assert queue.store_id is not None
                found = [
                    (e.queue_offset, e.message, e.delivery_count)
                    for e in runtime.store.read_queue(
                        queue.store_id, first, slot.last, slot.last - first + 1
                    )
                ]
                more = False
            else:
                found, more = await runtime.links.read(
                    slot.group, queue.vhost.name, queue.name, first, slot.last, MAX_READ_BYTES
                )
            if queue.deleted:
                return
            for origin_offset, message, count in found:
                if redelivered and count < 1:
                    count = 1
                entry = queue.feed(message, count)
                held.entries[entry.offset] = origin_offset
                feed.by_offset[entry.offset] = held
            if not more or not found:
                break
            first = found[-1][0] + 1
        queue.dispatch()

    async def _ack_loop(self) -> None:
        while True:
            await self._acks_due.wait()
            self._acks_due = trio.Event()
            await trio.sleep(ACK_BATCH_S)
            async with trio.open_nursery() as nursery:
                for feed in list(self.feeds.values()):
                    for held in list(feed.held.values()):
                        if held.to_ack:
                            nursery.start_soon(self._send_acks, feed, held)
                        elif not held.entries and not held.in_flight:
                            feed.wake.set()

    async def _send_acks(self, feed: Feed, held: HeldSlot) -> None:
        offsets, held.to_ack = held.to_ack, []
        held.in_flight += 1
        queue = feed.queue
        try:
            await self.runtime.links.ack(held.slot.group, queue.vhost.name, queue.name, offsets)
        except (LinkFailed, PeerGone, OSError) as exc:
            log.info("shared queue %s: acks to %s wait (%s)", queue.name, held.slot.group, exc)
            held.to_ack[:0] = offsets  # acks are idempotent: send them again later
            await trio.sleep(0.2)
            self._acks_due.set()
        finally:
            held.in_flight -= 1
        feed.wake.set()

    # -- finishing and giving back ---------------------------------------------------------------
    async def _settle_finished(self, feed: Feed) -> None:
        for held in list(feed.held.values()):
            if not held.entries and not held.to_ack and not held.in_flight:
                await self._finish(feed, held)

    async def _finish(self, feed: Feed, held: HeldSlot) -> None:
        """Every message of the slot is settled: once the acks are durable at the origin
        (local: the log's group commit and replication; remote: ACKED), delete the slot."""
        if held.local_acks:
            await self.runtime.acks_durable()
        feed.held.pop((held.slot.group, held.slot.first), None)
        if not await self.runtime.table.done(held.slot):
            log.info("shared queue %s: slot %s was taken over", feed.queue.name, held.slot.name)

    async def _give_back(self, feed: Feed) -> None:
        """No consumer here any more: release the slots whose delivered messages are all
        settled; their ready messages go back to the origin's slot for another node."""
        for held in list(feed.held.values()):
            ready = [e for e in feed.queue.ready if feed.by_offset.get(e.offset) is held]
            if len(ready) == len(held.entries) and not held.to_ack and not held.in_flight:
                await self._drop(feed, held, release=True, ready=ready)

    async def _drop(
        self, feed: Feed, held: HeldSlot, *, release: bool, ready: list[QueueEntry] | None = None
    ) -> None:
        if ready is None:
            ready = [e for e in feed.queue.ready if feed.by_offset.get(e.offset) is held]
        feed.queue.drop_ready(ready)
        for offset in held.entries:
            feed.by_offset.pop(offset, None)
        held.entries.clear()
        feed.held.pop((held.slot.group, held.slot.first), None)
        if held.local_acks:
            await self.runtime.acks_durable()
        if release:
            await self.runtime.table.release(held.slot)

    async def release_all(self) -> None:
        """The node stops being master: give back every slot it holds (best effort; its lease
        ending would free them too)."""
        for feed in self.feeds.values():
            for held in list(feed.held.values()):
                try:
                    await self.runtime.table.release(held.slot)
                except (EtcdError, OSError):
                    return
            feed.held.clear()
