"""The node's epoch history (`store/epochs`) and where a rejoining node must cut its log.

Each line of the file is `<epoch> <start_offset>`: a master term and the commit-log offset of
its first byte. A master appends its epoch before it accepts writes; a slave appends the
master's as the first byte of each term arrives (CLUSTER.md §3.3). Two histories tell how much
of two logs is the same bytes without reading them: etcd grants an epoch number once, to one
master, which fixes its start, so `(epoch, start)` on two nodes names that master's bytes from
`start` on (RocketMQ 5's `EpochFileCache`).

The history functions are pure. `EpochFile` blocks (fsync): call it from a worker thread.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from herald.core.errors import HeraldError
from herald.storage.checkpoint import sync_directory

log = logging.getLogger(__name__)

EPOCHS = "epochs"
MAX_EPOCH = 2**32 - 1  # epochs travel as u32 in HA frames
MAX_OFFSET = 2**64 - 1
_LINE = re.compile(rb"([0-9]{1,20}) ([0-9]{1,20})")

_u32 = [attrs.validators.instance_of(int), attrs.validators.ge(0), attrs.validators.le(MAX_EPOCH)]
_u64 = [attrs.validators.instance_of(int), attrs.validators.ge(0), attrs.validators.le(MAX_OFFSET)]


@attrs.frozen
class EpochEntry:
    """A master term and the log offset of its first byte."""

    epoch: int = attrs.field(validator=_u32)
    start_offset: int = attrs.field(validator=_u64)


class EpochError(HeraldError, ValueError):
    """A history out of order: epochs must rise, starts may not go back."""


class EpochFileError(EpochError):
    """`store/epochs` is damaged (beyond a torn last line); names the file and line."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line


def epochs_path(data_dir: Path) -> Path:
    """`<data_dir>/store/epochs`: beside the commit log it describes (commitlog_plugin's root)."""
    return data_dir / "store" / EPOCHS


def order_error(last: EpochEntry | None, entry: EpochEntry) -> str | None:
    """Why `entry` may not follow `last`, or None."""
    if last is None:
        return None
    if entry.epoch <= last.epoch:
        # Terms only grow: a repeated or lower epoch is a stale master's, or a bug.
        return f"epoch {entry.epoch} is not above the previous epoch {last.epoch}"
    if entry.start_offset < last.start_offset:
        # A term starts where the log ended; the log never shrinks under a running term.
        return (
            f"epoch {entry.epoch} starts at {entry.start_offset}, "
            f"below the previous start {last.start_offset}"
        )
    return None  # an equal start is an epoch that wrote nothing before the next one began


def checked(entries: Iterable[EpochEntry]) -> tuple[EpochEntry, ...]:
    """`entries` as a tuple; EpochError unless they are in order (e.g. a master's list)."""
    result = tuple(entries)
    for i in range(1, len(result)):
        problem = order_error(result[i - 1], result[i])
        if problem is not None:
            raise EpochError(f"epoch history entry {i}: {problem}")
    return result


def appended(
    entries: tuple[EpochEntry, ...], epoch: int, start_offset: int
) -> tuple[EpochEntry, ...]:
    """`entries` plus `(epoch, start_offset)`; EpochError if it would break the order."""
    entry = EpochEntry(epoch, start_offset)
    problem = order_error(entries[-1] if entries else None, entry)
    if problem is not None:
        raise EpochError(f"refusing to append epoch {epoch} at {start_offset}: {problem}")
    return (*entries, entry)


def truncated(entries: Sequence[EpochEntry], offset: int) -> tuple[EpochEntry, ...]:
    """The history of a log cut to end at `offset`.

    Epochs starting at or past the new end own no byte of it and are dropped (RocketMQ's
    `truncateSuffixByOffset` drops `start >= offset` too); the epoch of the last kept byte
    stays. Keeping an empty stale epoch at the end would block the append of the master's
    epoch that owns the next byte when that epoch is older (its start lower).
    """
    return tuple(e for e in entries if e.start_offset < offset)


def epoch_at(entries: Sequence[EpochEntry], offset: int) -> int | None:
    """The epoch that wrote the byte at `offset`, None before the first epoch.

    The newest epoch starting at or below `offset`: of epochs with equal starts only the
    last wrote anything. Past the log end this answers the epoch the next byte belongs to.
    """
    for entry in reversed(entries):
        if entry.start_offset <= offset:
            return entry.epoch
    return None


def _end(entries: Sequence[EpochEntry], i: int, log_end: int) -> int:
    # An epoch ends where the next one starts, the last at the log end; never past the log
    # end, since a crash can cut the log below an epoch already recorded.
    following = entries[i + 1].start_offset if i + 1 < len(entries) else log_end
    return min(following, log_end)


def truncation_point(
    local: Sequence[EpochEntry],
    local_end: int,
    master: Sequence[EpochEntry],
    master_end: int,
) -> int | None:
    """Where this node's log must end to be a prefix of the master's, or None (snapshot).

    RocketMQ 5's `findLastConsistentPoint`:
    - walk the local epochs from the newest: the newest shared epoch bounds the most bytes;
    - an epoch counts as shared only with the same number and start: a number seen with two
      starts is not one master's term (etcd's counter started over, or a damaged file);
    - T = min(local end, master end) of that epoch: within it both hold that one master's
      bytes, and before its start both were consistent with it (each cut to it first);
    - no shared epoch, or an empty history on either side (a new node, or a data dir
      without history) -> None: nothing proves any byte is shared, so resync from a snapshot.
    T may equal `local_end` (nothing to cut) and may be below the epoch's start when a crash
    cut the log below it.
    """
    if local_end < 0 or master_end < 0:
        raise ValueError(f"log ends must not be negative: {local_end}, {master_end}")
    local = checked(local)
    master = checked(master)
    on_master = {entry.epoch: i for i, entry in enumerate(master)}
    for i in range(len(local) - 1, -1, -1):
        j = on_master.get(local[i].epoch)
        if j is None or master[j].start_offset != local[i].start_offset:
            continue
        return min(_end(local, i, local_end), _end(master, j, master_end))
    return None


def encode(entries: Iterable[EpochEntry]) -> bytes:
    """The file's bytes for a history: `<epoch> <start_offset>` lines."""
    return "".join(f"{e.epoch} {e.start_offset}\n" for e in entries).encode("ascii")


class EpochFile:
    """`store/epochs`: the history on disk, each change durable before it returns.

    Every change rewrites the whole file (temp file, fsync, rename, fsync of the directory),
    like the checkpoint: the file gains a line per election, so the rewrite costs two fsyncs
    either way; `truncate_after` must rewrite anyway; and a rename leaves the old list or the
    new one, never a half line or a page of zeros from an interrupted append. The directory
    must exist (the store creates it): a missing one is an error, not a new data dir.

    After an OSError the file holds the old list or the new one; `entries` says which the
    file now names, but reload before trusting it.
    """

    def __init__(self, path: Path, entries: Iterable[EpochEntry] = ()) -> None:
        """A history as `load` found it at `path`; nothing is written."""
        self.path = path
        self._entries = checked(entries)

    @classmethod
    def load(cls, path: Path) -> EpochFile:
        """Read `path`: missing = empty history; a torn last line is dropped.

        A last line without its newline is a write that never finished (a crash, a file
        copied while written) and is dropped with a warning. Anything else malformed or out
        of order raises EpochFileError naming the file and line: guessing would pick a
        truncation point from a history nobody wrote.
        """
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls(path)
        lines = data.split(b"\n")
        torn = lines.pop()  # b"" when the file ends with a newline
        if torn:
            log.warning("%s: dropping the torn last line %r", path, torn[:40])
        entries: list[EpochEntry] = []
        for number, line in enumerate(lines, 1):
            match = _LINE.fullmatch(line)
            if match is None:
                raise EpochFileError(path, number, f"not '<epoch> <start_offset>': {line[:40]!r}")
            epoch, start = int(match[1]), int(match[2])
            if epoch > MAX_EPOCH or start > MAX_OFFSET:
                raise EpochFileError(path, number, f"out of range: {line[:40]!r}")
            entry = EpochEntry(epoch, start)
            problem = order_error(entries[-1] if entries else None, entry)
            if problem is not None:
                raise EpochFileError(path, number, problem)
            entries.append(entry)
        return cls(path, entries)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    @property
    def last(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def epoch_at(self, offset: int) -> int | None:
        """The epoch that wrote the byte at `offset` (see `epoch_at`)."""
        return epoch_at(self._entries, offset)

    def append(self, epoch: int, start_offset: int) -> None:
        """Add `(epoch, start_offset)`, durable on return; EpochError if out of order."""
        try:
            entries = appended(self._entries, epoch, start_offset)
        except EpochError as exc:
            raise EpochError(f"{self.path}: {exc}") from None
        self._write(entries)

    def truncate_after(self, offset: int) -> None:
        """Cut the history to a log ending at `offset` (see `truncated`), durable on return.

        Also due at every open with the recovered log end: a crash can cut the log below an
        epoch already recorded, and the next promotion's append at the log end would be refused.
        """
        entries = truncated(self._entries, offset)
        if entries != self._entries:
            self._write(entries)

    def reload(self) -> None:
        """Read the file again (blocking): a snapshot resync replaced it under this object."""
        self._entries = EpochFile.load(self.path).entries

    def _write(self, entries: tuple[EpochEntry, ...]) -> None:
        text = encode(entries)
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(tmp, "wb") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a partial copy would only be found and ignored
            raise
        self._entries = entries
        sync_directory(self.path.parent)  # the rename itself is durable only after this
