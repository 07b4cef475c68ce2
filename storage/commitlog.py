"""The commit-log store: RocketMQ's CommitLog + ConsumeQueue + IndexFile, adapted to queues
with acks (see docs/storage.md for the formats and the reasoning).

One append-only log (mapped_file.py, record.py) takes every change: messages, acks, delivery
counts, queue deletions, metadata. A ticket is the log's end offset after a record; the log is
durable up to `durable_ticket`, moved by group-commit fsync rounds (flush.py). Consume queues,
ack state, metadata and the index are derived from the log (dispatch.py), saved at checkpoints
(checkpoint.py) and rebuilt from the log after a crash (recovery.py).

Everything here runs in the Trio thread and does not block: appends are memory copies into
mapped files; fsyncs, checkpoints, file creation and deletion run in worker threads.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from herald.core.errors import InternalError, ResourceError
from herald.core.store import (
    EntryFactory,
    MetadataValue,
    QueueRange,
    QueueTarget,
    StoredEntry,
    StoreStatistics,
)
from herald.storage import record as rec
from herald.storage.checkpoint import (
    DataDirLock,
    abort_marker_exists,
    clear_abort_marker,
    set_abort_marker,
)
from herald.storage.commitlog_config import CommitLogConfig
from herald.storage.disk_monitor import disk_free_bytes
from herald.storage.dispatch import StoreState
from herald.storage.flush import GroupCommit
from herald.storage.housekeeping import Housekeeper
from herald.storage.mapped_file import (
    NO_SPACE,
    PWRITE_FROM,
    MappedFile,
    MappedFileQueue,
    Writer,
    file_name,
    write_record,
)
from herald.storage.metadata import MetadataTable
from herald.storage.reader import QueueReader
from herald.storage.recovery import RecoveryReport, recover
from herald.storage.resync import finish_swap
from herald.storage.snapshot import Snapshot, open_snapshot, snapshot_files

if TYPE_CHECKING:
    from herald.core.message import CodecRegistry, Message

__all__ = ["CommitLogConfig", "CommitLogStatistics", "CommitLogStore"]

log = logging.getLogger(__name__)

ACKS_PER_RECORD = 4096
"""The most acks kept unlogged, and the most one ACKS record holds (32 KiB of offsets)."""


@attrs.frozen
class CommitLogStatistics:
    """What only this store counts (besides `StoreStatistics`)."""

    flushes: int  # group-commit fsync rounds
    checkpoints: int
    segments: int
    log_start: int
    log_end: int
    durable: int
    disk_alarm: bool


class CommitLogStore:
    """A `herald.core.store.Store` on disk, in `root`."""

    def __init__(self, root: Path, config: CommitLogConfig | None = None) -> None:
        self.root = Path(root)
        self.config = config or CommitLogConfig()
        self.log = MappedFileQueue(self.root / "commitlog", self.config.segment_size)
        self.state = StoreState(self.root, self.config)
        self._lock = DataDirLock(self.root)
        self._codecs: CodecRegistry | None = None
        self._group: GroupCommit | None = None
        self.last_ms = 0
        self._keeper = Housekeeper(self)
        self.disk_alarm = False  # the disk refused a write (see disk_monitor.py)
        self.short_of_space = False  # the disk monitor's alarm is up (housekeeping.py)
        self._refused = trio.Event()  # wakes the disk monitor at a refusal
        self.recovery: RecoveryReport | None = None
        self.reader = QueueReader(self.log, self.state)
        self._acks: dict[int, list[int]] = {}  # acks not logged yet, by queue id
        self._ack_count = 0
        # HA replication (CLUSTER.md §2.2). The listener is told the log's new end after every
        # record, so the master's senders wake without polling (it must not raise); retention
        # keeps every segment ending after the floor, which a slave that is behind streams.
        self.append_listener: Callable[[int], None] | None = None
        self.retain_floor: int | None = None
        # Fault-injection seams: how record bytes reach a segment, and how free disk space is
        # read (tests replace them).
        self._write: Writer = write_record
        self.free_space: Callable[[Path], int] = disk_free_bytes

    # -- lifecycle -------------------------------------------------------------------------
    async def open(self, codecs: CodecRegistry) -> None:
        """Lock the data dir, recover, write a fresh checkpoint, set the abort marker."""
        self._codecs = codecs
        await trio.to_thread.run_sync(self._open_sync)
        keeper = self._keeper
        self._group = GroupCommit(
            keeper.plan, keeper.after_round, self._appended, self.log.write_offset
        )

    def _open_sync(self) -> None:
        finish_swap(self.root)  # a snapshot resync a crash interrupted (resync.py)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            crashed = abort_marker_exists(self.root)
            recovered = recover(self.root, self.log, self.state, crashed)
            self.recovery = recovered.report
            self.last_ms = recovered.store_ms
            snapshot = self.state.snapshot(self.log.write_offset, self.last_ms)
            log_files = self.log.files_between(recovered.report.start, snapshot.log_end)
            self._keeper.flush_derived(log_files)
            self._keeper.open_checkpoint(snapshot, recovered.checkpoint, recovered.previous)
            set_abort_marker(self.root)
        except BaseException:
            self.state.close()
            self.log.close()
            self._lock.release()
            raise

    async def close(self, *, checkpoint: bool = True) -> None:
        """Flush, checkpoint, reclaim, and remove the abort marker (a clean stop).

        `checkpoint=False`: close without a new checkpoint, leaving the abort marker (the next
        open replays from the last checkpoint): an HA slave about to cut its log back keeps
        its older checkpoints below the cut instead of writing one past it."""
        group = self.require_open()
        clean = group.error is None and checkpoint
        try:
            if clean:
                await self.checkpoint()
        except ResourceError:
            clean = False  # the abort marker stays: the next start scans the log
        except BaseException:
            clean = False
            raise
        finally:
            with trio.CancelScope(shield=True):
                await group.wait_idle()
                async with self._keeper.lock:
                    await trio.to_thread.run_sync(self._close_sync, clean)
            self._group = None
            self._codecs = None

    def _close_sync(self, clean: bool) -> None:
        try:
            self.state.close()
            self.log.close()
            if clean:
                clear_abort_marker(self.root)
        finally:
            self._lock.release()

    def require_open(self) -> GroupCommit:
        if self._group is None:
            raise InternalError("the commit-log store is not open")
        return self._group

    # -- writing records -------------------------------------------------------------------
    def _appended(self) -> int:
        return self.log.write_offset

    def _put(self, pending: rec.Pending) -> int:
        """Write one record at the log's end; returns its position. Nothing is changed if it
        fails (ResourceError)."""
        group = self._group
        if group is None or group.error is not None:
            self.require_open().check()
        log_files = self.log
        space = pending.space
        position = log_files.write_offset
        file = log_files.files.get(position - position % log_files.size)
        if file is None or position - file.start + space > file.size:  # roll to a new segment
            try:
                position = log_files.place(space, self._write, self.create_segment)
            except ValueError as exc:
                raise ResourceError(f"message too large for the store: {exc}") from None
            except OSError as exc:
                raise self.disk_error(exc) from None
            file = log_files.files[log_files.segment_start(position)]
        at = position - file.start
        try:
            if space < PWRITE_FROM and self._write is write_record:
                # The default writer's copy into the map, inlined: a small record's path.
                file.map[at : at + space] = pending.head(position) + pending.body
            else:
                self._write(file, at, (pending.head(position), pending.body))
        except OSError as exc:
            with contextlib.suppress(OSError, ValueError):  # leave no partial record behind
                file.map[at : at + space] = bytes(space)
            raise self.disk_error(exc) from None
        log_files.write_offset = position + space
        file.wrote = at + space
        if self.append_listener is not None:
            self.append_listener(log_files.write_offset)
        return position

    def disk_error(self, exc: OSError) -> ResourceError:
        if exc.errno in NO_SPACE:
            self.note_refusal()
            return ResourceError(f"disk full: the store in {self.root} cannot take the message")
        return ResourceError(f"the store in {self.root} cannot write: {exc}")

    def note_refusal(self) -> None:
        """The disk refused space (Trio thread): hold the alarm, and have the monitor look at
        once rather than at its next sample, which fast publishers would not wait for."""
        self.disk_alarm = True
        self._refused.set()

    async def wait_refusal(self) -> None:
        """Return at the next `note_refusal`."""
        await self._refused.wait()
        self._refused = trio.Event()

    def create_segment(self, start: int) -> MappedFile:
        """Create the segment at `start` (blocking). Both a flush round (ahead of need) and the
        publishing path (when none was made ahead) may get here for one segment: the loser of
        that race maps the winner's file."""
        self._check_free_space()
        try:
            file = self.log.prepare(start)
        except FileExistsError:
            file = MappedFile.open(self.log.directory / file_name(start), start, self.log.size)
        self.disk_alarm = False  # a segment could be made: the refusal is over
        return file

    def _check_free_space(self) -> None:
        minimum = self.config.min_free_bytes
        if minimum and self.free_space(self.root) - self.config.segment_size < minimum:
            raise OSError(errno.ENOSPC, f"less than {minimum} bytes would stay free")

    # -- metadata --------------------------------------------------------------------------
    def load_metadata(self) -> Mapping[str, Mapping[str, MetadataValue]]:
        return self.state.metadata.load()

    def put_metadata(self, kind: str, key: str, value: MetadataValue | None) -> int:
        if self._acks:
            self.flush_acks()
        text = MetadataTable.encode(kind, key, value)
        pending = rec.encode_metadata(kind, key, text)
        position = self._put(pending)
        self.state.metadata.apply(kind, key, text)
        return position + pending.space

    # -- messages --------------------------------------------------------------------------
    def append(self, message: Message, targets: Sequence[QueueTarget]) -> int:
        codecs = self._codecs
        if codecs is None:
            raise InternalError("the commit-log store is not open")
        if self.reader.recovered:
            self.reader.recovered.clear()  # recovery is over: stop sharing recovered messages
        if not targets:
            return self.log.write_offset
        if self._acks:
            self.flush_acks()
        raw = message.stored_bytes(codecs)
        store_ms = int(time.time() * 1000)  # never below the last record's: monotonic
        if store_ms < self.last_ms:
            store_ms = self.last_ms
        self.last_ms = store_ms
        try:
            pending = rec.encode_message(message, raw, targets, store_ms)
        except ValueError as exc:
            raise InternalError(str(exc)) from None
        state = self.state
        if len(targets) == 1:
            target = targets[0]
            try:
                queue = state.ready_single(target.queue_id, target.queue_offset)
            except OSError as exc:
                raise self.disk_error(exc) from None
            if queue is not None:
                position = self._put(pending)
                state.on_single(
                    queue, position, pending.size, len(raw), message.body_size,
                    target.queue_offset, message.message_id, store_ms,
                )  # fmt: skip
                return position + pending.space
            pairs: Sequence[tuple[int, int]] = ((target.queue_id, target.queue_offset),)
        else:
            pairs = [(t.queue_id, t.queue_offset) for t in targets]
        refused = state.check_offsets(pairs)
        if refused is not None:
            raise InternalError(f"the store's queue offsets only grow: {refused}")
        try:
            state.reserve(pairs, self.log.write_offset)
        except OSError as exc:
            raise self.disk_error(exc) from None
        position = self._put(pending)
        state.on_message(
            position, pending.size, len(raw), message.body_size, pairs, message.message_id, store_ms
        )
        return position + pending.space

    @property
    def durable_ticket(self) -> int:
        group = self._group
        return group.durable if group is not None else 0

    async def wait_durable(self, ticket: int) -> None:
        if self._acks:
            self.flush_acks()  # then the round that makes `ticket` durable takes them too
        await self.require_open().wait_durable(ticket)
        keeper = self._keeper
        if keeper.due and not keeper.lock.locked() and keeper.checkpoint_wanted():
            # The ticket is durable; a failed checkpoint is logged and tried again later.
            with contextlib.suppress(ResourceError):
                await self.checkpoint()

    def _put_quietly(self, pending: rec.Pending, what: str) -> None:
        """Log an ack-like record; if the disk refuses, the change still holds in memory and
        reaches disk with the next checkpoint (acks must not fail the kernel's ack path)."""
        try:
            self._put(pending)
        except ResourceError as exc:
            log.warning("%s kept in memory only: %s", what, exc.reply_text)

    def ack(self, queue_id: int, queue_offset: int) -> None:
        state = self.state.queues.get(queue_id)
        if state is None:
            return
        found = state.find_entry(queue_offset)
        if found is not None:
            offsets = self._acks.get(queue_id)
            if offsets is None:
                self._acks[queue_id] = [queue_offset]
            else:
                offsets.append(queue_offset)
            state.mark_done(found[0])
            self.state.ledger.release_entry(state, found[1])
            self._ack_count += 1
            if self._ack_count >= ACKS_PER_RECORD:
                self.flush_acks()

    def flush_acks(self) -> None:
        """Log the acks taken since the last record, one ACKS record per queue.

        Nobody waits for an ack to reach disk (RabbitMQ does not either: after a crash an
        acked message may come back), so acks wait here until the next record of any kind,
        the background tick (`flush_interval_ms`) or a checkpoint, and a consumer's
        `multiple` ack of a hundred messages costs one record instead of a hundred."""
        acks, self._acks = self._acks, {}
        self._ack_count = 0
        for queue_id, offsets in acks.items():
            for at in range(0, len(offsets), ACKS_PER_RECORD):
                chunk = offsets[at : at + ACKS_PER_RECORD]
                self._put_quietly(rec.encode_acks(queue_id, chunk), "ack")

    def note_delivery(self, queue_id: int, queue_offset: int, delivery_count: int) -> None:
        if self._acks:
            self.flush_acks()
        if self.state.find_live(queue_id, queue_offset) is not None:
            pending = rec.encode_delivery(queue_id, queue_offset, delivery_count)
            self._put_quietly(pending, "delivery count")
            self.state.on_delivery(queue_id, queue_offset, delivery_count)

    def delete_queue(self, queue_id: int) -> None:
        if self._acks:
            self.flush_acks()
        if queue_id in self.state.queues:
            self._put_quietly(rec.encode_delete_queue(queue_id), "queue deletion")
            self.state.on_delete_queue(queue_id)

    def queue_ids(self) -> list[int]:
        return sorted(self.state.queues)

    def recover_queue(self, queue_id: int) -> Iterable[StoredEntry]:
        """The queue's live entries, read back from the log; a corrupt one is logged and
        dropped, never delivered. Messages shared by several queues are decoded once."""
        return self.reader.recover_queue(queue_id)

    def queue_next_offset(self, queue_id: int) -> int:
        state = self.state.queues.get(queue_id)
        return 0 if state is None else state.next_offset

    def queue_ranges(self, queue_id: int, range_size: int) -> Iterable[QueueRange]:
        """Ranges of live entries, from the consume queue alone: no record is read."""
        return self.reader.queue_ranges(queue_id, range_size)

    def read_queue(
        self,
        queue_id: int,
        first_offset: int,
        last_offset: int,
        limit: int,
        make: EntryFactory[Any] = StoredEntry,
    ) -> list[Any]:
        """Live entries in [first_offset, last_offset], read back from the log (not cached:
        a swapped queue's messages are read once, when a consumer comes near them)."""
        return self.reader.read_queue(queue_id, first_offset, last_offset, limit, make)

    def read_queue_records(
        self, queue_id: int, first_offset: int, last_offset: int, limit: int
    ) -> list[tuple[int, int, bytes]]:
        """`read_queue`'s live entries as (offset, delivery count, stored record bytes)."""
        return self.reader.read_queue_records(queue_id, first_offset, last_offset, limit)

    def find_by_key(
        self, key: str, begin_ms: int = 0, end_ms: int = 2**62, limit: int = 64
    ) -> list[Message]:
        """Messages still in the log whose message id is `key`, stored within
        [begin_ms, end_ms] (ms since the epoch), oldest first, at most `limit`."""
        return self.reader.find_by_key(key, begin_ms, end_ms, limit)

    @property
    def record_reads(self) -> int:
        """Message records read back from the log so far (recovery, swapping, find_by_key)."""
        return self.reader.record_reads

    def statistics(self) -> StoreStatistics:
        ledger = self.state.ledger
        return StoreStatistics(
            messages=ledger.messages,
            bytes=ledger.bytes,
            appended_ticket=self.log.write_offset,
            durable_ticket=self.durable_ticket,
        )

    def commitlog_statistics(self) -> CommitLogStatistics:
        group = self._group
        return CommitLogStatistics(
            flushes=group.rounds if group is not None else 0,
            checkpoints=self._keeper.checkpoints,
            segments=len(self.log),
            log_start=self.log.min_offset,
            log_end=self.log.write_offset,
            durable=self.durable_ticket,
            disk_alarm=self.disk_alarm,
        )

    # -- checkpoints, retention, background service (housekeeping.py) ----------------------
    async def checkpoint(self) -> None:
        """Save the derived state as of the log's end, then reclaim what that allows."""
        await self._keeper.write_checkpoint()

    async def snapshot(self) -> Snapshot:
        """A fresh checkpoint and the files a new replica needs to open at it, each held open
        until `Snapshot.close` (snapshot.py): what reclaim deletes meanwhile stays readable."""
        await self.checkpoint()
        keeper = self._keeper
        async with keeper.lock:
            checkpoint = keeper.checkpoint
            if checkpoint is None:
                raise InternalError("the store has no checkpoint to ship")
            files = snapshot_files(self, checkpoint)
            with trio.CancelScope(shield=True):  # a cancelled open would leak descriptors
                snapshot = await trio.to_thread.run_sync(open_snapshot, checkpoint, files)
            return snapshot

    async def reclaim(self) -> int:
        """Delete what no checkpoint needs: segments without live messages (never the active
        one), consume-queue files below both checkpoints' watermarks, deleted queues' consume
        queues, index files pointing only at deleted segments. Returns segments deleted."""
        self.require_open()
        async with self._keeper.lock:
            return await self._keeper.reclaim_locked()

    async def run_flusher(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The store's background service: in `async` mode it flushes every
        `flush_interval_ms`; in both modes it creates files ahead and checkpoints when due."""
        await self._keeper.run(task_status=task_status)
