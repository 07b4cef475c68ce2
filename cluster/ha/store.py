"""`ReplicatedCommitLogStore`: the master's store, a commit-log store whose durability is the
replication gate's (CLUSTER.md §3.1).

It is a `CommitLogStore` (the kernel, the commit-log plugin's flusher and disk monitor, the
management API's message browser all see the store they know) with three differences:

- `durable_ticket` = min(the local flush, `gate.confirmed`), and `wait_durable` waits for the
  local group commit first (unchanged), reports it to the gate, then waits for the gate: so
  every protocol's confirm path (AMQP basic.ack, MQTT PUBACK, STOMP RECEIPT) waits for the
  sync set without a line of protocol code knowing;
- `open` appends the master's epoch to `store/epochs` at the log's end, before anything can
  be written in that epoch (the broker's own recovery writes after `open` returns);
- with `mark_recovered_redelivered`, every entry this master found in its log at open
  comes back with a delivery count of at least 1, so it is delivered flagged redelivered:
  it may have been delivered by the previous master without the ack reaching this log
  (RabbitMQ flags every message it recovers the same way);
- once the node is demoted (`gate.refuse`), a publish raises the gate's `NotMaster`, whose
  text names the new master: a publisher is told where to go instead of being confirmed by a
  node whose tail the new master will never have. Other records (acks, a closing MQTT
  session's cleanup, as connections close) still reach the local log: nothing confirms them,
  and the node cuts them when it follows the new master.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from herald.core.store import EntryFactory, StoredEntry
from herald.storage.commitlog import CommitLogStore

if TYPE_CHECKING:
    from herald.cluster.ha.epochs import EpochFile
    from herald.cluster.ha.gate import ReplicationGate
    from herald.cluster.shared.runtime import SharedRuntime
    from herald.core.message import CodecRegistry, Message
    from herald.core.store import QueueTarget
    from herald.storage.commitlog_config import CommitLogConfig


class ReplicatedCommitLogStore(CommitLogStore):
    """A master's commit-log store; `gate` decides what is confirmed, `epochs` is the node's
    epoch history and `epoch` the term this master writes in."""

    def __init__(
        self,
        root: Path,
        config: CommitLogConfig | None,
        *,
        gate: ReplicationGate,
        epochs: EpochFile,
        epoch: int,
        mark_recovered_redelivered: bool = False,
    ) -> None:
        super().__init__(root, config)
        self.shared: SharedRuntime | None = None
        """This term's shared queues (cluster/shared/): how a `SharedQueue` finds them."""
        self.gate = gate
        self.epochs = epochs
        self.epoch = epoch
        self.mark_recovered_redelivered = mark_recovered_redelivered
        self._recovered: dict[int, int] = {}  # queue id -> its next offset at open

    async def open(self, codecs: CodecRegistry) -> None:
        """Open (recovering as usual), then record this master's epoch at the log's end."""
        await super().open(codecs)
        await trio.to_thread.run_sync(self.epochs.reload)  # a snapshot swapped in at open
        end = self.log.write_offset
        last = self.epochs.last
        if last is None or last.epoch != self.epoch:
            await trio.to_thread.run_sync(self.epochs.truncate_after, end)
            await trio.to_thread.run_sync(self.epochs.append, self.epoch, end)
        self.gate.local_flushed(super().durable_ticket)
        if self.mark_recovered_redelivered:
            self._recovered = {q: self.queue_next_offset(q) for q in self.queue_ids()}

    # -- entries found at open may have been delivered ---------------------------------------
    def recover_queue(self, queue_id: int) -> Iterator[StoredEntry]:
        end = self._recovered.get(queue_id, 0)
        for entry in super().recover_queue(queue_id):
            if entry.queue_offset < end and not entry.delivery_count:
                entry.delivery_count = 1
            yield entry

    def read_queue(
        self,
        queue_id: int,
        first_offset: int,
        last_offset: int,
        limit: int,
        make: EntryFactory[Any] = StoredEntry,
    ) -> list[Any]:
        end = self._recovered.get(queue_id, 0)
        if first_offset >= end:
            return super().read_queue(queue_id, first_offset, last_offset, limit, make)

        def flagged(offset: int, message: Message, count: int) -> Any:
            return make(offset, message, count or int(offset < end))

        return super().read_queue(queue_id, first_offset, last_offset, limit, flagged)

    # -- durability is the gate's ------------------------------------------------------------
    @property
    def durable_ticket(self) -> int:
        return min(super().durable_ticket, self.gate.confirmed)

    @property
    def local_durable(self) -> int:
        """What this node alone has fsynced (the HA master's heartbeats and lag use it)."""
        return super().durable_ticket

    async def wait_durable(self, ticket: int) -> None:
        await super().wait_durable(ticket)
        self.gate.local_flushed(super().durable_ticket)
        await self.gate.wait_confirmed(ticket)

    # -- a demoted master writes nothing -----------------------------------------------------
    def _refuse_if_demoted(self) -> None:
        refusal = self.gate.refusal
        if refusal is not None:
            raise refusal

    def append(self, message: Message, targets: Sequence[QueueTarget]) -> int:
        self._refuse_if_demoted()
        return super().append(message, targets)
