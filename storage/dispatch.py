"""Everything derived from the commit log, and the one code path that applies records to it.

RocketMQ builds consume queues and the index from the log with a dispatcher (its "reput"
service); here the same `StoreState` methods run for a record just appended and for a record
replayed by recovery, so a crash can only change *when* state is derived, never *what*.
The state: consume queues and ack state per durable queue (`Ledger`), metadata, the index.
`snapshot` captures it for a checkpoint; `restore` loads it back.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from herald.storage.checkpoint import Checkpoint, QueueCheckpoint
from herald.storage.commitlog_config import CommitLogConfig
from herald.storage.consume_queue import ConsumeQueue, directory_name, parse_directory_name
from herald.storage.index_file import IndexService
from herald.storage.ledger import Ledger, QueueState
from herald.storage.metadata import MetadataTable
from herald.storage.record import (
    AckRecord,
    AcksRecord,
    DeleteQueueRecord,
    DeliveryRecord,
    MessageRecord,
    MetadataRecord,
    Record,
)

log = logging.getLogger(__name__)


class StoreState:
    """Consume queues, ack state, metadata and index of one store."""

    def __init__(self, root: Path, config: CommitLogConfig) -> None:
        self.cq_root = root / "consumequeue"
        self.config = config
        self.ledger = Ledger(config.segment_size)
        self.metadata = MetadataTable()
        self.index: IndexService | None = None
        if config.index:
            self.index = IndexService(root / "index", config.index_slots, config.index_entries)
        self.retired: list[ConsumeQueue] = []  # of deleted queues, removed by reclaim
        self.unindexed = 0  # messages left out of the index since a file could not be made

    @property
    def queues(self) -> dict[int, QueueState]:
        return self.ledger.queues

    # -- applying records ------------------------------------------------------------------
    def queue_for(self, queue_id: int, generation: int) -> QueueState:
        """The queue's state, created (with a new consume-queue directory) on first use."""
        state = self.ledger.queues.get(queue_id)
        if state is None:
            cq = ConsumeQueue(
                self.cq_root / directory_name(queue_id, generation), self.config.cq_entries_per_file
            )
            state = self.ledger.queues[queue_id] = QueueState(queue_id, cq)
        return state

    def reserve(self, targets: Iterable[tuple[int, int]], generation: int) -> None:
        """Make room in each target's consume queue before a message is written (may block
        briefly to create a file; raises OSError), so dispatching it cannot fail."""
        queues = self.ledger.queues
        for queue_id, _ in targets:
            state = queues.get(queue_id)
            if state is None:
                state = self.queue_for(queue_id, generation)
            cq = state.cq
            if cq.length // cq.per_file not in cq.files:
                cq.reserve()

    def ready_single(self, queue_id: int, offset: int) -> QueueState | None:
        """The queue of a one-target message whose offset grows and whose consume queue has
        room (made here, may raise OSError); None sends it the general way (`check_offsets`,
        `reserve`, `on_message`). The publishing path's common case, looked up once."""
        state = self.ledger.queues.get(queue_id)
        if state is None or offset < state.next_offset:
            return None
        cq = state.cq
        if cq.length // cq.per_file not in cq.files:
            cq.reserve()
        return state

    def on_single(
        self,
        state: QueueState,
        position: int,
        size: int,
        raw_length: int,
        body_size: int,
        offset: int,
        message_id: str | None,
        store_ms: int,
    ) -> None:
        """`on_message` for a queue `ready_single` returned, the record written at `position`."""
        state.next_offset = offset + 1
        state.cq.put(position, size, raw_length, body_size, 1, offset)
        self.ledger.add_message(position, raw_length, 1)
        if message_id is not None and self.index is not None:
            self.index_put(message_id, position, store_ms)

    def check_offsets(self, targets: Sequence[tuple[int, int]]) -> str | None:
        """Why a message cannot go to `targets` (None if it can): each queue's offsets must
        grow, so that its consume queue stays sorted by offset."""
        queues = self.ledger.queues
        if len(targets) == 1:
            queue_id, offset = targets[0]
            state = queues.get(queue_id)
            if state is None or offset >= state.next_offset:
                return None
            return f"queue {queue_id}: offset {offset} is below the next offset {state.next_offset}"
        following: dict[int, int] = {}
        for queue_id, offset in targets:
            need = following.get(queue_id)
            if need is None:
                state = queues.get(queue_id)
                need = state.next_offset if state is not None else 0
            if offset < need:
                return f"queue {queue_id}: offset {offset} is below the next offset {need}"
            following[queue_id] = offset + 1
        return None

    def on_message(
        self,
        position: int,
        size: int,
        raw_length: int,
        body_size: int,
        targets: Sequence[tuple[int, int]],
        message_id: str | None,
        store_ms: int,
    ) -> None:
        if len(targets) == 1:  # the common case, without the lists
            queue_id, offset = targets[0]
            state = self.ready_single(queue_id, offset)
            if state is not None:
                self.on_single(
                    state, position, size, raw_length, body_size, offset, message_id, store_ms
                )
                return
        queues = self.ledger.queues
        accepted = []
        for queue_id, offset in targets:
            state = queues.get(queue_id)
            if state is None:
                state = self.queue_for(queue_id, position)
            if offset < state.next_offset:  # only in a log no append would write
                log.error(
                    "queue %d: message at %d has offset %d below the next offset %d; "
                    "its entry is skipped",
                    queue_id,
                    position,
                    offset,
                    state.next_offset,
                )
                continue
            state.next_offset = offset + 1
            accepted.append((state.cq, offset))
        count = len(accepted)
        for cq, offset in accepted:
            if cq.length // cq.per_file not in cq.files:
                cq.reserve()
            cq.put(position, size, raw_length, body_size, count, offset)
        if count:
            self.ledger.add_message(position, raw_length, count)
        if message_id is not None and self.index is not None:
            self.index_put(message_id, position, store_ms)

    def index_put(self, key: str, position: int, store_ms: int) -> None:
        index = self.index
        assert index is not None
        if index.put(key, position, store_ms):
            return
        number = index.active.number + 1 if index.active is not None else 0
        try:
            log.info("creating index file %d on the publishing path", number)
            index.prepared = index.prepare(number)
        except OSError as exc:
            if not self.unindexed:  # once, not for every message of a full disk
                log.warning("messages not indexed: cannot create an index file: %s", exc)
            self.unindexed += 1
            return
        if self.unindexed:
            log.warning("indexing again; %d message(s) were not indexed", self.unindexed)
            self.unindexed = 0
        index.put(key, position, store_ms)

    def find_live(self, queue_id: int, offset: int) -> tuple[QueueState, int] | None:
        """The queue and entry index of the live entry (queue_id, offset), if there is one."""
        state = self.ledger.queues.get(queue_id)
        if state is None:
            return None
        index = state.find(offset)
        return None if index is None else (state, index)

    def on_ack(self, queue_id: int, offset: int) -> bool:
        state = self.ledger.queues.get(queue_id)
        return state is not None and self.ledger.drop(state, offset)

    def on_delivery(self, queue_id: int, offset: int, count: int) -> None:
        found = self.find_live(queue_id, offset)
        if found is not None:
            counts = found[0].counts
            if count:
                counts[offset] = count
            else:
                counts.pop(offset, None)

    def on_delete_queue(self, queue_id: int) -> None:
        state = self.ledger.remove_queue(queue_id)
        if state is not None:
            self.retired.append(state.cq)

    def apply(self, record: Record) -> None:
        """Replay one record read back from the log."""
        if isinstance(record, MessageRecord):
            self.on_message(
                record.position,
                record.size,
                len(record.raw),
                record.body_size,
                record.targets,
                record.message_id,
                record.store_ms,
            )
        elif isinstance(record, AcksRecord):
            for offset in record.queue_offsets:
                self.on_ack(record.queue_id, offset)
        elif isinstance(record, AckRecord):
            self.on_ack(record.queue_id, record.queue_offset)
        elif isinstance(record, DeliveryRecord):
            self.on_delivery(record.queue_id, record.queue_offset, record.count)
        elif isinstance(record, MetadataRecord):
            self.metadata.apply(record.kind, record.key, record.value_json)
        elif isinstance(record, DeleteQueueRecord):
            self.on_delete_queue(record.queue_id)

    # -- checkpoints -----------------------------------------------------------------------
    def snapshot(self, log_end: int, store_ms: int) -> Checkpoint:
        """The state as of `log_end` (call it in the Trio thread, between two records)."""
        index = self.index.active if self.index is not None else None
        return Checkpoint(
            segment_size=self.config.segment_size,
            log_end=log_end,
            store_ms=store_ms,
            queues={
                queue_id: QueueCheckpoint(
                    directory=state.cq.name,
                    length=state.cq.length,
                    low=state.low,
                    acked=tuple(sorted(state.acked)),
                    counts=dict(state.counts),
                    next_offset=state.next_offset,
                )
                for queue_id, state in self.ledger.queues.items()
            },
            totals=self.ledger.totals(),
            metadata=self.metadata.snapshot(),
            index_file=index.number if index is not None else None,
            index_count=index.count if index is not None else 0,
        )

    def restore(self, checkpoint: Checkpoint | None, keep: set[str]) -> None:
        """Load the state a checkpoint describes (blocking; the log must be loaded).

        Consume-queue directories the checkpoint does not use and `keep` (those of the
        checkpoint before it) does not name are removed: they hold entries recovery rebuilds.
        """
        self.cq_root.mkdir(parents=True, exist_ok=True)
        queues = checkpoint.queues if checkpoint is not None else {}
        used = {c.directory for c in queues.values()}
        for path in self.cq_root.iterdir():
            if path.name not in used | keep or parse_directory_name(path.name) is None:
                shutil.rmtree(path, ignore_errors=True)
        if checkpoint is None:
            return
        self.metadata = MetadataTable(checkpoint.metadata)
        per_file = self.config.cq_entries_per_file
        for queue_id, saved in queues.items():
            cq = ConsumeQueue.load(self.cq_root / saved.directory, per_file, saved.length)
            state = QueueState(
                queue_id, cq, saved.low, set(saved.acked), dict(saved.counts), saved.next_offset
            )
            self.ledger.queues[queue_id] = state
        self.ledger.load_totals(checkpoint.totals)

    def release_pages(self) -> None:
        """Unmap the consume-queue and index pages appends and lookups mapped in (they stay
        in the page cache): the store's files do not count in the broker's RSS."""
        for state in self.ledger.queues.values():
            state.cq.trim()
        if self.index is not None:
            for index_file in self.index.files:
                index_file.file.release()

    def close(self) -> None:
        for state in self.ledger.queues.values():
            state.cq.close()
        for cq in self.retired:
            cq.close()
        if self.index is not None:
            self.index.close()
