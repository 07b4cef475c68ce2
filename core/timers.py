"""One task for every kernel timer: message TTL, queue expiry, redelivery delays.

Queues need many short-lived deadlines. A Trio task per deadline would cost a task switch and a
cancel scope each; instead the kernel keeps one heap of deadlines and one task that sleeps
until the earliest. Callbacks are synchronous and must not block, like the rest of the kernel.
The clock is Trio's, so tests drive TTLs with `MockClock` / `autojump_clock`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Callable
from typing import Any

import attrs
import trio

log = logging.getLogger(__name__)


@attrs.define(slots=True, eq=False)
class TimerHandle:
    """A scheduled call; `cancel()` stops it if it has not run yet."""

    deadline: float
    callback: Callable[..., Any] | None
    args: tuple[Any, ...]

    def cancel(self) -> None:
        self.callback = None
        self.args = ()

    @property
    def cancelled(self) -> bool:
        return self.callback is None


@attrs.frozen
class TimerStatistics:
    scheduled: int
    fired: int


class Timers:
    """A heap of deadlines served by one task (`run`)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._scope: trio.CancelScope | None = None
        self._fired = 0

    def call_at(self, deadline: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        """Run `callback(*args)` at `deadline` (Trio clock). Never blocks."""
        handle = TimerHandle(deadline, callback, args)
        heap = self._heap
        heapq.heappush(heap, (deadline, next(self._seq), handle))
        scope = self._scope
        if scope is not None and heap[0][2] is handle:
            scope.deadline = deadline
        return handle

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        return self.call_at(trio.current_time() + delay, callback, *args)

    def statistics(self) -> TimerStatistics:
        return TimerStatistics(scheduled=len(self._heap), fired=self._fired)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve deadlines until cancelled."""
        task_status.started()
        heap = self._heap
        while True:
            with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as scope:
                self._scope = scope
                await trio.sleep_forever()
            self._scope = None
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                handle = heapq.heappop(heap)[2]
                callback, args = handle.callback, handle.args
                if callback is None:
                    continue
                handle.cancel()  # done: a cancel() from the callback itself is a no-op
                self._fired += 1
                try:
                    callback(*args)
                except Exception:
                    log.exception("timer callback %r failed", callback)
            await trio.lowlevel.checkpoint()
