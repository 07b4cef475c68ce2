"""The kernel's timer heap: one task serving every deadline."""

from __future__ import annotations

import pytest
import trio

from herald.core.timers import Timers


async def test_timers_fire_in_deadline_order_with_their_arguments(
    autojump_clock: trio.abc.Clock,
) -> None:
    timers = Timers()
    fired: list[tuple[str, float]] = []

    def note(name: str) -> None:
        fired.append((name, trio.current_time()))

    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        timers.call_later(3, note, "c")
        timers.call_later(1, note, "a")
        cancelled = timers.call_later(2, note, "never")
        timers.call_later(2, note, "b")
        cancelled.cancel()
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    assert fired == [("a", 1), ("b", 2), ("c", 3)]
    assert timers.statistics().fired == 3


async def test_an_earlier_deadline_wakes_the_timer_task(autojump_clock: trio.abc.Clock) -> None:
    timers = Timers()
    fired: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        timers.call_later(10, lambda: fired.append(trio.current_time()))
        await trio.sleep(1)
        timers.call_later(1, lambda: fired.append(trio.current_time()))
        await trio.sleep(20)
        nursery.cancel_scope.cancel()
    assert fired == [2, 10]


async def test_a_failing_callback_does_not_stop_the_others(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    timers = Timers()
    fired: list[str] = []

    def boom() -> None:
        raise RuntimeError("bug in a callback")

    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        timers.call_later(1, boom)
        timers.call_later(1, fired.append, "after")
        await trio.sleep(2)
        nursery.cancel_scope.cancel()
    assert fired == ["after"]
    assert any("timer callback" in r.getMessage() for r in caplog.records)
