"""The one task that runs every MQTT session's timers (plugins/mqtt/deadlines.py), with
sessions reduced to what it uses: a deadline that moves, and check_timers."""

from __future__ import annotations

import math

import trio
import trio.testing

from herald.plugins.mqtt.deadlines import Deadlines


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
    deadlines = Deadlines()
    late, early, moved = Timed(10.0), Timed(2.0), Timed(3.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.run)
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


async def test_ended_sessions_do_not_pile_up() -> None:
    deadlines = Deadlines()
    keeper = Timed(1e9)
    deadlines.add(keeper)
    for _ in range(1000):  # connections that come and go, each with a far deadline
        session = Timed(1e6)
        deadlines.add(session)
        deadlines.remove(session)
    assert len(deadlines._heap) <= 2 * deadlines.live + 64 + 1
    assert keeper.timer_at == 1e9 and any(e[2] is keeper for e in deadlines._heap)
