"""Group commit: many publishers waiting for durability share one fsync.

`append` copies a record into the log's memory map and returns a ticket, the log's end offset
after it. `wait_durable(ticket)` returns once the log is flushed past the ticket. With no
background task (the `Store` interface has none to start), the waiters run the flushes
themselves: the first waiter whose ticket is not durable leads a *round*. It yields once, so
publishers that are already runnable append first, takes the log's end as the round's target,
and fsyncs everything up to it in a worker thread. Waiters that arrive meanwhile wait for the
round; those it covered return, the rest start or join the next round. Every waiter is served
by at most two rounds, and N concurrent publishers cost far fewer than N fsyncs.

In `async` flush mode a flusher task (`run_periodic`) leads a round every interval and waiters
only wait for it; if no flusher runs, waiters lead rounds themselves, so nothing ever hangs.

A failed fsync poisons the log: after EIO the kernel may have dropped the dirty pages, so the
store can no longer tell what is on disk. Every later wait and append fails with ResourceError.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from herald.core.errors import ResourceError

log = logging.getLogger(__name__)

_MAX_YIELDS = 5

Plan = Callable[[int, int], Callable[[], Any]]
"""`plan(start, target)`, called in the Trio thread, returns the blocking work of one round."""


class GroupCommit:
    """Flush rounds for one log; `durable` is the offset below which the log is on disk."""

    def __init__(
        self, plan: Plan, after: Callable[[Any], None], appended: Callable[[], int], durable: int
    ) -> None:
        self._plan = plan
        self._after = after
        self._appended = appended
        self.durable = durable
        self.rounds = 0  # fsync rounds run: the group-commit counter
        self.periodic = False  # a flusher task leads the rounds
        self.error: OSError | None = None
        self._running = False
        self._done = trio.Event()

    @property
    def running(self) -> bool:
        return self._running

    def check(self) -> None:
        """Raise ResourceError if an earlier flush failed."""
        if self.error is not None:
            raise ResourceError(
                f"the commit log could not be flushed ({self.error}); the store refuses "
                "writes until the broker is restarted and the disk checked"
            )

    async def wait_durable(self, ticket: int) -> None:
        if ticket <= self.durable:
            await trio.lowlevel.checkpoint()
            return
        while ticket > self.durable:
            self.check()
            if self._running or self.periodic:
                await self._done.wait()
            else:
                await self.run_round()

    async def flush_now(self) -> None:
        """Make everything appended so far durable, whatever the mode. Appends made while it
        runs are not waited for: under a steady stream of records (a consumer acking) the
        log's end moves on all the time, and waiting for it would never return."""
        target = self._appended()
        while target > self.durable:
            self.check()
            if self._running:
                await self._done.wait()
            else:
                await self.run_round()

    async def wait_idle(self) -> None:
        """Wait for a round in progress to finish."""
        while self._running:
            await self._done.wait()

    async def run_round(self, *, work_only: bool = False) -> None:
        """Lead one round (or wait for the one in progress). `work_only` runs the plan even
        with nothing to flush, for the background work it carries (preallocation)."""
        if self._running:
            await self._done.wait()
            return
        self._running = True
        try:
            # Let the publishers that are already runnable append first, so they join this
            # round: yield while yields let more appends in (a few times at most). At least
            # twice: Trio may run a batch of woken tasks in reverse order, this leader first.
            start, target = self.durable, self._appended()
            for attempt in range(_MAX_YIELDS):
                await trio.lowlevel.cancel_shielded_checkpoint()
                appended = self._appended()
                if appended == target and attempt > 0:
                    break
                target = appended
            if target <= start and not work_only:
                return
            work = self._plan(start, target)
            try:
                result = await trio.to_thread.run_sync(work)
            except OSError as exc:
                self.error = exc
                log.error("commit log flush failed: %s", exc)
                self.check()
            if target > start:
                self.rounds += 1
            self.durable = max(self.durable, target)
            self._after(result)
        finally:
            self._running = False
            done, self._done = self._done, trio.Event()
            done.set()

    async def run_periodic(
        self,
        interval: float,
        tick: Callable[[], Any] | None = None,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Lead a round every `interval` seconds until cancelled (async flush mode).
        `tick`, if given, is awaited after each round (checkpoints, retention)."""
        self.periodic = True
        task_status.started()
        try:
            while True:
                await trio.sleep(interval)
                await self.run_round(work_only=True)
                if tick is not None:
                    await tick()
        finally:
            self.periodic = False
            done, self._done = self._done, trio.Event()
            done.set()  # waiters lead their own rounds from now on
