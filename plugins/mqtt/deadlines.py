"""Every MQTT session's next timer (CONNECT timeout, keep alive) in one heap, run by one task.

A task per connection that slept until its session's deadline cost each idle connection
about 3 KB (the task, its coroutine frames, a cancel scope and an event: 15 % of an idle
connection), and an idle connection is what MQTT brokers hold by the ten thousand. Here a
session is in the heap at most once with the deadline it had when it was scheduled; when that
entry comes due the session's *current* deadline is checked (a packet received since moves it
on) and the session goes back in. So a busy connection costs a heap push per keep-alive
period, not per packet. Entries of sessions that ended stay until they come due or the heap
grows past twice the live sessions, when it is rebuilt without them.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from herald.plugins.mqtt.session import Session


class Deadlines:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Session]] = []
        self._order = itertools.count()  # ties: first scheduled first, sessions never compared
        self._sleep: trio.CancelScope | None = None
        self.live = 0  # sessions between `add` and `remove`

    def add(self, session: Session) -> None:
        """A connection opened: its CONNECT timeout starts."""
        self.live += 1
        self.schedule(session)

    def remove(self, session: Session) -> None:
        """A connection closed: its entry, if any, is dropped when it comes due (or sooner)."""
        self.live -= 1
        session.timer_at = None

    def schedule(self, session: Session) -> None:
        """Check `session` at its deadline (call when the deadline may have come nearer)."""
        when = session.deadline()
        if when == math.inf or (session.timer_at is not None and session.timer_at <= when):
            return  # none, or an entry at least as early is in the heap
        session.timer_at = when
        heap = self._heap
        heapq.heappush(heap, (when, next(self._order), session))
        if len(heap) > 2 * self.live + 64:
            self._compact()
        sleep = self._sleep
        if sleep is not None and when < sleep.deadline:
            sleep.deadline = when

    def _compact(self) -> None:
        self._heap = [entry for entry in self._heap if entry[2].timer_at == entry[0]]
        heapq.heapify(self._heap)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the deadlines until cancelled."""
        task_status.started()
        while True:
            heap = self._heap
            with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as sleep:
                self._sleep = sleep
                await trio.sleep_forever()
            self._sleep = None
            now = trio.current_time()
            heap = self._heap
            while heap and heap[0][0] <= now:
                when, _, session = heapq.heappop(heap)
                if session.timer_at != when:
                    continue  # ended, or scheduled again earlier
                session.timer_at = None
                session.check_timers(now)
                if not session.done:
                    self.schedule(session)
                heap = self._heap  # `schedule` may have rebuilt it
