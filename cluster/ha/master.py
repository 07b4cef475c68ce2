"""The master's side of HA replication (CLUSTER.md §3.1-3.3, §4.1): one stream per slave, and
the sync set's upkeep.

`HAMaster.serve(peer, hello)` runs one slave's stream once the cluster port has read its
HELLO: check the cluster, group and secret; answer EPOCHS (this master's epoch history and log
end, from which the slave computes where its log must end); take START; then two tasks:

- the sender reads the commit log with `MappedFileQueue.read` (pread, ≤ 256 KiB, never across
  a segment end nor an epoch boundary, so each DATA frame names the one epoch that wrote its
  bytes) and sends DATA frames; woken by the store's `append_listener`, not by polling; an
  idle second sends an empty DATA (the heartbeat);
- the reader takes ACKs: the slave's written and flushed offsets. One acked above the
  master's log end is refused (RocketMQ #3015: that slave holds bytes this master never
  wrote) and the stream ends. A slave silent for `SILENCE_S` is dropped.

A slave that asks for a snapshot in START, or whose START offset this master no longer holds
every segment from (reclaimed), first gets a snapshot (snapshot.py); the sender then streams
on from the snapshot's end. While it ships, an ACK below that end only keeps the stream alive,
and retention keeps what follows the snapshot's end for that slave.

`last_caught_up` is RocketMQ 5's: the send time of the newest frame whose master log end the
slave has acked, i.e. "the slave held everything the master had at that time". The upkeep task
moves slaves in and out of the sync set from it (§3.2): out when it is older than
`max_lag_ms` or the slave is gone for `RECONNECT_GRACE_S`; in when its ack reaches the
gate's confirm offset and it is caught up. **Each change is written to etcd first**
(`change_sync_set`, a compare-and-swap on this master's claim); the gate waits for the new set
only after etcd took it, so every sync set etcd ever held names nodes that hold every
confirmed record.
"""

from __future__ import annotations

import bisect
import collections
import hmac
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import attrs
import trio

from herald.cluster.frames import (
    Ack,
    ConnectionClosed,
    Data,
    Epochs,
    EpochStart,
    Hello,
    HelloFlags,
    Refuse,
    RefuseCode,
    Start,
)
from herald.cluster.ha.gate import AckAboveEnd
from herald.cluster.ha.snapshot import send_snapshot
from herald.cluster.peer import Peer, PeerGone, leaves
from herald.core.errors import HeraldError

if TYPE_CHECKING:
    from herald.cluster.config import ClusterConfig
    from herald.cluster.ha.store import ReplicatedCommitLogStore

log = logging.getLogger("herald.cluster.ha")

CHUNK = 256 * 1024
"""The most bytes one DATA frame carries (RocketMQ sends 32 KiB)."""
HEARTBEAT_S = 1.0
SILENCE_S = 5.0
"""A slave that sent no ACK this long is dropped (RocketMQ: 20 s)."""
RECONNECT_GRACE_S = 1.0
"""A sync-set slave disconnected this long leaves the sync set."""
UPKEEP_S = 0.1
RETAIN_WINDOW_S = 3600.0
"""Slaves seen within this long keep the segments they still need (retention floor)."""
IN_FLIGHT = 4096
"""At most this many sent frames remembered per slave for `last_caught_up`."""

ChangeSyncSet = Callable[[frozenset[str]], Awaitable[bool]]


class Pulse:
    """Wakes every waiter at the next `notify` (the store's append listener calls it per
    record: one attribute test when nobody waits)."""

    def __init__(self) -> None:
        self._event: trio.Event | None = None

    def notify(self, _offset: int = 0) -> None:
        event = self._event
        if event is not None:
            self._event = None
            event.set()

    async def wait(self, timeout: float) -> None:
        if self._event is None:
            self._event = trio.Event()
        with trio.move_on_after(timeout):
            await self._event.wait()


@attrs.define(eq=False)
class SlaveLink:
    """What the master knows of one slave."""

    node: str
    learner: bool = False
    connected: bool = False
    since: float = 0.0  # when it connected, or when it went away
    written: int = 0
    flushed: int = 0
    acked: int = 0  # what the gate counts: flushed, or written (cluster.slave_ack)
    last_caught_up: float = -math.inf
    last_seen: float = 0.0
    snapshot_end: int | None = None  # of the snapshot shipped on its current stream
    sent: collections.deque[tuple[int, float]] = attrs.field(
        factory=lambda: collections.deque(maxlen=IN_FLIGHT)
    )

    def caught_up_by(self, acked: int) -> None:
        """The slave acked `acked`: the newest frame whose master end it covers dates it."""
        sent = self.sent
        while sent and sent[0][0] <= acked:
            self.last_caught_up = sent.popleft()[1]

    def lag_ms(self, now: float, log_end: int) -> float | None:
        """How long ago the slave last held everything the master had; None while it is
        disconnected or never caught up."""
        if self.acked >= log_end:
            return 0.0
        if not self.connected or self.last_caught_up == -math.inf:
            return None
        return round(max(0.0, (now - self.last_caught_up) * 1000), 1)


class HAMaster:
    """A master's HA streams and sync set. `run` is its upkeep task (in the broker's life);
    the cluster port hands it each slave's stream through `serve`."""

    def __init__(
        self,
        store: ReplicatedCommitLogStore,
        config: ClusterConfig,
        node: str,
        group: str,
        change_sync_set: ChangeSyncSet,
    ) -> None:
        self.store = store
        self.gate = store.gate
        self.config = config
        self.node = node
        self.group = group
        self.change_sync_set = change_sync_set
        self.slaves: dict[str, SlaveLink] = {}
        self.pulse = Pulse()
        self.started = trio.current_time()
        self._changed = trio.Event()
        self._streams: set[trio.CancelScope] = set()
        self.closed = False
        self.snapshots = 0  # shipped
        store.append_listener = self.pulse.notify

    def close(self) -> None:
        """End every stream now (the node is no longer master: its store is about to close,
        and its slaves must dial the new master); later HELLOs are refused."""
        self.closed = True
        for scope in self._streams:
            scope.cancel()

    # -- what it reports ---------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.store.epoch

    def lags(self) -> dict[str, dict[str, float | int | bool | None]]:
        """Per slave: connected, in the sync set, acked offset, lag in bytes and ms."""
        now, end = trio.current_time(), self.store.log.write_offset
        sync_set = self.gate.sync_set
        return {
            link.node: {
                "connected": link.connected,
                "in_sync": link.node in sync_set,
                "acked": link.acked,
                "lag_bytes": max(0, end - link.acked),
                "lag_ms": link.lag_ms(now, end),
            }
            for link in self.slaves.values()
        }

    # -- one slave's stream ------------------------------------------------------------------
    def refusal(self, hello: Hello) -> Refuse | None:
        """Why this HELLO is refused, or None."""
        config = self.config
        if not hmac.compare_digest(hello.secret.encode(), config.secret.encode()):
            return Refuse(RefuseCode.BAD_SECRET, "wrong cluster secret")
        if hello.cluster != config.name or hello.group != self.group:
            return Refuse(
                RefuseCode.NOT_MASTER,
                f"{self.node} is master of group {self.group!r} in cluster {config.name!r}, "
                f"not of {hello.group!r} in {hello.cluster!r}",
            )
        if hello.node == self.node:
            return Refuse(RefuseCode.NOT_MASTER, f"{hello.node} is this master")
        if self.gate.refusal is not None:
            return Refuse(RefuseCode.NOT_MASTER, self.gate.refusal.reply_text)
        if self.closed:
            return Refuse(RefuseCode.NOT_MASTER, f"{self.node} is no longer master")
        return None

    async def serve(self, peer: Peer, hello: Hello) -> None:
        """Run one slave's stream until it ends or `close` (see the module docstring)."""
        with trio.CancelScope() as scope:
            self._streams.add(scope)
            try:
                await self._serve(peer, hello)
            finally:
                self._streams.discard(scope)

    async def _serve(self, peer: Peer, hello: Hello) -> None:
        refusal = self.refusal(hello)
        if refusal is not None:
            log.warning("HA: refusing %s: %s", hello.node, refusal.text)
            await peer.send(refusal)
            return
        store = self.store
        entries = tuple(EpochStart(e.epoch, e.start_offset) for e in store.epochs.entries)
        await peer.send(Epochs(self.epoch, store.log.write_offset, entries))
        with trio.move_on_after(SILENCE_S):
            start = await peer.receive()
        if not isinstance(start, Start):
            return  # silent, closed, or refused: the slave dials again
        snapshot = start.wants_snapshot
        problem = None if snapshot else self._unavailable(start.from_offset)
        if problem is not None and problem.code is RefuseCode.OFFSET_UNAVAILABLE:
            log.info("HA: %s gets a snapshot: %s", hello.node, problem.text)
            snapshot, problem = True, None
        if problem is not None:
            log.warning("HA: %s cannot stream from %d: %s", hello.node, start.from_offset, problem)
            await peer.send(problem)
            return
        position = 0 if start.wants_snapshot else start.from_offset
        link = self.slaves.get(hello.node)
        if link is None or link.connected:
            link = self.slaves[hello.node] = SlaveLink(hello.node)
        link.learner = bool(hello.flags & HelloFlags.ASYNC_LEARNER)
        link.connected, link.since, link.last_seen = True, trio.current_time(), trio.current_time()
        link.written = link.flushed = link.acked = position
        link.snapshot_end = None
        if snapshot:  # it holds nothing of this log now: out of the sync set at the next upkeep
            link.last_caught_up = -math.inf
            link.sent.clear()
        else:
            log.info("HA: slave %s streams from %d (epoch %d)", hello.node, position, self.epoch)
        try:
            async with trio.open_nursery() as nursery:
                scope = nursery.cancel_scope
                nursery.start_soon(self._send, peer, link, position, scope, snapshot)
                await self._read_acks(peer, link)
                nursery.cancel_scope.cancel()
        except* PeerGone as group:
            log.info("HA: slave %s gone: %s", hello.node, "; ".join(map(str, leaves(group))))
        finally:
            if self.slaves.get(hello.node) is link:
                link.connected, link.since = False, trio.current_time()
            self._changed.set()

    def _unavailable(self, offset: int) -> Refuse | None:
        """Why the log cannot be streamed from `offset`: past its end, or a segment between
        `offset` and the end was reclaimed (retention deletes segments in the middle too)."""
        log_files = self.store.log
        end = log_files.write_offset
        if offset > end:
            return Refuse(
                RefuseCode.STALE_EPOCH, f"offset {offset} is past this master's log end {end}"
            )
        files = log_files.files
        for start in range(log_files.segment_start(offset), end, log_files.size):
            if start not in files:
                return Refuse(
                    RefuseCode.OFFSET_UNAVAILABLE,
                    f"the segment at {start} was reclaimed (the log from {offset} is needed)",
                )
        return None

    def _epoch_of(self, position: int) -> tuple[int, int, int | None]:
        """(epoch, its start, the next epoch's start or None) for the byte at `position`."""
        entries = self.store.epochs.entries
        starts = [e.start_offset for e in entries]
        i = bisect.bisect_right(starts, position) - 1
        if i < 0:
            return 0, 0, starts[0] if starts else None
        following = starts[i + 1] if i + 1 < len(starts) else None
        return entries[i].epoch, entries[i].start_offset, following

    async def _ship(self, peer: Peer, link: SlaveLink) -> int | None:
        """Ship a snapshot to `link`'s slave: its end, or None (refused: no snapshot could be
        taken or read)."""

        def started(log_end: int) -> None:
            link.snapshot_end = log_end

        log.info("HA: shipping a snapshot to %s", link.node)
        try:
            shipped = await send_snapshot(peer, self.store, self.store.epochs.entries, started)
        except (HeraldError, OSError) as exc:
            log.error("HA: no snapshot for %s: %s", link.node, exc)
            await peer.send(Refuse(RefuseCode.OFFSET_UNAVAILABLE, f"no snapshot: {exc}"))
            return None
        self.snapshots += 1
        log.warning("HA: shipped a snapshot to %s: %s", link.node, shipped.describe())
        return shipped.log_end

    async def _send(
        self,
        peer: Peer,
        link: SlaveLink,
        position: int,
        scope: trio.CancelScope,
        snapshot: bool = False,
    ) -> None:
        log_files = self.store.log
        if snapshot:
            end = await self._ship(peer, link)
            if end is None:
                scope.cancel()
                return
            position = end
        last_sent = trio.current_time()
        while True:
            end = log_files.write_offset
            if position < end:
                epoch, epoch_start, following = self._epoch_of(position)
                stop = min(end, log_files.segment_start(position) + log_files.size)
                if following is not None:
                    stop = min(stop, following)
                size = min(stop - position, CHUNK)
                data = log_files.read(position, size)
                if data is None:
                    await peer.send(
                        Refuse(RefuseCode.OFFSET_UNAVAILABLE, f"offset {position} was reclaimed")
                    )
                    scope.cancel()
                    return
                await peer.send(Data(epoch, epoch_start, position, self.gate.confirmed, data))
                position += size
            else:
                now = trio.current_time()
                if now - last_sent < HEARTBEAT_S:
                    await self.pulse.wait(last_sent + HEARTBEAT_S - now)
                    continue
                epoch, epoch_start, _ = self._epoch_of(position)
                await peer.send(Data(epoch, epoch_start, position, self.gate.confirmed))
            last_sent = trio.current_time()
            link.sent.append((log_files.write_offset, last_sent))

    async def _read_acks(self, peer: Peer, link: SlaveLink) -> None:
        written_acks = self.config.slave_ack == "written"
        while True:
            frame: object = None
            with trio.move_on_after(SILENCE_S):
                frame = await peer.receive()
            if frame is None:
                raise PeerGone(f"no ACK for {SILENCE_S:g} s")
            if isinstance(frame, ConnectionClosed):
                raise PeerGone("closed the stream")
            if not isinstance(frame, Ack):
                raise PeerGone(f"sent {type(frame).__name__}")  # a Refuse: it hung up
            link.last_seen = trio.current_time()
            if link.snapshot_end is not None and frame.written < link.snapshot_end:
                continue  # a keepalive: the slave is taking a snapshot in
            acked = frame.written if written_acks else frame.flushed
            try:
                self.gate.slave_acked(link.node, acked)
            except AckAboveEnd as exc:
                log.error("HA: %s", exc)
                await peer.send(Refuse(RefuseCode.STALE_EPOCH, str(exc)))
                raise PeerGone(str(exc)) from None
            link.written, link.flushed, link.acked = frame.written, frame.flushed, acked
            link.caught_up_by(acked)
            if link.node not in self.gate.sync_set:
                self._changed.set()

    # -- the sync set ------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the sync set and the retention floor up to date, until cancelled."""
        task_status.started()
        while True:
            with trio.move_on_after(UPKEEP_S):
                await self._changed.wait()
            self._changed = trio.Event()
            await self.upkeep()

    def wanted_sync_set(self, now: float) -> frozenset[str]:
        """The sync set the rules of §3.2 ask for now (the master always in it)."""
        gate, max_lag = self.gate, self.config.max_lag_ms / 1000
        members = {self.node}
        for node in gate.sync_set - {self.node}:
            link = self.slaves.get(node)
            if link is None:
                if now - self.started <= RECONNECT_GRACE_S:
                    members.add(node)
            elif link.connected:
                if now - link.last_caught_up <= max_lag:
                    members.add(node)
            elif now - link.since <= RECONNECT_GRACE_S:
                members.add(node)
        for link in self.slaves.values():
            if (
                link.connected
                and not link.learner
                and link.node not in gate.sync_set
                and link.acked >= gate.confirmed
                and now - link.last_caught_up <= max_lag
            ):
                members.add(link.node)
        return frozenset(members)

    async def upkeep(self) -> None:
        now = trio.current_time()
        gate = self.gate
        gate.local_flushed(self.store.local_durable)  # the confirm offset moves without waiters too
        if gate.refusal is None:
            wanted = self.wanted_sync_set(now)
            # etcd first, then the gate
            if wanted != gate.sync_set and await self.change_sync_set(wanted):
                log.info("HA: sync set of %s is now %s", self.group, ", ".join(sorted(wanted)))
                gate.set_sync_set(wanted)
        self._retain(now)

    def _retain(self, now: float) -> None:
        """Keep the segments a recently seen slave still needs, within `retain_max_bytes`."""
        end = self.store.log.write_offset
        bound = self.config.retain_max_bytes
        needed = [
            at
            for link in self.slaves.values()
            if now - link.last_seen <= RETAIN_WINDOW_S
            and end - (at := max(link.acked, link.snapshot_end or 0)) <= bound
        ]
        self.store.retain_floor = min(needed) if needed else None
