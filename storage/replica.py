"""The slave's side of HA replication: the master's raw commit-log bytes, written at the
offsets the master wrote them, and applied the way crash recovery applies them.

`ReplicaWriter(store)` runs over an open follower `CommitLogStore` (no kernel on top). The
master streams its log with `MappedFileQueue.read`, never across a segment end; `write`
copies each chunk to the same global offset of the follower's log (creating the segment with
`store.create_segment` when it is missing), then reads every complete record from the log's
end with `recovery.read_at` and applies it with `StoreState.apply`: the code path crash
replay uses, so the follower's consume queues, acks, metadata and index cannot differ from
what the master's own recovery would rebuild. An end-of-segment filler moves the log's end
to the next segment, as `recovery.scan` does; corrupt bytes the master skipped at its own
recovery are skipped here with `recovery.resync`.

`log.write_offset` only ever stops at a record end: a record cut at the end of a chunk sits
in the map beyond it until the rest arrives. `written` is the end of the bytes received,
`applied` the log's end. A crash of the follower loses nothing it cannot get again: recovery
zeroes the torn tail and the follower asks the master to stream from its log's end.

`truncate_offline(root, config, offset)` cuts a closed store's log back to `offset`, for a
diverged ex-master (CLUSTER.md §3.3): derived state is never un-applied, so the next open
rebuilds it by crash replay from the newest checkpoint at or below `offset`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from herald.core.errors import ConfigError
from herald.storage.checkpoint import (
    CHECKPOINT,
    PREVIOUS,
    Checkpoint,
    DataDirLock,
    abort_marker_exists,
    read_checkpoints,
    set_abort_marker,
    sync_directory,
    write_checkpoint,
)
from herald.storage.commitlog import CommitLogStore
from herald.storage.commitlog_config import CommitLogConfig
from herald.storage.mapped_file import MappedFile, MappedFileQueue, pwrite_write
from herald.storage.record import (
    ALIGN,
    COMMON,
    MAGIC_END,
    MAGIC_PREFIX,
    PREFIX,
    EndRecord,
    MessageRecord,
    aligned,
)
from herald.storage.recovery import cut, read_at, resync

log = logging.getLogger(__name__)

MAGIC_TOP = int.from_bytes(MAGIC_PREFIX, "big")


class ReplicaError(ValueError):
    """A chunk the follower cannot take (a gap, different bytes, across a segment end)."""


class ReplicaWriter:
    """Writes the master's commit-log bytes into an open follower store (Trio thread)."""

    def __init__(self, store: CommitLogStore) -> None:
        store.require_open()
        self.store = store
        self.log = store.log
        self.written = store.log.write_offset  # the end of the bytes received
        self.records = 0  # records applied

    @property
    def applied(self) -> int:
        """The log's end: every record before it is applied."""
        return self.log.write_offset

    def write(self, offset: int, data: bytes) -> int:
        """Write `data`, the master's bytes at global `offset`, and apply the records it
        completes; returns `written`. A re-sent chunk (or its prefix) must equal the bytes
        already received; a chunk may not start beyond `written` nor cross a segment end.
        Raises ReplicaError (nothing changed) or OSError (a segment could not be made)."""
        log_files = self.log
        size = log_files.size
        end = offset + len(data)
        if offset < 0 or offset > self.written:
            raise ReplicaError(f"a gap: bytes at {offset}, {self.written} received so far")
        start = log_files.segment_start(offset)
        if end > start + size:
            raise ReplicaError(f"bytes at {offset}..{end} cross the segment end {start + size}")
        if offset < self.written:
            known = min(end, self.written) - offset
            if known and log_files.read(offset, known) != data[:known]:
                raise ReplicaError(
                    f"bytes at {offset}..{offset + known} differ from those received"
                )
            data, offset = data[known:], offset + known
        if not data:
            return self.written
        file = self._segment(start)
        at = offset - file.start
        pwrite_write(file, at, [data])
        file.wrote = max(file.wrote, at + len(data))
        self.written = offset + len(data)
        self._apply()
        return self.written

    async def flush(self) -> int:
        """Make the applied records durable; returns the flushed offset (a record end)."""
        group = self.store.require_open()
        await group.flush_now()
        return group.durable

    def discard_tail(self) -> None:
        """Zero the received bytes of a cut record beyond the log's end (call it before a
        clean close: a clean open does not scan, so they would stay past the checkpoint)."""
        file = self.log.segment_for(self.applied)
        if file is not None and self.written > self.applied:
            file.zero(self.applied - file.start)
            file.wrote = self.applied - file.start
        self.written = self.applied

    # -- internals -------------------------------------------------------------------------
    def _segment(self, start: int) -> MappedFile:
        log_files = self.log
        file = log_files.files.get(start)
        if file is not None:
            return file
        prepared = log_files.prepared
        if prepared is not None and prepared.start == start:
            log_files.prepared = None
        else:
            prepared = self.store.create_segment(start)
        log_files.files[start] = prepared
        return prepared

    def _apply(self) -> None:
        """Apply every complete record between the log's end and `written`."""
        log_files = self.log
        state = self.store.state
        while True:
            position = log_files.write_offset
            file = log_files.segment_for(position)
            if file is None or position >= self.written:
                return
            at = position - file.start
            have = self.written - position
            if have < PREFIX.size:
                return
            size, magic = PREFIX.unpack_from(file.map, at)
            rest = file.size - at
            if magic == MAGIC_END:
                need = rest
            elif magic >> 8 == MAGIC_TOP and COMMON.size <= size and aligned(size) <= rest:
                need = aligned(size)
            else:
                need = 0  # not a record's head: invalid whatever follows
            if need > have:
                return  # the rest of the record comes with a later chunk
            record = read_at(file, at) if need else None
            if record is None:
                if not self._skip(file, at):
                    return
                continue
            if isinstance(record, EndRecord):
                log_files.write_offset = file.end
                file.wrote = file.size
                continue
            state.apply(record)
            if isinstance(record, MessageRecord) and record.store_ms > self.store.last_ms:
                self.store.last_ms = record.store_ms
            self.records += 1
            log_files.write_offset = position + aligned(record.size)

    def _skip(self, file: MappedFile, at: int) -> bool:
        """Invalid bytes at `at`, all received: move the log's end to the next valid record
        wholly received (as `recovery.scan` does), or return False to wait for more."""
        found = resync(file, at + ALIGN)
        if found is None:
            return False
        record = read_at(file, found)
        if record is None or file.start + found + aligned(record.size) > self.written:
            return False
        log.error(
            "replica: commit log segment %s: %d corrupt bytes at offset %d skipped",
            file.path.name,
            found - at,
            at,
        )
        self.log.write_offset = file.start + found
        return True


def truncate_offline(root: Path, config: CommitLogConfig, offset: int) -> bool:
    """Cut the log of the store in `root` back to `offset` (a record end), so that its next
    open holds the state as of `offset` (blocking). The store must be closed: this takes its
    data-dir lock (ConfigError while it is open).

    Checkpoints past `offset` are dropped and the abort marker set: the open replays the log
    from the newest checkpoint left up to `offset`. Returns False, changing nothing, when that
    replay could not rebuild the state: a segment it reads, or one holding a message live at
    that checkpoint, was reclaimed (the caller resyncs from a snapshot). An offset at or past
    the log's end cuts nothing. Every step leaves a store that opens consistently (the marker
    first, then the checkpoints, then the cut), so a crash midway needs only a second call.
    """
    if offset < 0:
        raise ValueError(f"offset {offset} is negative")
    root = Path(root)
    if not root.is_dir():
        return True  # no store: nothing past `offset`
    lock = DataDirLock(root)
    lock.acquire()
    log_files = MappedFileQueue(root / "commitlog", config.segment_size)
    try:
        found = read_checkpoints(root)
        newest = found.newest
        if newest is not None and newest.segment_size != config.segment_size:
            raise ConfigError(
                f"commitlog.segment_size: the data dir {root} was written with segments of "
                f"{newest.segment_size} bytes, not {config.segment_size}"
            )
        clean = not found.fell_back and not abort_marker_exists(root)
        if clean and newest is not None and newest.log_end <= offset:
            return True  # a clean open ends the log at the newest checkpoint's offset
        log_files.load()
        checkpoints = [c for c in (newest, found.previous) if c is not None]
        kept = [c for c in checkpoints if c.log_end <= offset]
        if not _replayable(log_files, kept[0] if kept else None, offset):
            log.warning("store %s cannot be cut back to %d: segments were reclaimed", root, offset)
            return False
        set_abort_marker(root)
        if len(kept) < len(checkpoints):
            _keep_only(root, kept[0] if kept else None)
        before = len(log_files)
        cut(log_files, offset)
        segment = log_files.segment_for(offset)
        if segment is not None:
            segment.flush()
        if len(log_files) != before:
            sync_directory(log_files.directory)
        log.warning("store %s: the log was cut back to %d", root, offset)
        return True
    finally:
        log_files.close()
        lock.release()


def _replayable(log_files: MappedFileQueue, checkpoint: Checkpoint | None, offset: int) -> bool:
    """Every segment a replay from `checkpoint` (or from 0) to `offset` reads is there, and so
    is every segment holding a message live at the checkpoint (it may be live at `offset`)."""
    size = log_files.size
    files = log_files.files
    last = max(files) + size if files else 0
    start = checkpoint.log_end if checkpoint is not None else 0
    needed = range(log_files.segment_start(start), min(offset, last), size)
    if any(s not in files for s in needed):
        return False
    live = checkpoint.totals.segments if checkpoint is not None else {}
    return all(s in files for s, count in live.items() if count)


def _keep_only(root: Path, checkpoint: Checkpoint | None) -> None:
    """Leave `checkpoint` as the only one (none if None). In between, the files on disk hold
    checkpoints of the log as it was, which is not cut yet."""
    if checkpoint is None:
        (root / CHECKPOINT).unlink(missing_ok=True)
    else:
        write_checkpoint(root, checkpoint)  # the one it replaces becomes `checkpoint.prev`
    (root / PREVIOUS).unlink(missing_ok=True)
    sync_directory(root)
