"""Every connection's next deadline (handshake, heartbeat or keep alive, close) in one heap,
served by the kernel's one timer task.

A task per connection that slept until its session's deadline cost each idle connection
about 3 KB (the task, its coroutine frames, a cancel scope and an event), and idle
connections are what brokers hold by the ten thousand. Here a session is in the heap at most
once, with the deadline it had when it was scheduled; when that entry comes due the session's
*current* deadline is checked (a frame received since moves it on) and the session goes back
in. So a busy connection costs a heap push per heartbeat period, not per frame. Entries of
sessions that ended stay until they come due or the heap grows past twice the live sessions,
when it is rebuilt without them. The heap itself holds one `Timers` handle, at its earliest
entry, so the kernel's timer task serves every connection and no task is added.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Protocol

import trio

from herald.core.timers import TimerHandle, Timers

_MIN_STEP = 0.001


class Timed(Protocol):
    """What a session gives the heap: its next deadline and what to do when it comes."""

    timer_at: float | None
    """The deadline of this session's entry in the heap, None when it has none (heap-owned)."""

    @property
    def done(self) -> bool: ...

    def deadline(self) -> float:
        """When `check_timers` must run next (Trio clock); `math.inf` for never."""

    def check_timers(self, now: float) -> None:
        """A deadline may have passed: send a heartbeat, or give up on a silent peer."""


class ConnectionDeadlines:
    def __init__(self, timers: Timers) -> None:
        self._timers = timers
        self._heap: list[tuple[float, int, Timed]] = []
        self._order = itertools.count()  # ties: first scheduled first, sessions never compared
        self._handle: TimerHandle | None = None  # the kernel timer at the heap's first entry
        self._serving = False  # in `_due`: it arms the timer once, at its end
        self.live = 0  # sessions between `add` and `remove`

    def add(self, session: Timed) -> None:
        """A connection opened: its handshake deadline starts."""
        self.live += 1
        session.timer_at = None
        self.schedule(session)

    def remove(self, session: Timed) -> None:
        """A connection closed: its entry, if any, is dropped when it comes due (or sooner)."""
        self.live -= 1
        session.timer_at = None

    def schedule(self, session: Timed) -> None:
        """Check `session` at its deadline (call when the deadline may have come nearer)."""
        when = session.deadline()
        at = session.timer_at
        if when == math.inf or (at is not None and at <= when):
            return  # none, or an entry at least as early is in the heap
        session.timer_at = when
        heap = self._heap
        heapq.heappush(heap, (when, next(self._order), session))
        if len(heap) > 2 * self.live + 64:
            self._compact()
        if heap[0][0] == when and not self._serving:
            self._arm(when)

    def _arm(self, when: float) -> None:
        handle = self._handle
        if handle is not None:
            if not handle.cancelled and handle.deadline <= when:
                return
            handle.cancel()
        self._handle = self._timers.call_at(when, self._due)

    def _compact(self) -> None:
        self._heap = [entry for entry in self._heap if entry[2].timer_at == entry[0]]
        heapq.heapify(self._heap)

    def _due(self) -> None:
        """The kernel timer fired: check every session whose entry came due."""
        self._handle = None
        now = trio.current_time()
        due = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, _, session = heapq.heappop(heap)
            if session.timer_at == when:  # else: ended, or scheduled again earlier
                session.timer_at = None
                due.append(session)
        self._serving = True
        try:
            for session in due:
                session.check_timers(now)
                if not session.done:
                    self.schedule(session)
        finally:
            self._serving = False
        if self._heap:
            # Not before the next tick: a deadline that a check left in the past would
            # otherwise make the timer task run this again without end.
            self._arm(max(self._heap[0][0], now + _MIN_STEP))
