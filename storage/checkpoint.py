"""The data dir's small control files: the lock, the abort marker and the checkpoint.

- `lock`: held with `fcntl.flock` while a store is open, so two brokers (or two stores in one
  process) never write one data dir. It holds the owner's pid for the error message.
- `abort`: created when a store opens and removed after a clean close; finding it at open means
  the last run did not close cleanly, so recovery must scan the log after the checkpoint.
- `checkpoint`: the state of everything derived from the commit log (consume-queue lengths,
  ack state, delivery counts, next offsets, live totals and reference counts, metadata, index
  position) as of one commit-log offset, every
  byte of the log below which is durable. Written atomically (temp file, fsync, rename, fsync
  of the directory) with a CRC line; the previous one is kept as `checkpoint.prev`, and nothing
  it refers to is deleted, so a damaged checkpoint falls back to the one before.

All functions here block; the store calls them from worker threads.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from herald.core.errors import ConfigError

log = logging.getLogger(__name__)

FORMAT = 2
"""2: 32-byte consume-queue entries, offsets that only grow, totals saved. Format 1 data dirs
(before the first release) are refused with `ConfigError`: their consume queues cannot be read."""
CHECKPOINT = "checkpoint"
PREVIOUS = "checkpoint.prev"
ABORT = "abort"
LOCK = "lock"


class DataDirLock:
    """An exclusive lock on a data dir, held until `release`."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ConfigError(
                    f"broker.data_dir: {self.path.parent} is in use by another herald store "
                    f"(lock held by pid {holder}); stop it or choose another data_dir"
                ) from None
            raise
        # The pid is only for the message above: on a full disk the lock still holds without
        # it. Written before the file is cut to its length, so no block is given back first.
        pid = f"{os.getpid()}\n".encode()
        try:
            os.pwrite(fd, pid, 0)
            os.ftruncate(fd, len(pid))
        except OSError as exc:
            log.warning("cannot write the pid into %s: %s", self.path, exc)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def abort_marker_exists(directory: Path) -> bool:
    return (directory / ABORT).exists()


def set_abort_marker(directory: Path) -> None:
    (directory / ABORT).touch()
    sync_directory(directory)


def clear_abort_marker(directory: Path) -> None:
    (directory / ABORT).unlink(missing_ok=True)
    sync_directory(directory)


class UnsupportedFormat(ValueError):
    """A checkpoint written by a herald whose data dir layout this one cannot read."""


def _int_map(data: Mapping[str, Any]) -> dict[int, int]:
    return {int(k): int(v) for k, v in data.items()}


@attrs.frozen
class QueueCheckpoint:
    """One durable queue as of a checkpoint."""

    directory: str  # consume-queue directory name
    length: int  # consume-queue entries
    low: int  # every entry below is acked
    acked: tuple[int, ...]  # acked entries at or above `low`
    counts: Mapping[int, int]  # queue offset -> delivery count
    next_offset: int  # one past the highest queue offset ever appended

    def to_json(self) -> dict[str, Any]:
        return {
            "dir": self.directory,
            "length": self.length,
            "low": self.low,
            "acked": list(self.acked),
            "counts": {str(k): v for k, v in self.counts.items()},
            "next": self.next_offset,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueueCheckpoint:
        return cls(
            directory=str(data["dir"]),
            length=int(data["length"]),
            low=int(data["low"]),
            acked=tuple(int(i) for i in data["acked"]),
            counts=_int_map(data["counts"]),
            next_offset=int(data["next"]),
        )


@attrs.frozen
class Totals:
    """The ledger's running counts, so that opening a store need not recount them."""

    messages: int  # live messages
    bytes: int  # their stored bytes
    segments: Mapping[int, int]  # segment start -> live messages in it
    refs: Mapping[int, int]  # fan-out message offset -> live targets

    def to_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "bytes": self.bytes,
            "segments": {str(k): v for k, v in self.segments.items()},
            "refs": {str(k): v for k, v in self.refs.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Totals:
        return cls(
            messages=int(data["messages"]),
            bytes=int(data["bytes"]),
            segments=_int_map(data["segments"]),
            refs=_int_map(data["refs"]),
        )


@attrs.frozen
class Checkpoint:
    """Everything recovery needs besides the log itself."""

    segment_size: int
    log_end: int  # the log is durable below this; state below reflects records before it
    store_ms: int  # last store time in the log, so store times stay monotonic
    queues: Mapping[int, QueueCheckpoint]
    totals: Totals
    metadata: Mapping[str, Mapping[str, str]]  # kind -> key -> JSON text
    index_file: int | None  # the active index file and its entry count
    index_count: int

    def to_bytes(self) -> bytes:
        body = json.dumps(
            {
                "format": FORMAT,
                "segment_size": self.segment_size,
                "log_end": self.log_end,
                "store_ms": self.store_ms,
                "queues": {str(q): c.to_json() for q, c in self.queues.items()},
                "totals": self.totals.to_json(),
                "metadata": self.metadata,
                "index_file": self.index_file,
                "index_count": self.index_count,
            },
            separators=(",", ":"),
        ).encode()
        return body + f"\n{zlib.crc32(body):08x}\n".encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Checkpoint:
        """Parse a checkpoint file; ValueError if it is damaged."""
        body, _, crc = data.rstrip(b"\n").rpartition(b"\n")
        try:
            if int(crc, 16) != zlib.crc32(body):
                raise ValueError("CRC mismatch")
            raw = json.loads(body)
            if isinstance(raw.get("format"), int) and raw["format"] < FORMAT:
                raise UnsupportedFormat(f"checkpoint format {raw['format']}")
            if raw.get("format") != FORMAT:
                raise ValueError(f"unknown checkpoint format {raw.get('format')!r}")
            return cls(
                segment_size=int(raw["segment_size"]),
                log_end=int(raw["log_end"]),
                store_ms=int(raw["store_ms"]),
                queues={int(q): QueueCheckpoint.from_json(c) for q, c in raw["queues"].items()},
                totals=Totals.from_json(raw["totals"]),
                metadata={
                    str(kind): {str(k): str(v) for k, v in records.items()}
                    for kind, records in raw["metadata"].items()
                },
                index_file=None if raw["index_file"] is None else int(raw["index_file"]),
                index_count=int(raw["index_count"]),
            )
        except UnsupportedFormat:
            raise
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"damaged checkpoint: {exc!r}") from None


def write_checkpoint(directory: Path, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint atomically, keeping the one before as `checkpoint.prev`."""
    tmp = directory / (CHECKPOINT + ".tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(checkpoint.to_bytes())
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)  # a partial copy (ENOSPC) would only hold disk space
        raise
    current = directory / CHECKPOINT
    if current.exists():
        os.replace(current, directory / PREVIOUS)
    os.replace(tmp, current)
    sync_directory(directory)


@attrs.frozen
class Checkpoints:
    """What `read_checkpoints` found."""

    newest: Checkpoint | None
    previous: Checkpoint | None
    fell_back: bool  # `checkpoint` was missing or damaged while `checkpoint.prev` was read


def read_checkpoints(directory: Path) -> Checkpoints:
    """The newest readable checkpoint and the one before it, either None when absent or
    damaged. Falling back to `checkpoint.prev` means the newest state is not on record: the
    caller must replay the log after it, as after a crash.

    A checkpoint of an older format raises ConfigError: the data dir was written by a
    pre-release herald (consume queues of 20-byte entries, offsets that could repeat), which
    this version does not convert.
    """
    found: list[Checkpoint] = []
    current_ok = False
    for name in (CHECKPOINT, PREVIOUS):
        path = directory / name
        if not path.exists():
            continue
        try:
            found.append(Checkpoint.from_bytes(path.read_bytes()))
            current_ok = current_ok or name == CHECKPOINT
        except UnsupportedFormat as exc:
            raise ConfigError(
                f"broker.data_dir: the store in {directory} was written by a pre-release herald "
                f"({path.name}: {exc}; this version reads format {FORMAT}) and cannot be "
                "opened: drain its queues with the herald that wrote it, or move the data dir "
                "away to start empty"
            ) from None
        except (OSError, ValueError) as exc:
            log.error("ignoring %s: %s", path, exc)
    found.sort(key=lambda c: c.log_end, reverse=True)
    return Checkpoints(
        found[0] if found else None,
        found[1] if len(found) > 1 else None,
        fell_back=bool(found) and not current_ok,
    )
