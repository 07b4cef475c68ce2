"""The master's confirm rule (CLUSTER.md §3.1): when a stored record may be confirmed.

A ticket is a record's end offset in the log, so "slave acked ≥ ticket" is RocketMQ's
`push2SlaveMaxOffset ≥ nextOffset`. `ReplicationGate` holds what the HA master feeds it (the
local flushed ticket, each slave's flushed ack, the sync set, the fence) and releases waiting
publishes once `confirmed` reaches their ticket:

- async mode: `confirmed` = the local flush (lag is the HA master's to measure);
- sync mode: `confirmed` = min(local flush, every sync-set slave's ack), and only while the
  sync set, master included, has at least `min_in_sync_replicas` members; otherwise frozen;
- fenced (lease guard expired, §3.4): frozen in both modes.

Frozen means nothing beyond what was already confirmed is released; `confirmed` never goes
down. A waiter not released within `sync_timeout` gets `ReplicationTimeout`: the record stays
stored (a nack, not a loss). The gate has no sockets and no tasks of its own: all waiting
publishes share one heap of (ticket, Event), woken in ticket order.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal

import trio

from herald.core.errors import NotMaster, ReplicationTimeout

if TYPE_CHECKING:
    pass

__all__ = ["AckAboveEnd", "ReplicationGate"]

Mode = Literal["sync", "async"]


class AckAboveEnd(ValueError):
    """A slave acked bytes past the master's log end (RocketMQ #3015): its log diverged (an
    old epoch's tail, a wrong master). Counting the ack could confirm records the slave does
    not hold, so it is refused; the HA master should drop that slave's connection."""


class _Waiter:
    """One waiting publish. `dead`: it timed out or was cancelled; it is skipped when popped."""

    __slots__ = ("dead", "event", "ticket")

    def __init__(self, ticket: int) -> None:
        self.ticket = ticket
        self.event = trio.Event()
        self.dead = False


class ReplicationGate:
    """When a publish may be confirmed on a master; fed by the HA master, awaited by the store.

    `log_end()` is the master's own log end (its write offset, not its flush: a slave may
    flush bytes before the master does), read only to vet slave acks.
    """

    def __init__(
        self,
        node: str,
        *,
        log_end: Callable[[], int],
        mode: Mode = "sync",
        min_in_sync_replicas: int = 2,
        sync_timeout: float = 3.0,
        sync_set: Iterable[str] = (),
        local_flushed: int = 0,
        confirmed: int = 0,
    ) -> None:
        if mode not in ("sync", "async"):
            raise ValueError(f"replication mode must be 'sync' or 'async', not {mode!r}")
        if min_in_sync_replicas < 1:
            raise ValueError(f"min_in_sync_replicas must be ≥ 1, not {min_in_sync_replicas}")
        if sync_timeout < 0:
            raise ValueError(f"sync_timeout must be ≥ 0, not {sync_timeout}")
        self.node = node
        self.mode: Mode = mode
        self.min_in_sync_replicas = min_in_sync_replicas
        self.sync_timeout = sync_timeout
        self._log_end = log_end
        self._local = local_flushed
        self._acked: dict[str, int] = {}
        self._slaves: frozenset[str] = frozenset(sync_set) - {node}
        self._fenced = False
        self._refusal: NotMaster | None = None
        # Not the local flush: a new master's log may end with records the old one never
        # confirmed. The caller passes what it knows was confirmed (0 if unsure); the rule
        # then raises it as acks come.
        self._confirmed = min(confirmed, local_flushed)
        self._heap: list[tuple[int, int, _Waiter]] = []
        self._order = itertools.count()  # ties on a ticket: first come, first woken
        self._dead = 0  # timed-out waiters still in the heap
        self._update()

    # -- what it says ------------------------------------------------------------------------
    @property
    def confirmed(self) -> int:
        """Every ticket at or below this may be confirmed to its publisher. Never decreases."""
        return self._confirmed

    @property
    def fenced(self) -> bool:
        return self._fenced

    @property
    def sync_set(self) -> frozenset[str]:
        """The sync set the gate waits for, the master included."""
        return self._slaves | {self.node}

    @property
    def in_sync(self) -> bool:
        """Whether the sync set is large enough for sync mode to release anything."""
        return len(self._slaves) + 1 >= self.min_in_sync_replicas

    @property
    def local(self) -> int:
        """The master's own flushed ticket, as last reported."""
        return self._local

    def acked(self, node: str) -> int | None:
        """The last flushed ack of `node` (in the sync set or not), None if it never acked.

        The HA master reads it to decide expansion: a slave joins once `acked ≥ confirmed`.
        """
        return self._acked.get(node)

    @property
    def waiting(self) -> int:
        """How many publishes are waiting now."""
        return len(self._heap) - self._dead

    # -- what it is told ---------------------------------------------------------------------
    def local_flushed(self, ticket: int) -> None:
        """The master's log is flushed up to `ticket` (stale, lower reports are ignored)."""
        if ticket > self._local:
            self._local = ticket
            self._update()

    def slave_acked(self, node: str, ticket: int) -> None:
        """`node` has flushed the master's log up to `ticket`.

        Raises `AckAboveEnd` past the master's end. The latest ack is kept even if lower (a
        truncated slave holds less); `confirmed` still never goes down.
        """
        if node == self.node:
            raise ValueError(f"{node} is this master; report its flush with local_flushed")
        end = self._log_end()
        if ticket > end:
            raise AckAboveEnd(f"{node} acked {ticket}, past this master's log end {end}")
        self._acked[node] = ticket
        if node in self._slaves:
            self._update()

    def set_sync_set(self, members: Iterable[str]) -> None:
        """The sync set is now `members` (the master counts whether listed or not).

        Contract (CLUSTER.md §3.2): call this only after etcd stores the new set. A slave
        dropped here before etcd dropped it could be elected without the records it lets us
        confirm; and a slave joins only once its ack ≥ `confirmed`, so adding it never needs
        `confirmed` to go down (it does not: the gate keeps the higher value).
        """
        self._slaves = frozenset(members) - {self.node}
        self._update()

    def fence(self) -> None:
        """Freeze `confirmed`: the lease guard expired, another master may already exist.
        Waiters keep waiting and their timeouts keep running."""
        self._fenced = True

    def refuse(self, refusal: NotMaster) -> None:
        """This node stopped being master (demoted): every waiter, now and later, gets
        `refusal`, whose text names the new master; nothing more is ever confirmed here."""
        self._refusal = refusal
        self._fenced = True
        for _ticket, _order, waiter in self._heap:
            waiter.event.set()
        self._heap.clear()
        self._dead = 0

    @property
    def refusal(self) -> NotMaster | None:
        """Set once the node was demoted (`refuse`)."""
        return self._refusal

    def unfence(self) -> None:
        """The lease is valid again: release whatever the acks now allow."""
        if self._refusal is not None:
            return
        self._fenced = False
        self._update()

    # -- waiting -----------------------------------------------------------------------------
    async def wait_confirmed(self, ticket: int) -> None:
        """Return once `confirmed ≥ ticket`; raise `ReplicationTimeout` after `sync_timeout`.

        The record stays stored either way: a timeout is a nack, not a loss.
        """
        if ticket <= self._confirmed:
            await trio.lowlevel.checkpoint()
            return
        if self._refusal is not None:
            raise self._refusal
        waiter = _Waiter(ticket)
        heapq.heappush(self._heap, (ticket, next(self._order), waiter))
        try:
            with trio.move_on_after(self.sync_timeout):
                await waiter.event.wait()
        finally:
            if not waiter.event.is_set():  # timed out or cancelled: leave it for the sweep
                waiter.dead = True
                self._dead += 1
                if self._dead > 64 and self._dead * 2 > len(self._heap):
                    self._sweep()
        if self._refusal is not None and ticket > self._confirmed:
            raise self._refusal
        if not waiter.event.is_set():
            raise ReplicationTimeout(
                f"replication timeout: record {ticket} not confirmed by the sync replicas"
                f" within {self.sync_timeout:g} s (confirmed {self._confirmed}); the message"
                " is stored on the master and may still be delivered"
            )

    # -- inside ------------------------------------------------------------------------------
    def _target(self) -> int | None:
        """What the rule allows now, or None when frozen."""
        if self._fenced:
            return None
        if self.mode == "async":
            return self._local
        if not self.in_sync:
            return None
        acked = self._acked
        return min([self._local, *(acked.get(slave, 0) for slave in self._slaves)])

    def _update(self) -> None:
        target = self._target()
        if target is None or target <= self._confirmed:
            return
        self._confirmed = target
        heap = self._heap
        while heap and heap[0][0] <= target:
            waiter = heapq.heappop(heap)[2]
            if waiter.dead:
                self._dead -= 1
            else:
                waiter.event.set()

    def _sweep(self) -> None:
        """Drop timed-out waiters while the gate is frozen, so a long freeze under load keeps
        the heap at the live waiters, not at every publish since the freeze."""
        self._heap = [entry for entry in self._heap if not entry[2].dead]
        heapq.heapify(self._heap)
        self._dead = 0
