"""The slave's side of HA replication (CLUSTER.md §3.3, §3.5, §4.1): a follower store fed by
the master's stream.

A slave runs no kernel and serves no client: `Follower.run(master)` opens the node's
commit-log store as a follower (its own flusher and checkpoints, nothing else), and streams
from whichever master `master()` names, reconnecting when the stream breaks:

1. HELLO (cluster, group, node, secret, the log's end);
2. EPOCHS: the master's history; `truncation_point` says where this log must end to be a
   prefix of the master's. Past it (an old master's unreplicated tail, a slave that took
   bytes a dead master never confirmed), the store closes, `truncate_offline` cuts the log
   and drops checkpoints past the cut, the epoch history is cut too, and the store reopens
   (crash replay up to the cut). No shared epoch at all, or no checkpoint left at or below
   the cut: the slave asks for a snapshot (START with `SNAPSHOT_OFFSET`);
3. START from the log's end; then DATA frames: a new epoch is appended to `store/epochs`
   before its first byte is written; `ReplicaWriter.write` puts the bytes at the master's
   offsets and applies every complete record as recovery does; the acker flushes and sends
   ACK(written, flushed) after each batch and each heartbeat.

Snapshot resync (snapshot.py): when the master answers START with SNAP_BEGIN (asked for, or
because it no longer holds the log from the slave's end), the snapshot is written into
`store.resync` while the old store stays open; then the stream ends, the old store closes
without a checkpoint, and its next open swaps the directories (storage/resync.py) and
reloads the epoch history that came with the snapshot; the slave dials again from the
snapshot's end. A snapshot that cannot be taken in (this node's store settings differ from
the master's) is asked for again after `SNAPSHOT_RETRY_S`.

A DATA frame of an epoch below the newest this slave has seen ends the stream: a stale
master. Cancelling `run` closes the stream first, then the store (cleanly: a promoted slave
opens it again as a master's).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from herald.cluster.config import split_address
from herald.cluster.frames import (
    SNAPSHOT_OFFSET,
    Ack,
    ConnectionClosed,
    Data,
    Epochs,
    Hello,
    Refuse,
    RefuseCode,
    Role,
    SnapBegin,
    Start,
)
from herald.cluster.ha.epochs import EpochEntry, EpochFile, truncation_point
from herald.cluster.ha.snapshot import Shipped, receive_snapshot
from herald.cluster.peer import Peer, PeerGone, leaves
from herald.core.message import CodecRegistry
from herald.storage.commitlog import CommitLogStore
from herald.storage.replica import ReplicaError, ReplicaWriter, truncate_offline
from herald.storage.resync import SnapshotError

if TYPE_CHECKING:
    from herald.cluster.config import ClusterConfig
    from herald.storage.commitlog_config import CommitLogConfig

log = logging.getLogger("herald.cluster.ha")

CONNECT_TIMEOUT_S = 2.0
SILENCE_S = 5.0
"""No frame from the master this long (it heartbeats every second): the stream is dead."""
RETRY_S = 0.5
SNAPSHOT_RETRY_S = 5.0
"""After a snapshot the master could not take, or this node could not take in, the next one
is asked for this much later."""


class NeedsSnapshot(Exception):
    """This log shares no epoch with the master's, or the master reclaimed what it needs."""


class Resynced(Exception):
    """A snapshot waits in the staging directory: close the store, so that it is swapped in."""


class Truncate(Exception):
    """The log must end at `offset` before it can follow this master."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


class Follower:
    """A slave's store and its HA stream. `applied`/`flushed`/`confirm_offset` say how far it
    is; `master_name` is the master it streams from now ("" between streams)."""

    def __init__(
        self,
        root: Path,
        store_config: CommitLogConfig,
        config: ClusterConfig,
        node: str,
        group: str,
        epochs: EpochFile,
    ) -> None:
        self.root = root
        self.store_config = store_config
        self.config = config
        self.node = node
        self.group = group
        self.epochs = epochs
        self.store: CommitLogStore | None = None
        self.writer: ReplicaWriter | None = None
        self.flushed = 0
        self.confirm_offset = 0
        self.streaming_from = ""
        self.truncations = 0
        self.snapshots = 0  # taken in
        self.last_snapshot: Shipped | None = None
        self.snapshot_wanted = ""  # why the next START asks for a snapshot ("": it does not)
        self.problem = ""
        self._stream_scope: trio.CancelScope | None = None

    def restream(self) -> None:
        """Drop the stream now and dial whichever master `master()` names next."""
        if self._stream_scope is not None:
            self._stream_scope.cancel()

    @property
    def applied(self) -> int:
        writer = self.writer
        return writer.applied if writer is not None else self.flushed

    # -- the whole role ----------------------------------------------------------------------
    async def run(self, master: Callable[[], Awaitable[str]]) -> None:
        """Follow the master `await master()` names (a cluster address), until cancelled."""
        while True:
            try:
                async with self._opened() as writer:
                    await self._follow(master, writer)
            except* Truncate as group:
                (cut,) = leaves(group)
                assert isinstance(cut, Truncate)
                try:
                    await self._truncate(cut.offset)
                except NeedsSnapshot as exc:
                    self.want_snapshot(str(exc))
            except* Resynced:
                self.snapshots += 1  # the store's next open swaps it in

    def want_snapshot(self, why: str) -> None:
        """Ask the master for a snapshot at the next START."""
        if not self.snapshot_wanted:
            log.warning("HA: %s asks its master for a snapshot: %s", self.node, why)
        self.snapshot_wanted = why

    @contextlib.asynccontextmanager
    async def _opened(self) -> AsyncIterator[ReplicaWriter]:
        store = CommitLogStore(self.root, self.store_config)
        await store.open(CodecRegistry())  # swaps in a snapshot received (resync.py)
        await trio.to_thread.run_sync(self.epochs.reload)  # which brings its own history
        await trio.to_thread.run_sync(self.epochs.truncate_after, store.log.write_offset)
        writer = ReplicaWriter(store)
        self.store, self.writer, self.flushed = store, writer, store.durable_ticket
        discarded = False
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(store.run_flusher)
                yield writer
                nursery.cancel_scope.cancel()
        except* (Truncate, Resynced):
            # No checkpoint past a cut: keep the ones below it. A store a snapshot replaces
            # needs none either.
            discarded = True
            raise
        finally:
            with trio.CancelScope(shield=True):
                self.flushed = writer.applied
                writer.discard_tail()
                self.store = self.writer = None
                await store.close(checkpoint=not discarded)

    async def _truncate(self, offset: int) -> None:
        log.warning("HA: %s cuts its log at %d to follow its master", self.node, offset)
        done = await trio.to_thread.run_sync(truncate_offline, self.root, self.store_config, offset)
        if not done:
            raise NeedsSnapshot(f"no checkpoint at or below {offset} is left")
        await trio.to_thread.run_sync(self.epochs.truncate_after, offset)
        self.truncations += 1

    async def _follow(self, master: Callable[[], Awaitable[str]], writer: ReplicaWriter) -> None:
        while True:
            address = await master()
            try:
                with trio.CancelScope() as self._stream_scope:
                    await self._stream(address, writer)
            except* (PeerGone, OSError, ReplicaError, NeedsSnapshot, trio.TooSlowError) as group:
                reason = "; ".join(str(exc) or type(exc).__name__ for exc in leaves(group))
                self.problem = f"{address}: {reason}"
                log.info("HA: %s: stream from %s ended: %s", self.node, address, reason)
                refused = [exc for exc in leaves(group) if isinstance(exc, NeedsSnapshot)]
                if refused and self.snapshot_wanted:
                    await trio.sleep(SNAPSHOT_RETRY_S)  # the master could not take one
                for exc in refused:
                    self.want_snapshot(str(exc))
            except* SnapshotError as group:
                reason = "; ".join(map(str, leaves(group)))
                self.problem = f"{address}: cannot take its snapshot: {reason}"
                log.error("HA: %s %s", self.node, self.problem)
                await trio.sleep(SNAPSHOT_RETRY_S)
            finally:
                self.streaming_from = ""
                self._stream_scope = None
            await trio.sleep(RETRY_S)

    # -- one stream --------------------------------------------------------------------------
    async def _stream(self, address: str, writer: ReplicaWriter) -> None:
        where = split_address(address)
        if where is None:
            raise PeerGone(f"no master address ({address!r})")
        with trio.fail_after(CONNECT_TIMEOUT_S):
            stream = await trio.open_tcp_stream(*where)
        peer = Peer(stream, Role.HA_SLAVE, f"master {address}")
        try:
            config = self.config
            await peer.send(
                Hello(config.name, self.group, self.node, config.secret, writer.applied)
            )
            answer = await self._receive(peer)
            if not isinstance(answer, Epochs):
                raise PeerGone(f"answered HELLO with {answer!r}")
            start = self._start_offset(answer, writer.applied)
            await peer.send(Start(start))
            self.streaming_from = address
            self.problem = ""
            if start != SNAPSHOT_OFFSET:
                log.info(
                    "HA: %s streams from %s at %d (epoch %d)",
                    self.node, address, start, answer.epoch,
                )  # fmt: skip
            first = await self._receive(peer)
            if isinstance(first, SnapBegin):  # asked for, or the master lacks the log from `start`
                await self._take_snapshot(peer, first, address)
            wake = trio.Event()
            async with trio.open_nursery() as nursery:
                wakes = [wake]
                nursery.start_soon(self._ack, peer, writer, wakes)
                await self._receive_data(peer, writer, wakes, first)
                nursery.cancel_scope.cancel()
        finally:
            await peer.aclose()

    async def _take_snapshot(self, peer: Peer, first: SnapBegin, address: str) -> None:
        log.warning("HA: %s takes a snapshot from %s", self.node, address)
        shipped = await receive_snapshot(peer, first, self.root, self.store_config, self._receive)
        self.snapshot_wanted, self.last_snapshot = "", shipped
        log.warning("HA: %s took a snapshot: %s", self.node, shipped.describe())
        raise Resynced

    def _start_offset(self, answer: Epochs, end: int) -> int:
        local = self.epochs.entries
        master = tuple(EpochEntry(e.epoch, e.start) for e in answer.epochs)
        last = self.epochs.last
        if last is not None and answer.epoch < last.epoch:
            raise PeerGone(f"a stale master (epoch {answer.epoch} < {last.epoch})")
        if self.snapshot_wanted:
            return SNAPSHOT_OFFSET
        point = truncation_point(local, end, master, answer.master_max)
        if point is None:
            if end == 0 and not local:
                return 0  # a new node: everything comes from the master (or a snapshot)
            self.want_snapshot("no epoch in common with the master")
            return SNAPSHOT_OFFSET
        if point < end:
            raise Truncate(point)
        return point

    async def _receive(self, peer: Peer) -> object:
        frame: object = None
        with trio.move_on_after(SILENCE_S):
            frame = await peer.receive()
        if frame is None:
            raise PeerGone(f"master silent for {SILENCE_S:g} s")
        if isinstance(frame, ConnectionClosed):
            raise PeerGone("master closed the stream")
        if isinstance(frame, Refuse):
            if frame.code is RefuseCode.OFFSET_UNAVAILABLE:
                raise NeedsSnapshot(frame.text)
            raise PeerGone(f"refused ({frame.code.name}): {frame.text}")
        return frame

    async def _receive_data(
        self, peer: Peer, writer: ReplicaWriter, wakes: list[trio.Event], frame: object
    ) -> None:
        """Take DATA frames, `frame` the first of them, until the stream ends."""
        epochs = self.epochs
        while True:
            if not isinstance(frame, Data):
                raise PeerGone(f"sent {type(frame).__name__} while streaming")
            last = epochs.last
            newest = last.epoch if last is not None else 0
            if frame.epoch < newest:
                raise PeerGone(f"DATA of epoch {frame.epoch} after epoch {newest}: a stale master")
            if frame.epoch > newest and frame.epoch_start <= writer.written:
                await trio.to_thread.run_sync(epochs.append, frame.epoch, frame.epoch_start)
            if frame.payload:
                writer.write(frame.offset, frame.payload)
            self.confirm_offset = max(self.confirm_offset, frame.confirm_offset)
            wakes[0].set()
            frame = await self._receive(peer)

    async def _ack(self, peer: Peer, writer: ReplicaWriter, wakes: list[trio.Event]) -> None:
        while True:
            await wakes[0].wait()
            wakes[0] = trio.Event()
            self.flushed = await writer.flush()
            await peer.send(Ack(writer.written, self.flushed))
