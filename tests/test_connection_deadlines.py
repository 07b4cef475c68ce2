"""Every connection's deadlines in one heap on the kernel's timer task
(core/connection_deadlines.py), with sessions reduced to what it uses: a deadline that moves,
and check_timers. (Moved here from the MQTT plugin's own heap, which this replaced.)"""

from __future__ import annotations

import math

import trio
import trio.testing

from herald.core.connection_deadlines import ConnectionDeadlines
from herald.core.timers import Timers


class Timed:
    """A session's timer surface: `deadline()` is `due` until checked past it."""

    def __init__(self, due: float) -> None:
        self.due = due
        self.done = False
        self.timer_at: float | None = None
        self.checked: list[float] = []

    def deadline(self) -> float:
        return math.inf if self.done else self.due

    def check_timers(self, now: float) -> None:
        self.checked.append(now)
        if now >= self.due:
            self.done = True


async def test_each_session_is_checked_at_its_current_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = autojump_clock
    timers = Timers()
    deadlines = ConnectionDeadlines(timers)
    late, early, moved = Timed(10.0), Timed(2.0), Timed(3.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        for session in (late, early, moved):
            deadlines.add(session)
        await trio.sleep(2.5)
        assert early.done and early.checked == [2.0]
        moved.due = 6.0  # a packet arrived: the entry at 3.0 finds the deadline moved on
        await trio.sleep(4)
        assert moved.done and moved.checked == [3.0, 6.0]
        nearer = Timed(clock.current_time() + 0.5)  # earlier than anything in the heap
        deadlines.add(nearer)
        await trio.sleep(1)
        assert nearer.done and not late.done
        await trio.sleep(4)
        assert late.done and late.checked == [10.0]
        nursery.cancel_scope.cancel()


async def test_a_deadline_brought_nearer_is_rescheduled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """`schedule` after the deadline came nearer (a keep alive negotiated at CONNECT, shorter
    than the handshake timeout) adds an earlier entry; the later one is then ignored."""
    timers = Timers()
    deadlines = ConnectionDeadlines(timers)
    session = Timed(10.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        deadlines.add(session)
        await trio.sleep(1)
        session.due = 3.0
        deadlines.schedule(session)
        await trio.sleep(12)
        assert session.checked == [3.0]
        nursery.cancel_scope.cancel()


async def test_a_removed_session_is_not_checked(autojump_clock: trio.testing.MockClock) -> None:
    timers = Timers()
    deadlines = ConnectionDeadlines(timers)
    gone, kept = Timed(2.0), Timed(4.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        deadlines.add(gone)
        deadlines.add(kept)
        deadlines.remove(gone)
        await trio.sleep(5)
        assert gone.checked == [] and kept.checked == [4.0]
        assert deadlines.live == 1
        nursery.cancel_scope.cancel()


async def test_the_heap_costs_one_kernel_timer() -> None:
    """However many sessions, the heap holds one handle on `Timers`, at its earliest entry."""
    timers = Timers()
    deadlines = ConnectionDeadlines(timers)
    for due in (50.0, 20.0, 30.0, 10.0, 40.0):
        deadlines.add(Timed(due))
    live = [entry for entry in timers._heap if not entry[2].cancelled]
    assert [entry[0] for entry in live] == [10.0]


async def test_ended_sessions_do_not_pile_up() -> None:
    deadlines = ConnectionDeadlines(Timers())
    keeper = Timed(1e9)
    deadlines.add(keeper)
    for _ in range(1000):  # connections that come and go, each with a far deadline
        session = Timed(1e6)
        deadlines.add(session)
        deadlines.remove(session)
    assert len(deadlines._heap) <= 2 * deadlines.live + 64 + 1
    assert keeper.timer_at == 1e9 and any(e[2] is keeper for e in deadlines._heap)
