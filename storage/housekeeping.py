"""The commit-log store's work off the publishing path: what each flush round carries besides
the fsync (creating the next segment and index file ahead of need), checkpoints, retention.

Retention: a segment is deleted when it holds no live message (every target of every message in
it was acked or its queue deleted), it is not the active segment, and both kept checkpoints
start after it (recovery never reads before the older one). So one old un-acked message keeps
its own segment, not the whole log after it. An HA master also keeps every segment ending after
`store.retain_floor`: a slave that is behind streams the log contiguously from there.

A full disk: checkpoints are due after `checkpoint_bytes` of log growth, but a store short of
space (a refused write, a file it could not create ahead, the disk monitor below its limit)
does not grow, so while it is short the service also checkpoints whenever a segment without
live messages waits for one: consumers draining is what frees the space. A checkpoint the disk
refuses is retried `RETRY_S` later; each kind of failure is logged once until it clears.

Ordering keeps the worker threads and the Trio thread off each other's files: a flush round
touches only segments at or after the durable offset, which retention never deletes; retention
and checkpoints hold one lock; a deleted queue's consume queue is closed only by retention.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import trio

from herald.core.errors import ResourceError
from herald.storage.checkpoint import Checkpoint, write_checkpoint
from herald.storage.mapped_file import NO_SPACE, PAGE, MappedFile

if TYPE_CHECKING:
    from herald.storage.commitlog import CommitLogStore

log = logging.getLogger(__name__)

RETRY_S = 1.0
"""How long after a failed checkpoint the next is tried."""


def discard(file: MappedFile, *, in_use: bool) -> None:
    """Drop a file made ahead that is not needed; keep it on disk if another map uses it."""
    if in_use:
        file.close()
    else:
        file.delete()


class Housekeeper:
    """Flush-round extras, checkpoints and retention for one store."""

    def __init__(self, store: CommitLogStore) -> None:
        self.store = store
        self.checkpoint: Checkpoint | None = None  # the newest written
        self.previous: Checkpoint | None = None  # the one before it
        self.lock = trio.Lock()
        self.due = False  # the log grew enough since the last checkpoint
        self.checkpoints = 0
        self.failed_at: float | None = None  # when the last checkpoint failed
        self.ahead_error: OSError | None = None  # why the last file made ahead failed

    def short_of_space(self) -> bool:
        """The disk refused a write or a file made ahead, or the monitor's alarm is up."""
        store = self.store
        return store.disk_alarm or store.short_of_space or self.ahead_error is not None

    def reclaimable(self) -> bool:
        """Some segment before the active one has no live message left."""
        log_files = self.store.log
        active = log_files.segment_start(log_files.write_offset)
        floor = self.store.retain_floor
        if floor is not None:
            active = min(active, log_files.segment_start(floor))
        live = self.store.state.ledger.segments
        return any(start < active and not live.get(start) for start in log_files.files)

    def checkpoint_wanted(self) -> bool:
        """Due by log growth, or it would let retention free space the store is short of;
        never sooner than `RETRY_S` after a failed one."""
        if self.failed_at is not None and trio.current_time() - self.failed_at < RETRY_S:
            return False
        return self.due or (self.short_of_space() and self.reclaimable())

    # -- flush rounds ----------------------------------------------------------------------
    def plan(self, start: int, target: int) -> Any:
        """The blocking work of one flush round: fsync the log's new bytes, and create the
        next segment / index file ahead of need."""
        store = self.store
        files = store.log.files_between(start, target)
        segment = store.log.needs_prepare()
        index = store.state.index
        index_number = index.needs_prepare() if index is not None else None

        def work() -> tuple[Any, Any, OSError | None]:
            for file in files:
                file.flush()
                # Durable now: let go of the pages written (not the one still being filled).
                end = min(target, file.end) - file.start
                file.release(max(start - file.start, 0), end - end % PAGE)
            prepared = prepared_index = None
            try:
                if segment is not None:
                    prepared = store.create_segment(segment)
                if index is not None and index_number is not None:
                    prepared_index = index.prepare(index_number)
            except OSError as exc:
                return prepared, prepared_index, exc
            return prepared, prepared_index, None

        return work

    def after_round(self, result: tuple[Any, Any, OSError | None]) -> None:
        store = self.store
        prepared, prepared_index, error = result
        if error is not None:
            if self.ahead_error is None or self.ahead_error.errno != error.errno:
                log.warning("could not create a file ahead of need: %s", error)
            if error.errno in NO_SPACE:
                store.note_refusal()
        elif self.ahead_error is not None:
            log.warning("files are created ahead of need again")
        self.ahead_error = error
        if prepared is not None:
            unwanted = store.log.adopt(prepared)
            if unwanted is not None:
                discard(unwanted, in_use=unwanted.start in store.log.files)
        index = store.state.index
        if prepared_index is not None and index is not None:
            active = index.active
            if index.prepared is None and (active is None or prepared_index.number > active.number):
                index.prepared = prepared_index
            else:
                in_use = any(f.number == prepared_index.number for f in index.files)
                discard(prepared_index.file, in_use=in_use)
        if self.checkpoint is not None:
            grown = store.log.write_offset - self.checkpoint.log_end
            self.due = grown >= store.config.checkpoint_bytes

    # -- checkpoints -----------------------------------------------------------------------
    def flush_derived(self, log_files: Sequence[MappedFile]) -> None:
        """fsync log files, then every consume-queue and index file (blocking; at open)."""
        state = self.store.state
        for file in log_files:
            file.flush()
        for queue in state.queues.values():
            for file in queue.cq.dirty_files():
                file.flush()
            queue.cq.flushed = queue.cq.length
        if state.index is not None:
            for index_file in state.index.files:
                index_file.sync_header()
                index_file.file.flush()

    def open_checkpoint(
        self, snapshot: Checkpoint, found: Checkpoint | None, before: Checkpoint | None
    ) -> None:
        """Write the checkpoint of a store being opened (blocking); `found` and `before` are
        the ones recovery read. A full disk must not keep a broker from starting (consumers
        draining is what frees space): if it refuses, the checkpoints on disk stay the ones in
        use, the abort marker stays too, and the next checkpoint is due at once."""
        store = self.store
        try:
            write_checkpoint(store.root, snapshot)
        except OSError as exc:
            if exc.errno not in NO_SPACE:
                raise
            log.warning("store %s: no checkpoint at open, the disk is full: %s", store.root, exc)
            store.disk_alarm = True
            self.checkpoint, self.previous, self.due = found, before, True
        else:
            self.checkpoint, self.previous = snapshot, found

    async def write_checkpoint(self) -> None:
        """Save the derived state as of the log's end, then reclaim what that allows."""
        store = self.store
        group = store.require_open()
        async with self.lock:
            self.due = False
            store.flush_acks()  # the snapshot's log end then covers every ack it holds
            snapshot = store.state.snapshot(store.log.write_offset, store.last_ms)
            queues = [(s.cq, s.cq.length) for s in store.state.queues.values()]
            files = [f for cq, _ in queues for f in cq.dirty_files()]
            if store.state.index is not None:
                since = self.checkpoint.index_file if self.checkpoint is not None else None
                for index_file in store.state.index.files:
                    if index_file.number >= (since or 0):
                        index_file.sync_header()
                        files.append(index_file.file)
            await group.flush_now()  # the log below the snapshot's offset must be on disk

            def save() -> None:
                for file in files:
                    file.flush()
                write_checkpoint(store.root, snapshot)

            try:
                await trio.to_thread.run_sync(save)
            except OSError as exc:
                error = store.disk_error(exc)
                if self.failed_at is None:
                    log.error("checkpoint failed, retried every %gs: %s", RETRY_S, error.reply_text)
                self.failed_at = trio.current_time()
                self.due = True
                raise error from None
            if self.failed_at is not None:
                log.warning("checkpoint written again")
                self.failed_at = None
            for cq, length in queues:
                cq.flushed = max(cq.flushed, length)
            self.previous, self.checkpoint = self.checkpoint, snapshot
            self.checkpoints += 1
            await self.reclaim_locked()
            store.state.release_pages()

    # -- retention -------------------------------------------------------------------------
    async def reclaim_locked(self) -> int:
        """See `CommitLogStore.reclaim`; call it holding `lock`."""
        store = self.store
        store.flush_acks()  # no segment goes while an ack that emptied it is only in memory
        kept = [c for c in (self.checkpoint, self.previous) if c is not None]
        if not kept:
            return 0
        boundary = min(c.log_end for c in kept)
        floor = store.retain_floor
        if floor is not None:
            boundary = min(boundary, floor)
        active = store.log.segment_start(store.log.write_offset)
        live = store.state.ledger.segments
        segments = [
            f for f in store.log if f.end <= boundary and f.start < active and not live.get(f.start)
        ]
        for file in segments:
            store.log.remove(file.start)
        doomed: list[Any] = [file.delete for file in segments]
        for queue_id, state in store.state.queues.items():
            lows = []
            for checkpoint in kept:
                saved = checkpoint.queues.get(queue_id)
                same = saved is not None and saved.directory == state.cq.name
                lows.append(saved.low if same and saved is not None else 0)
            doomed += [file.delete for file in state.cq.release_below(min(lows))]
        used = {q.directory for c in kept for q in c.queues.values()}
        retired = store.state.retired
        doomed += [cq.destroy for cq in retired if cq.name not in used]
        store.state.retired = [cq for cq in retired if cq.name in used]
        if store.state.index is not None:
            gone = store.state.index.release_below(store.log.min_offset)
            doomed += [f.file.delete for f in gone]
        if doomed:

            def delete() -> None:
                for action in doomed:
                    action()

            await trio.to_thread.run_sync(delete)
        if segments:
            log.info("reclaimed %d commit-log segment(s)", len(segments))
        return len(segments)

    # -- the background service ------------------------------------------------------------
    async def tick(self) -> None:
        """Create files ahead if needed; flush what nobody waits for (acks, delivery counts:
        durable within an interval, and their pages released); checkpoint if due; unmap the
        consume-queue and index pages used since the last tick."""
        store = self.store
        group = store.require_open()
        store.flush_acks()
        index = store.state.index
        ahead = store.log.needs_prepare() is not None
        if ahead or (index is not None and index.needs_prepare() is not None):
            await group.run_round(work_only=True)
        elif store.log.write_offset > group.durable and not (group.running or group.periodic):
            await group.run_round()  # sync mode: acks nobody waits for (async: already done)
        if self.checkpoint_wanted():
            with contextlib.suppress(ResourceError):  # logged; tried again after RETRY_S
                await self.write_checkpoint()
        else:
            store.state.release_pages()

    async def run(self, *, task_status: trio.TaskStatus[None]) -> None:
        store = self.store
        group = store.require_open()
        interval = store.config.flush_interval_ms / 1000
        if store.config.flush == "async":
            await group.run_periodic(interval, self.tick, task_status=task_status)
            return
        task_status.started()
        while True:
            await trio.sleep(interval)
            await self.tick()
