"""Opening a store: from the checkpoint, and after a crash, replaying the log after it.

Clean stop (no abort marker): the checkpoint was written at close, after everything else;
trust it. The log ends at the checkpoint's offset; nothing is scanned.

Crash (abort marker present, or no usable checkpoint): load the checkpoint's state (its
consume queues cut back to the checkpointed lengths, its index file cut back and its slots
rebuilt), then scan the log from the checkpoint's offset record by record, checking size,
magic, position and CRC, and re-apply every valid record through the same code path as
`append` (dispatch.py), which rebuilds consume queues, ack state, metadata and index.

Invalid bytes: records are 8-byte aligned and every magic starts with the same three bytes,
so at an invalid record the scanner searches forward (`mmap.find`, C speed) for the next
aligned position where a record with a valid magic, its own position and a matching CRC
starts. Found: the bytes in between are logged as corrupt (segment and offset) and skipped;
the records after them are kept. Not found: the segment's data ends there. The log ends after
the last valid record of the last segment; what follows it (a torn write, garbage) is zeroed
and later segments are deleted. RocketMQ stops at the first invalid record; resynchronising
keeps every intact record after a bit flip, and the position check keeps a record-shaped
payload inside a message body from being taken for a record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import attrs

from herald.core.errors import ConfigError
from herald.storage.checkpoint import Checkpoint, read_checkpoints
from herald.storage.commitlog_config import CommitLogConfig
from herald.storage.dispatch import StoreState
from herald.storage.mapped_file import MappedFile, MappedFileQueue
from herald.storage.record import (
    ALIGN,
    COMMON,
    MAGIC_END,
    MAGIC_PREFIX,
    PREFIX,
    EndRecord,
    MessageRecord,
    Record,
    RecordError,
    aligned,
    decode,
)

log = logging.getLogger(__name__)


@attrs.frozen
class RecoveryReport:
    """What opening the store found."""

    crashed: bool
    start: int  # where the scan started (the checkpoint's offset)
    end: int  # where the log ends
    records: int  # records replayed
    skipped: tuple[tuple[str, int, int], ...]  # (segment, offset in it, bytes) left unread
    cut: bool  # a torn or corrupt tail was zeroed


@attrs.frozen
class Recovered:
    report: RecoveryReport
    checkpoint: Checkpoint | None
    previous: Checkpoint | None
    store_ms: int


def read_at(file: MappedFile, at: int) -> Record | None:
    """The valid record at relative position `at`, or None."""
    rest = file.size - at
    if rest < PREFIX.size:
        return None
    size, magic = PREFIX.unpack_from(file.map, at)
    if magic == MAGIC_END:
        return EndRecord(file.start + at, size) if size == rest else None
    if magic >> 8 != int.from_bytes(MAGIC_PREFIX, "big") or not COMMON.size <= size:
        return None
    if aligned(size) > rest:
        return None
    try:
        return decode(file.map[at : at + size], file.start + at)
    except RecordError:
        return None


def resync(file: MappedFile, at: int) -> int | None:
    """The next aligned position >= `at` where a valid record starts, or None."""
    for begin, end in file.data_regions(at):
        search = max(at, begin - 4) + 4  # the magic sits 4 bytes into a record
        while True:
            found = file.map.find(MAGIC_PREFIX, search, end)
            if found < 0:
                break
            candidate = found - 4
            if candidate % ALIGN == 0 and read_at(file, candidate) is not None:
                return candidate
            search = found + 1
    return None


def scan(
    log_files: MappedFileQueue, start: int, visit: Callable[[Record], None]
) -> tuple[int, int, list[tuple[str, int, int]]]:
    """Visit every valid record from `start`; returns (end of the last one, count, skipped)."""
    end, count = start, 0
    skipped: list[tuple[str, int, int]] = []
    for file in log_files:
        if file.end <= start:
            continue
        at = max(start, file.start) - file.start
        while at < file.size:
            record = read_at(file, at)
            if record is None:
                found = resync(file, at + ALIGN)
                if found is None:
                    break
                log.error(
                    "commit log segment %s: %d corrupt bytes at offset %d skipped",
                    file.path.name,
                    found - at,
                    at,
                )
                skipped.append((file.path.name, at, found - at))
                at = found
                continue
            if isinstance(record, EndRecord):
                end = file.end
                break
            visit(record)
            count += 1
            at += aligned(record.size)
            end = file.start + at
    return end, count, skipped


def cut(log_files: MappedFileQueue, end: int) -> bool:
    """Zero everything after `end` in its segment and delete later segments."""
    segment = log_files.segment_start(end)
    changed = False
    for file in list(log_files):
        if file.start > segment:
            log_files.remove(file.start)
            file.delete()
        elif file.start == segment and file.zero(end - file.start):
            changed = True
            log.warning(
                "commit log segment %s: cut a torn or corrupt tail at offset %d",
                file.path.name,
                end - file.start,
            )
    return changed


def recover(root: Path, log_files: MappedFileQueue, state: StoreState, crashed: bool) -> Recovered:
    """Load the log and the state of `root` (blocking). See the module docstring."""
    config: CommitLogConfig = state.config
    found = read_checkpoints(root)
    checkpoint, previous = found.newest, found.previous
    if found.fell_back:
        log.error("store %s: the newest checkpoint is unusable; using the one before", root)
        crashed = True
    if checkpoint is not None and checkpoint.segment_size != config.segment_size:
        raise ConfigError(
            f"commitlog.segment_size: the data dir {root} was written with segments of "
            f"{checkpoint.segment_size} bytes, not {config.segment_size}; segment size cannot "
            "change for an existing store"
        )
    try:
        log_files.load()
    except ValueError as exc:
        raise ConfigError(f"commitlog.segment_size: {exc}") from None
    if checkpoint is None and len(log_files):
        log.error("store %s has segments but no usable checkpoint: rebuilding from the log", root)
        crashed = True
    keep = {q.directory for q in previous.queues.values()} if previous is not None else set()
    state.restore(checkpoint, keep)
    index = state.index
    if index is not None:
        index.load()
    store_ms = checkpoint.store_ms if checkpoint is not None else 0
    start = checkpoint.log_end if checkpoint is not None else log_files.min_offset
    skipped: list[tuple[str, int, int]] = []
    records, was_cut = 0, False
    if not crashed:
        end = start
        limit = log_files.segment_start(end) + log_files.size
        for file in list(log_files):
            if file.start > limit:
                log_files.remove(file.start)
                file.delete()
    else:
        log.warning("store %s was not closed cleanly: replaying the log from %d", root, start)
        if index is not None:
            number = checkpoint.index_file if checkpoint is not None else None
            count = checkpoint.index_count if checkpoint is not None else 0
            for gone in index.recover(number, count):
                gone.file.delete()
        last = [store_ms]

        def visit(record: Record) -> None:
            state.apply(record)
            if isinstance(record, MessageRecord):
                last[0] = max(last[0], record.store_ms)

        end, records, skipped = scan(log_files, start, visit)
        store_ms = last[0]
        was_cut = cut(log_files, end)
        log.warning("replayed %d record(s); the log ends at %d", records, end)
    log_files.write_offset = end
    active = log_files.segment_start(end)
    if active not in log_files.files:  # a new store, or the log ends on a segment boundary
        log_files.files[active] = log_files.prepare(active)
    for file in log_files:
        file.wrote = min(max(end - file.start, 0), file.size)
        file.release()  # pages the scan mapped in: the log is read with pread from now on
    if index is not None and not index.files:
        index.files.append(index.prepare(0))
    report = RecoveryReport(crashed, start, end, records, tuple(skipped), was_cut)
    return Recovered(report, checkpoint, previous, store_ms)
