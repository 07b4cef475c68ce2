"""`Reporter`: an origin turns its stored offsets into slots (CLUSTER.md §5 "Report").

WSO2's publishers hand their last message id to the slot manager every `windowSize` messages
or after a timeout; here each master keeps, per shared queue, the range of offsets stored
since its last report and makes it a slot once it holds `slot_window` messages or
`slot_timeout_ms` passed since its first, **and** the store says those records are durable
(flushed, and in sync mode on every sync-set slave): a slot never names a message a failover
could lose. One txn per tick carries every due queue.

`recover` runs once per queue when a node becomes master and every `cluster.sweep_interval_s`
(60 s) after (the orphan sweep): live offsets above the origin's mark were stored but never
reported (the old master died first), so they become slots; live offsets at or below it that
no slot covers lost their slot's acks with a failed-over origin, so they become recovery
slots, delivered flagged redelivered. The queue's next offset moves past the mark: offsets
are never reused.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs
import trio

from herald.cluster.etcd_types import EtcdError
from herald.cluster.shared.slots import NewSlot

if TYPE_CHECKING:
    from herald.cluster.shared.queue import SharedQueue
    from herald.cluster.shared.runtime import SharedRuntime

log = logging.getLogger("herald.cluster.shared")

RETRY_S = 0.5


@attrs.define
class PendingRange:
    queue: SharedQueue
    first: int
    last: int
    ticket: int
    since: float


def uncovered(first: int, last: int, covered: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of [first, last] outside every interval of `covered` (sorted)."""
    out: list[tuple[int, int]] = []
    at = first
    for low, high in sorted(covered):
        if high < at:
            continue
        if low > last:
            break
        if low > at:
            out.append((at, min(last, low - 1)))
        at = max(at, high + 1)
        if at > last:
            break
    if at <= last:
        out.append((at, last))
    return out


class Reporter:
    def __init__(self, runtime: SharedRuntime) -> None:
        self.runtime = runtime
        self.pending: dict[tuple[str, str], PendingRange] = {}
        self.made = 0
        self.recovered = 0
        self.sweeps = 0
        self._wake = trio.Event()
        self._lock = trio.Lock()

    def note(self, queue: SharedQueue, offset: int, ticket: int) -> None:
        """`offset` of `queue` was stored with durability `ticket` (hot path: no await)."""
        pending = self.pending.get(queue.key)
        if pending is None:
            now = self.runtime.now()
            self.pending[queue.key] = PendingRange(queue, offset, offset, ticket, now)
            self._wake.set()
            return
        pending.last = offset
        pending.ticket = ticket
        if offset - pending.first + 1 >= self.runtime.config.slot_window:
            self._wake.set()

    async def run(self) -> None:
        config = self.runtime.config
        timeout = config.slot_timeout_ms / 1000
        while True:
            if not self.pending:
                await self._wake.wait()
            self._wake = trio.Event()
            now = self.runtime.now()
            due = [
                p for p in self.pending.values()
                if p.last - p.first + 1 >= config.slot_window or now - p.since >= timeout
            ]  # fmt: skip
            if not due:
                soonest = min((p.since for p in self.pending.values()), default=now) + timeout
                with trio.move_on_at(soonest):
                    await self._wake.wait()
                continue
            async with self._lock:  # the sweep never sees these neither pending nor made
                for p in due:
                    del self.pending[p.queue.key]
                await self._report(due)

    async def _report(self, due: list[PendingRange]) -> None:
        store = self.runtime.store
        await store.wait_durable(max(p.ticket for p in due))
        slots = [
            NewSlot(p.queue.vhost.name, p.queue.name, p.first, p.last)
            for p in due
            if not p.queue.deleted
        ]
        while True:
            try:
                await self.runtime.table.make(slots)
                break
            except (EtcdError, OSError) as exc:
                log.info("shared queues: slots not made yet (%s); trying again", exc)
                await trio.sleep(RETRY_S)
        self.made += len(slots)

    async def sweep_every(self, period: float) -> None:
        """The orphan sweep again every `period` seconds, for every queue."""
        while True:
            await trio.sleep(period)
            for queue in list(self.runtime.queues.values()):
                if queue.deleted:
                    continue
                try:
                    await self.recover(queue)
                except (EtcdError, OSError) as exc:
                    log.info("shared queue %s: sweep put off (%s)", queue.name, exc)

    async def recover(self, queue: SharedQueue) -> None:
        """The orphan sweep for one queue: at promotion, then every `sweep_interval_s`.

        Live ranges first, then this origin's slots as etcd has them now, under the lock the
        reporter holds from taking a range out of `pending` to making its slot: an offset is
        then live and covered by a slot or pending, or it is an orphan. A slot deleted
        between the two reads (its acks durable meanwhile) can only make a duplicate."""
        runtime = self.runtime
        assert queue.store_id is not None
        vhost, name = queue.key
        async with self._lock:
            window = runtime.config.slot_window
            live = list(runtime.store.queue_ranges(queue.store_id, window))
            mark = await runtime.table.marks(vhost, name)
            queue.next_offset = max(queue.next_offset, mark + 1)
            covered = await runtime.table.my_ranges(vhost, name)
            pending = self.pending.get(queue.key)
            if pending is not None:  # stored since; the reporter's
                covered.append((pending.first, queue.next_offset))
            slots: list[NewSlot] = []
            for stored in live:
                for low, high in uncovered(stored.first_offset, stored.last_offset, covered):
                    if low <= mark:  # lost its slot's acks (a failed-over origin): redelivered
                        slots.append(NewSlot(vhost, name, low, min(high, mark), gen=1))
                    if high > mark:  # stored, never reported (the origin died first)
                        slots.append(NewSlot(vhost, name, max(low, mark + 1), high))
            self.sweeps += 1
            if slots:
                self.recovered += len(slots)
                log.info("shared queue %s: %d slot(s) made by the sweep", name, len(slots))
                await runtime.table.make(slots)
