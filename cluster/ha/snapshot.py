"""Snapshot resync over the HA stream (CLUSTER.md §3.3, §4.1): a slave that cannot stream from
its own log's end gets a snapshot of the master's store, then streams from the snapshot's end.

When: the slave asks, with START(`SNAPSHOT_OFFSET`), because its log shares no epoch with
the master's or no checkpoint is left at or below where it must cut; or the master finds it no
longer holds every segment from START's offset on (a new node after the master reclaimed its
first segments, a slave away longer than retention kept what it needs).

The master (`send_snapshot`): `store.snapshot()` (a fresh checkpoint, the files it names held
open, storage/snapshot.py), SNAP_BEGIN with the checkpoint, per file SNAP_FILE(name, size)
and its bytes in SNAP_CHUNKs of at most 256 KiB, each read with `pread` in a worker thread,
then its epoch history as the file `epochs` (cut at the snapshot's end: what the slave's log
holds), then SNAP_END(log_end). A checkpoint too large for one frame goes as the file
`checkpoint` after an empty SNAP_BEGIN. The master's sender then goes on with DATA from
log_end on the same stream.

The slave (`receive_snapshot`): writes them into `store.resync` with storage/resync.py's
`SnapshotWriter` and finishes it (everything fsynced, the marker last), sending ACK(0, 0)
every second meanwhile: the master drops a slave silent for 5 s, and it counts an ACK below the
snapshot's end as a keepalive only. The slave then hangs up rather than stream on: the swap
needs its old store closed, and the new store's first open (crash recovery from the
checkpoint, the index's slots rebuilt) may take longer than the master waits for an ACK. The
next open of the store swaps the directories (`finish_swap`), and the slave dials again:
HELLO with the snapshot's end, whose epoch history now matches the master's, START there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from herald.cluster.frames import (
    MAX_FRAME,
    Ack,
    SnapBegin,
    SnapChunk,
    SnapEnd,
    SnapFile,
)
from herald.cluster.ha.epochs import EPOCHS, encode, truncated
from herald.cluster.peer import PeerGone
from herald.storage.resync import SnapshotError, SnapshotWriter
from herald.storage.snapshot import CHECKPOINT_FILE, CHUNK

if TYPE_CHECKING:
    from herald.cluster.ha.epochs import EpochEntry
    from herald.cluster.peer import Peer
    from herald.storage.commitlog import CommitLogStore
    from herald.storage.commitlog_config import CommitLogConfig

log = logging.getLogger("herald.cluster.ha")

KEEPALIVE_S = 1.0
"""How often a slave receiving a snapshot ACKs (the master drops one silent for 5 s)."""


@attrs.frozen
class Shipped:
    """One snapshot, as sent or received."""

    log_end: int
    files: int
    bytes: int
    seconds: float

    def describe(self) -> str:
        rate = self.bytes / max(self.seconds, 1e-9) / 1e6
        return (
            f"{self.files} files, {self.bytes / 1e6:.1f} MB up to offset {self.log_end} "
            f"in {self.seconds:.2f} s ({rate:.1f} MB/s)"
        )


async def send_snapshot(
    peer: Peer,
    store: CommitLogStore,
    epochs: tuple[EpochEntry, ...],
    started: Callable[[int], None],
) -> Shipped:
    """Ship a snapshot of `store` (see the module docstring); `started(log_end)` is called
    just before SNAP_BEGIN. The snapshot's files are closed on return, whatever happened."""
    begun = time.perf_counter()
    snapshot = await store.snapshot()
    try:
        log_end = snapshot.log_end
        started(log_end)
        checkpoint = snapshot.checkpoint_bytes
        inline = 1 + len(checkpoint) <= MAX_FRAME
        await peer.send(SnapBegin(checkpoint if inline else b""))
        if not inline:
            await _send_file(peer, CHECKPOINT_FILE, checkpoint)
        for index, file in enumerate(snapshot.files):
            await peer.send(SnapFile(file.relpath, file.size))
            for at, length in snapshot.chunks(index):
                data = await trio.to_thread.run_sync(snapshot.read, index, at, length)
                await peer.send(SnapChunk(data))
        history = encode(truncated(epochs, log_end))
        await _send_file(peer, EPOCHS, history)
        await peer.send(SnapEnd(log_end))
        shipped = snapshot.size + len(history)
        seconds = time.perf_counter() - begun
        files = len(snapshot.files) + 1 + (not inline)  # the epoch history, the checkpoint
        return Shipped(log_end, files, shipped, seconds)
    finally:
        snapshot.close()


async def _send_file(peer: Peer, relpath: str, data: bytes) -> None:
    await peer.send(SnapFile(relpath, len(data)))
    for at in range(0, len(data), CHUNK):
        await peer.send(SnapChunk(data[at : at + CHUNK]))


Receive = Callable[["Peer"], Awaitable[object]]


async def receive_snapshot(
    peer: Peer, first: SnapBegin, root: Path, config: CommitLogConfig, receive: Receive
) -> Shipped:
    """Write the snapshot SNAP_BEGIN `first` starts into the staging directory of the store at
    `root` and finish it, ready to swap in; `receive(peer)` gives each next frame. A failure
    leaves no staging directory behind."""
    begun = time.perf_counter()
    writer = SnapshotWriter(root, config, extra=(EPOCHS,))

    async def run(step: Callable[..., object], *args: Any) -> None:
        try:
            await trio.to_thread.run_sync(step, *args)
        except OSError as exc:  # the disk's: the next try is no sooner than a refused one
            raise SnapshotError(f"cannot write the snapshot in {writer.staging}: {exc}") from exc

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_keepalive, peer)
            await run(writer.begin, first.checkpoint)
            end: int | None = None
            while end is None:
                frame = await receive(peer)
                if isinstance(frame, SnapChunk):
                    await run(writer.write, frame.data)
                elif isinstance(frame, SnapFile):
                    await run(writer.open_file, frame.relpath, frame.size)
                elif isinstance(frame, SnapEnd):
                    await run(writer.finish, frame.log_end)
                    end = frame.log_end
                else:
                    raise PeerGone(f"sent {type(frame).__name__} inside a snapshot")
            nursery.cancel_scope.cancel()
    except BaseException:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(writer.abandon)
        raise
    return Shipped(end, writer.files, writer.bytes, time.perf_counter() - begun)


async def _keepalive(peer: Peer) -> None:
    while True:
        await peer.send(Ack(0, 0))
        await trio.sleep(KEEPALIVE_S)
