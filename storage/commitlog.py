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
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from herald.core.errors import InternalError, ResourceError
from herald.core.hookspecs import hookimpl
from herald.core.plugin_types import ConfigSection, Service, StorageBackend
from herald.core.store import (
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
    write_checkpoint,
)
from herald.storage.commitlog_config import CommitLogConfig
from herald.storage.dispatch import StoreState
from herald.storage.flush import GroupCommit
from herald.storage.housekeeping import Housekeeper
from herald.storage.mapped_file import MappedFile, MappedFileQueue, Writer, file_name, mmap_write
from herald.storage.metadata import MetadataTable
from herald.storage.recovery import RecoveryReport, recover

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.core.message import CodecRegistry, Message

__all__ = ["CommitLogConfig", "CommitLogStatistics", "CommitLogStore"]

log = logging.getLogger(__name__)


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
        self.state = StoreState(self.root, self.config, self._raw_length)
        self._lock = DataDirLock(self.root)
        self._codecs: CodecRegistry | None = None
        self._group: GroupCommit | None = None
        self.last_ms = 0
        self._keeper = Housekeeper(self)
        self._recovered: dict[int, Message] = {}
        self.disk_alarm = False
        self.recovery: RecoveryReport | None = None
        # Fault-injection seam: how record bytes reach a segment (tests replace it).
        self._write: Writer = mmap_write

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
            write_checkpoint(self.root, snapshot)
            self._keeper.previous = recovered.checkpoint
            self._keeper.checkpoint = snapshot
            set_abort_marker(self.root)
        except BaseException:
            self.state.close()
            self.log.close()
            self._lock.release()
            raise

    async def close(self) -> None:
        """Flush, checkpoint, reclaim, and remove the abort marker (a clean stop)."""
        group = self.require_open()
        clean = group.error is None
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
        group = self.require_open()
        group.check()
        try:
            position = self.log.place(pending.space, self._write, self.create_segment)
        except ValueError as exc:
            raise ResourceError(f"message too large for the store: {exc}") from None
        except OSError as exc:
            raise self.disk_error(exc) from None
        file = self.log.files[self.log.segment_start(position)]
        at = position - file.start
        try:
            self._write(file, at, [pending.head(position), pending.body])
        except OSError as exc:
            with contextlib.suppress(OSError, ValueError):  # leave no partial record behind
                file.map[at : at + pending.space] = bytes(pending.space)
            raise self.disk_error(exc) from None
        self.log.advance(position, pending.space)
        return position

    def disk_error(self, exc: OSError) -> ResourceError:
        if exc.errno == errno.ENOSPC:
            self.disk_alarm = True
            return ResourceError(f"disk full: the store in {self.root} cannot take the message")
        return ResourceError(f"the store in {self.root} cannot write: {exc}")

    def create_segment(self, start: int) -> MappedFile:
        """Create the segment at `start` (blocking). Both a flush round (ahead of need) and the
        publishing path (when none was made ahead) may get here for one segment: the loser of
        that race maps the winner's file."""
        self._check_free_space()
        try:
            return self.log.prepare(start)
        except FileExistsError:
            return MappedFile.open(self.log.directory / file_name(start), start, self.log.size)

    def _check_free_space(self) -> None:
        minimum = self.config.min_free_bytes
        if minimum:
            stats = os.statvfs(self.root)
            free = stats.f_bavail * stats.f_frsize
            if free - self.config.segment_size < minimum:
                self.disk_alarm = True
                raise OSError(errno.ENOSPC, f"less than {minimum} bytes would stay free")
        self.disk_alarm = False

    def _raw_length(self, position: int) -> int:
        data = self.log.read(position + rec.RAW_LENGTH_AT, 4)
        return int.from_bytes(data, "big") if data else 0

    def _next_ms(self) -> int:
        """Wall-clock ms, never below the last record's (store times are monotonic)."""
        stamp = max(int(time.time() * 1000), self.last_ms)
        self.last_ms = stamp
        return stamp

    # -- metadata --------------------------------------------------------------------------
    def load_metadata(self) -> Mapping[str, Mapping[str, MetadataValue]]:
        return self.state.metadata.load()

    def put_metadata(self, kind: str, key: str, value: MetadataValue | None) -> int:
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
        if self._recovered:
            self._recovered.clear()  # recovery is over: stop sharing recovered messages
        if not targets:
            return self.log.write_offset
        raw = message.stored_bytes(codecs)
        store_ms = self._next_ms()
        try:
            pending = rec.encode_message(message, raw, targets, store_ms)
        except ValueError as exc:
            raise InternalError(str(exc)) from None
        pairs = [(t.queue_id, t.queue_offset) for t in targets]
        try:
            self.state.reserve(pairs, self.log.write_offset)
        except OSError as exc:
            raise self.disk_error(exc) from None
        position = self._put(pending)
        self.state.on_message(position, pending.size, len(raw), pairs, message.message_id, store_ms)
        return position + pending.space

    @property
    def durable_ticket(self) -> int:
        group = self._group
        return group.durable if group is not None else 0

    async def wait_durable(self, ticket: int) -> None:
        await self.require_open().wait_durable(ticket)
        if self._keeper.due and not self._keeper.lock.locked():
            try:
                await self.checkpoint()
            except ResourceError as exc:  # the ticket is durable; the checkpoint will retry
                log.error("checkpoint failed: %s", exc.reply_text)

    def _put_quietly(self, pending: rec.Pending, what: str) -> None:
        """Log an ack-like record; if the disk refuses, the change still holds in memory and
        reaches disk with the next checkpoint (acks must not fail the kernel's ack path)."""
        try:
            self._put(pending)
        except ResourceError as exc:
            log.warning("%s kept in memory only: %s", what, exc.reply_text)

    def ack(self, queue_id: int, queue_offset: int) -> None:
        if self.state.is_live(queue_id, queue_offset):
            self._put_quietly(rec.encode_ack(queue_id, queue_offset), "ack")
            self.state.on_ack(queue_id, queue_offset)

    def note_delivery(self, queue_id: int, queue_offset: int, delivery_count: int) -> None:
        if self.state.is_live(queue_id, queue_offset):
            pending = rec.encode_delivery(queue_id, queue_offset, delivery_count)
            self._put_quietly(pending, "delivery count")
            self.state.on_delivery(queue_id, queue_offset, delivery_count)

    def delete_queue(self, queue_id: int) -> None:
        if queue_id in self.state.queues:
            self._put_quietly(rec.encode_delete_queue(queue_id), "queue deletion")
            self.state.on_delete_queue(queue_id)

    def recover_queue(self, queue_id: int) -> Iterable[StoredEntry]:
        """The queue's live entries, read back from the log; a corrupt one is logged and
        dropped, never delivered."""
        state = self.state.queues.get(queue_id)
        if state is None:
            return []
        entries = []
        for offset in sorted(state.live):
            entry = state.cq.get(state.live[offset])
            message = self._read_message(entry[0], entry[1]) if entry is not None else None
            if message is None:
                log.error("queue %d: dropping unreadable message at offset %d", queue_id, offset)
                self.state.ledger.drop(state, offset)
                continue
            entries.append(StoredEntry(offset, message, state.counts.get(offset, 0)))
        return entries

    def queue_next_offset(self, queue_id: int) -> int:
        state = self.state.queues.get(queue_id)
        if state is None:
            return 0
        highest = max(state.live, default=-1)
        if state.cq.length:
            last = state.cq.get(state.cq.length - 1)
            if last is not None:
                highest = max(highest, last[2])
        return highest + 1

    def queue_ranges(self, queue_id: int, range_size: int) -> Iterable[QueueRange]:
        """Ranges of live entries. Sizes come from each record's header."""
        state = self.state.queues.get(queue_id)
        if state is None:
            return []
        ranges: list[QueueRange] = []
        offsets = sorted(state.live)
        for start in range(0, len(offsets), range_size):
            chunk = offsets[start : start + range_size]
            size = 0
            for offset in chunk:
                entry = state.cq.get(state.live[offset])
                record = self._read_record(entry[0], entry[1]) if entry is not None else None
                size += record.body_size if record is not None else 0
            ranges.append(QueueRange(chunk[0], chunk[-1], len(chunk), size))
        return ranges

    def read_queue(
        self, queue_id: int, first_offset: int, last_offset: int, limit: int
    ) -> list[StoredEntry]:
        """Live entries in [first_offset, last_offset], read back from the log (not cached:
        a swapped queue's messages are read once, when a consumer comes near them)."""
        state = self.state.queues.get(queue_id)
        if state is None or limit <= 0:
            return []
        wanted = sorted(o for o in state.live if first_offset <= o <= last_offset)[:limit]
        entries = []
        for offset in wanted:
            entry = state.cq.get(state.live[offset])
            record = self._read_record(entry[0], entry[1]) if entry is not None else None
            message = record.to_message() if record is not None else None
            if message is None:
                log.error("queue %d: dropping unreadable message at offset %d", queue_id, offset)
                self.state.ledger.drop(state, offset)
                continue
            entries.append(StoredEntry(offset, message, state.counts.get(offset, 0)))
        return entries

    def _read_record(self, position: int, size: int) -> rec.MessageRecord | None:
        data = self.log.read(position, size)
        if data is None:
            return None
        try:
            record = rec.decode(data, position)
        except rec.RecordError as exc:
            segment = self.log.segment_start(position)
            log.error("commit log segment %020d: record at %d: %s", segment, position, exc)
            return None
        return record if isinstance(record, rec.MessageRecord) else None

    def _read_message(self, position: int, size: int) -> Message | None:
        message = self._recovered.get(position)
        if message is None:
            record = self._read_record(position, size)
            if record is None:
                return None
            try:
                message = record.to_message()
            except rec.RecordError as exc:
                log.error("record at %d: %s", position, exc)
                return None
            self._recovered[position] = message
        return message

    def find_by_key(
        self, key: str, begin_ms: int = 0, end_ms: int = 2**62, limit: int = 64
    ) -> list[Message]:
        """Messages still in the log whose message id is `key`, stored within
        [begin_ms, end_ms] (ms since the epoch), oldest first, at most `limit`."""
        index = self.state.index
        if index is None or limit <= 0:
            return []
        found = []
        for position in sorted(set(index.query(key, begin_ms, end_ms, limit * 4 + 16))):
            head = self.log.read(position, rec.PREFIX.size)
            if head is None:
                continue
            record = self._read_record(position, rec.PREFIX.unpack(head)[0])
            if record is None or record.message_id != key:
                continue
            if begin_ms <= record.store_ms <= end_ms:
                try:
                    found.append(record.to_message())
                except rec.RecordError:
                    continue
        return found[:limit]

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


# -- plugin hooks -----------------------------------------------------------------------------


@hookimpl
def herald_config_sections() -> list[ConfigSection]:
    return [ConfigSection("commitlog", CommitLogConfig)]


def _make_store(config: Any, data_dir: Path) -> CommitLogStore:
    if not isinstance(config, CommitLogConfig):
        config = CommitLogConfig()
    return CommitLogStore(Path(data_dir) / "store", config)


@hookimpl
def herald_storage_backends() -> list[StorageBackend]:
    """Offer this store as the storage backend named "commitlog"."""
    return [
        StorageBackend(
            name="commitlog",
            description="RocketMQ-style commit log on disk, with group-commit fsync",
            factory=_make_store,
        )
    ]


async def _run_flusher(broker: Broker, *, task_status: trio.TaskStatus[None]) -> None:
    store = broker.store
    assert isinstance(store, CommitLogStore)
    await store.run_flusher(task_status=task_status)


@hookimpl
def herald_services(broker: Broker) -> list[Service]:
    """The flusher / housekeeping task, when the broker's store is a commit-log store."""
    if isinstance(broker.store, CommitLogStore):
        return [Service("commitlog-flusher", _run_flusher)]
    return []
