"""A snapshot of a commit-log store: a checkpoint and the files a new replica needs to open at
it, read while the store keeps writing (CLUSTER.md §3.3, snapshot resync).

`CommitLogStore.snapshot()` forces a fresh checkpoint and, holding the housekeeping lock (no
checkpoint or reclaim runs meanwhile), lists and opens what that checkpoint names:

- every commit-log segment holding bytes below its `log_end` (the last one only up to it);
- the consume-queue files of each of its queues, up to the queue's checkpointed length
  (a deleted queue's too, while the checkpoint still names it);
- the index files up to its active one, each up to its entry count.

Each file is opened here, so the snapshot holds its own descriptors: that is the pin. Retention
may delete a file while it ships (its last message acked, a newer checkpoint past it) and the
master may close its store (demotion): the bytes stay readable through the snapshot's
descriptor until `close`, and no housekeeping rule has to know about snapshots. The cost is the
same as a pin's: the disk space of a deleted file comes back when the snapshot closes.

The store keeps appending past `log_end` into the last segment, the consume queues and the
active index file while they ship; bytes below the checkpoint's marks never change. What a
file holds past them (entries appended since, index slots pointing at them) is cut on the
replica by crash recovery from the checkpoint (resync.py opens it that way), so only `length`
bytes of each file are shipped, the rest of its `size` being zeros on the replica.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from herald.core.errors import InternalError
from herald.storage.consume_queue import ENTRY_SIZE, ConsumeQueue
from herald.storage.index_file import ENTRY as INDEX_ENTRY
from herald.storage.index_file import HEADER as INDEX_HEADER
from herald.storage.index_file import SLOT as INDEX_SLOT

if TYPE_CHECKING:
    from herald.storage.checkpoint import Checkpoint
    from herald.storage.commitlog import CommitLogStore

CHUNK = 256 * 1024
"""The most bytes `Snapshot.chunks` reads at once (one SNAP_CHUNK frame)."""
CHECKPOINT_FILE = "checkpoint"


@attrs.frozen
class SnapshotFile:
    """One file of a snapshot: `relpath` under the store directory ('/'-separated), its full
    `size`, and the `length` bytes from its start that are shipped (the rest are zeros)."""

    relpath: str
    size: int
    length: int


class Snapshot:
    """A checkpoint and its files, each held open until `close` (see the module docstring).
    `read` blocks (pread): call it from a worker thread."""

    def __init__(self, checkpoint: Checkpoint, files: list[tuple[SnapshotFile, int]]) -> None:
        self.checkpoint = checkpoint
        self.checkpoint_bytes = checkpoint.to_bytes()
        self.files = tuple(file for file, _ in files)
        self._fds = [fd for _, fd in files]

    @property
    def log_end(self) -> int:
        return self.checkpoint.log_end

    @property
    def size(self) -> int:
        """The bytes shipped: every file's `length`, and the checkpoint."""
        return len(self.checkpoint_bytes) + sum(f.length for f in self.files)

    def read(self, index: int, at: int, length: int) -> bytes:
        """`length` bytes of file `index` from `at` (blocking)."""
        data = os.pread(self._fds[index], length, at)
        if len(data) != length:
            raise OSError(f"{self.files[index].relpath}: {len(data)} bytes at {at}, not {length}")
        return data

    def chunks(self, index: int) -> Iterator[tuple[int, int]]:
        """(at, length) of the reads that ship file `index`, each at most `CHUNK`."""
        length = self.files[index].length
        for at in range(0, length, CHUNK):
            yield at, min(CHUNK, length - at)

    def close(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)


Located = list[tuple[SnapshotFile, Path]]


def snapshot_files(store: CommitLogStore, checkpoint: Checkpoint) -> Located:
    """What `checkpoint` needs, as the store holds it now (Trio thread, under the housekeeping
    lock, so that nothing it names has been deleted; no I/O)."""
    end = checkpoint.log_end
    found = [
        (SnapshotFile(f"commitlog/{f.path.name}", f.size, min(f.size, end - f.start)), f.path)
        for f in store.log
        if f.start < end
    ]
    state = store.state
    queues = {cq.name: cq for cq in (s.cq for s in state.queues.values())}
    queues.update((cq.name, cq) for cq in state.retired if cq.name not in queues)
    for saved in checkpoint.queues.values():
        cq = queues.get(saved.directory)
        if cq is None:
            raise InternalError(f"the consume queue {saved.directory} of the checkpoint is gone")
        found += _queue_files(cq, saved.length)
    index = state.index
    if index is not None and checkpoint.index_file is not None:
        for index_file in index.files:
            if index_file.number > checkpoint.index_file:
                continue
            count = (
                checkpoint.index_count
                if index_file.number == checkpoint.index_file
                else index_file.count
            )
            head = INDEX_HEADER.size + index_file.slots * INDEX_SLOT.size
            file = index_file.file
            length = min(file.size, head + count * INDEX_ENTRY.size)
            found.append((SnapshotFile(f"index/{file.path.name}", file.size, length), file.path))
    return found


def _queue_files(cq: ConsumeQueue, length: int) -> Located:
    out = []
    for number, file in sorted(cq.files.items()):
        first = number * cq.per_file
        if first >= length:
            continue  # entries appended after the checkpoint only
        shipped = min(cq.per_file, length - first) * ENTRY_SIZE
        relpath = f"consumequeue/{cq.name}/{file.path.name}"
        out.append((SnapshotFile(relpath, file.size, shipped), file.path))
    return out


def open_snapshot(checkpoint: Checkpoint, files: Located) -> Snapshot:
    """Open every file (blocking): from here on the snapshot reads them whatever happens to
    their names."""
    opened: list[tuple[SnapshotFile, int]] = []
    try:
        for file, path in files:
            opened.append((file, os.open(path, os.O_RDONLY | os.O_CLOEXEC)))
    except BaseException:
        for _, fd in opened:
            os.close(fd)
        raise
    return Snapshot(checkpoint, opened)
