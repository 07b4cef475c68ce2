"""Snapshot resync on the replica: a snapshot's files (snapshot.py) written into a staging
directory beside the store, `<store>.resync`, then swapped in for the store by renames.

`SnapshotWriter` takes the snapshot as it arrives: the checkpoint, then each file (`open_file`
with its name and full size, `write` its bytes in order). A file is created whole (preallocated
at its full size, as the store makes its own, so a full disk refuses it here and not with
SIGBUS later) and fsynced when the next one starts. Names are checked against the store's
layout (`commitlog/<20 digits>`, `consumequeue/<queue>-<generation>/<20 digits>`,
`index/<20 digits>`, plus the caller's `extra` names) and sizes against this node's own
settings: a master with another segment or consume-queue size cannot be followed, and a name
like `../x` never leaves the staging directory. `finish` writes the checkpoint, sets the abort
marker, fsyncs every directory and writes `resync.complete` last.

The abort marker makes the first open of the new store go through crash recovery from the
checkpoint: it cuts each consume queue to its checkpointed length, the index to its
checkpointed entry count (rebuilding its slots) and the log to the checkpoint's offset, which
is exactly what the bytes a master appended while its files shipped need. A clean open would
trust those files as shipped. Nothing after the checkpoint is in the log, so the replay reads
no record.

The swap (`swap_steps`), each step durable before the next: the store is renamed to
`<store>.old`, the staging directory to the store, the marker removed, `.old` deleted. A crash
anywhere leaves one of these layouts, and `finish_swap`, which `CommitLogStore.open` calls
first, completes it: a staging directory without its marker (an interrupted receive) is
deleted and the old store opens; one with the marker replaces whatever is at the store's name
(the old store, or an empty directory a restarted node made) and the new store opens. So the
node holds the old store or the new one, never a mix, and never neither.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable, Collection
from pathlib import Path

from herald.core.errors import HeraldError
from herald.storage.checkpoint import (
    Checkpoint,
    DataDirLock,
    set_abort_marker,
    sync_directory,
)
from herald.storage.commitlog_config import CommitLogConfig
from herald.storage.consume_queue import ENTRY_SIZE
from herald.storage.index_file import IndexFile
from herald.storage.snapshot import CHECKPOINT_FILE

log = logging.getLogger(__name__)

STAGING = ".resync"
OLD = ".old"
COMPLETE = "resync.complete"
"""In the staging directory once every file of the snapshot is there and durable."""
MAX_EXTRA = 16 * 1024 * 1024
"""The largest file of an `extra` name (the epoch history), and of the checkpoint file."""

_NAME = "[0-9]{20}"
_LAYOUT = re.compile(rf"(commitlog)/{_NAME}|(consumequeue)/[0-9]+-[0-9]+/{_NAME}|(index)/{_NAME}")


class SnapshotError(HeraldError, ValueError):
    """What arrived cannot be a snapshot this node can open (its settings differ from the
    master's, a name outside the store's layout, a file longer than its size)."""


def staging_dir(root: Path) -> Path:
    return root.with_name(root.name + STAGING)


def old_dir(root: Path) -> Path:
    return root.with_name(root.name + OLD)


class SnapshotWriter:
    """Writes one snapshot into `staging_dir(root)` (every method blocks: call it from a
    worker thread)."""

    def __init__(self, root: Path, config: CommitLogConfig, extra: Collection[str] = ()) -> None:
        self.root = Path(root)
        self.staging = staging_dir(self.root)
        self.config = config
        self.extra = frozenset(extra)
        self.checkpoint: Checkpoint | None = None
        self._checkpoint_bytes = b""  # received in SNAP_BEGIN, written by `finish`
        self._fd: int | None = None
        self._relpath = ""
        self._size = self._at = 0
        self._directories: set[Path] = set()
        self.files = 0
        self.bytes = 0

    def begin(self, checkpoint: bytes) -> None:
        """Start over in an empty staging directory; `checkpoint` is the checkpoint file's
        bytes, or empty when it comes as a file named `checkpoint`."""
        self.abandon()
        self.staging.mkdir(parents=True)
        if checkpoint:
            self.checkpoint = self._parse(checkpoint)
            self._checkpoint_bytes = checkpoint

    def _parse(self, data: bytes) -> Checkpoint:
        try:
            checkpoint = Checkpoint.from_bytes(data)
        except ValueError as exc:
            raise SnapshotError(f"the snapshot's checkpoint: {exc}") from None
        if checkpoint.segment_size != self.config.segment_size:
            raise SnapshotError(
                f"commitlog.segment_size: the master's segments are {checkpoint.segment_size} "
                f"bytes, this node's {self.config.segment_size}"
            )
        return checkpoint

    def _expected_size(self, relpath: str) -> int | None:
        """The size `relpath` must have here, None for any size up to `MAX_EXTRA`."""
        if relpath in self.extra or (relpath == CHECKPOINT_FILE and self.checkpoint is None):
            return None
        match = _LAYOUT.fullmatch(relpath)
        if match is None:
            raise SnapshotError(f"{relpath!r} is not a file of a commit-log store")
        config = self.config
        if match[1]:
            return config.segment_size
        if match[2]:
            return config.cq_entries_per_file * ENTRY_SIZE
        if not config.index:
            return None  # kept, never opened: this node keeps no index
        return IndexFile.file_size(config.index_slots, config.index_entries)

    def open_file(self, relpath: str, size: int) -> None:
        """The next bytes written are file `relpath`, `size` bytes in all."""
        self._close_file()
        expected = self._expected_size(relpath)
        if (expected is None and size > MAX_EXTRA) or (expected is not None and size != expected):
            raise SnapshotError(
                f"{relpath}: {size} bytes, not {expected} (the master's settings for it differ "
                "from this node's)"
                if expected is not None
                else f"{relpath}: {size} bytes is too large"
            )
        path = self.staging.joinpath(*relpath.split("/"))
        self._make_directories(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        self._fd, self._relpath, self._size, self._at = fd, relpath, size, 0
        if size:
            os.posix_fallocate(fd, 0, size)
        self.files += 1

    def _make_directories(self, directory: Path) -> None:
        missing = []
        while directory != self.staging and directory not in self._directories:
            missing.append(directory)
            directory = directory.parent
        for made in reversed(missing):
            made.mkdir(exist_ok=True)
            self._directories.add(made)

    def write(self, data: bytes) -> None:
        """The next bytes of the current file."""
        fd = self._fd
        if fd is None:
            raise SnapshotError("snapshot bytes before any file")
        if self._at + len(data) > self._size:
            raise SnapshotError(f"{self._relpath}: more than its {self._size} bytes")
        view = memoryview(data)
        while view:
            done = os.pwrite(fd, view, self._at)
            self._at += done
            view = view[done:]
        self.bytes += len(data)

    def _close_file(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if self._relpath == CHECKPOINT_FILE and self.checkpoint is None:
            self.checkpoint = self._parse((self.staging / CHECKPOINT_FILE).read_bytes())

    def finish(self, log_end: int) -> Checkpoint:
        """Every file is in: make the staging directory a store that opens at the checkpoint
        (through crash recovery) and mark it complete; returns the checkpoint."""
        self._close_file()
        checkpoint = self.checkpoint
        if checkpoint is None:
            raise SnapshotError("the snapshot ended without a checkpoint")
        if log_end != checkpoint.log_end:
            raise SnapshotError(f"SNAP_END says {log_end}, the checkpoint {checkpoint.log_end}")
        if self._checkpoint_bytes:
            _write_durably(self.staging / CHECKPOINT_FILE, self._checkpoint_bytes)
        set_abort_marker(self.staging)  # syncs the staging directory too
        for directory in sorted(self._directories, key=lambda d: len(d.parts), reverse=True):
            sync_directory(directory)
        _write_durably(self.staging / COMPLETE, b"")
        sync_directory(self.staging)
        return checkpoint

    def abandon(self) -> None:
        """Drop whatever was received (the next `begin`, or a receive that failed)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        self.checkpoint, self._checkpoint_bytes = None, b""
        self._directories.clear()
        self.files = self.bytes = 0
        shutil.rmtree(self.staging, ignore_errors=True)


def _write_durably(path: Path, data: bytes) -> None:
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def swap_steps(root: Path) -> list[Callable[[], None]]:
    """The swap of a complete staging directory for the store at `root`, in order, each step
    durable before it returns (see the module docstring)."""
    root = Path(root)
    staging, old, parent = staging_dir(root), old_dir(root), root.parent

    def set_aside() -> None:
        shutil.rmtree(old, ignore_errors=True)
        if root.exists():
            os.rename(root, old)
        sync_directory(parent)

    def bring_in() -> None:
        os.rename(staging, root)
        sync_directory(parent)

    def unmark() -> None:
        (root / COMPLETE).unlink(missing_ok=True)
        sync_directory(root)

    def drop_old() -> None:
        shutil.rmtree(old, ignore_errors=True)

    return [set_aside, bring_in, unmark, drop_old]


def finish_swap(root: Path) -> bool:
    """Complete a swap, or drop an interrupted receive, before the store at `root` opens
    (blocking). True if a snapshot replaced the store. Takes the store's lock while it works
    (ConfigError if the store is open): a store in use is never swapped under its owner."""
    root = Path(root)
    staging, old = staging_dir(root), old_dir(root)
    if not (staging.exists() or old.exists() or (root / COMPLETE).exists()):
        return False
    root.mkdir(parents=True, exist_ok=True)
    lock = DataDirLock(root)
    lock.acquire()
    try:
        if (staging / COMPLETE).exists():
            for step in swap_steps(root):
                step()
            log.warning("store %s: replaced by the snapshot received in %s", root, staging)
            return True
        if staging.exists():
            log.warning("store %s: dropping an incomplete snapshot in %s", root, staging)
            shutil.rmtree(staging)
        if (root / COMPLETE).exists():
            (root / COMPLETE).unlink()
        shutil.rmtree(old, ignore_errors=True)
        return False
    finally:
        lock.release()
