"""Resource alarms: publishers block above the memory high watermark and resume below it."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from herald.core.broker import Broker
from herald.core.flow import Alarms, MemoryMonitor


class MemoryGauge:
    """Stands in for the process's memory reading: the thing under test is the alarm logic."""

    def __init__(self, used: int) -> None:
        self.used = used

    def __call__(self) -> int:
        return self.used


async def test_publishers_block_over_watermark_and_resume_below(
    autojump_clock: trio.abc.Clock,
) -> None:
    alarms = Alarms()
    gauge = MemoryGauge(100)
    monitor = MemoryMonitor(alarms, high_watermark=1000, interval=1.0, sampler=gauge)
    published: list[int] = []

    async def publisher() -> None:
        for i in range(3):
            await alarms.wait_publish_allowed()
            published.append(i)
            await trio.sleep(1)

    async with trio.open_nursery() as nursery:
        await nursery.start(monitor.run)
        assert not alarms.blocked
        gauge.used = 5000
        await trio.sleep(1.5)  # the monitor samples once a second
        assert alarms.blocked and alarms.active == {"memory"}
        nursery.start_soon(publisher)
        await trio.testing.wait_all_tasks_blocked()
        assert published == []
        gauge.used = 10
        await trio.sleep(1.5)
        assert not alarms.blocked
        await trio.sleep(3)
        assert published == [0, 1, 2]
        nursery.cancel_scope.cancel()
    assert alarms.statistics().times_raised == 1


async def test_any_alarm_blocks_and_all_must_clear(autojump_clock: trio.abc.Clock) -> None:
    alarms = Alarms()
    alarms.set("memory", True)
    alarms.set("disk", True)
    changes: list[frozenset[str]] = []

    async def watch() -> None:
        for _ in range(2):
            changes.append(await alarms.wait_changed())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        await trio.testing.wait_all_tasks_blocked()
        alarms.set("memory", False)
        await trio.testing.wait_all_tasks_blocked()
        assert alarms.blocked
        alarms.set("disk", False)
    assert changes == [frozenset({"disk"}), frozenset()]
    with trio.move_on_after(1) as scope:
        await alarms.wait_publish_allowed()
    assert not scope.cancelled_caught


async def test_broker_memory_monitor_uses_configured_watermark(kernel: Broker) -> None:
    monitor = kernel.memory
    assert monitor.high_watermark > 0
    monitor.sampler = lambda: monitor.high_watermark + 1
    assert monitor.check() is True and kernel.alarms.blocked
    monitor.sampler = lambda: 0
    assert monitor.check() is False and not kernel.alarms.blocked


async def test_the_registry_tells_connections_that_ask_when_alarms_change(
    kernel: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    """One watcher task for the broker (ConnectionRegistry.watch_alarms), not one per
    connection; a failing callback is logged and the others still hear."""
    heard: list[frozenset[str]] = []

    def fails(active: frozenset[str]) -> None:
        raise RuntimeError("boom")

    first, second, silent = (kernel.connections.open("test", "peer") for _ in range(3))
    first.alarms_changed = fails
    second.alarms_changed = heard.append
    kernel.alarms.set("memory", True)
    await trio.testing.wait_all_tasks_blocked()
    kernel.alarms.set("memory", False)
    await trio.testing.wait_all_tasks_blocked()
    assert heard == [frozenset({"memory"}), frozenset()]
    assert "telling <Connection #1 test peer> of the alarms failed" in caplog.text
    for connection in (first, second, silent):
        kernel.connections.close(connection)
