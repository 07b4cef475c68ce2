"""Resource alarms that block publishers: memory now, disk space with the commit-log store.

RabbitMQ's model: while any alarm is set, connections that publish stop reading their sockets
(AMQP also sends connection.blocked), so TCP backpressure reaches the clients; consumers keep
draining, which is what clears the alarm. Nothing is dropped.

`Alarms` is the shared state; `MemoryMonitor` samples the process's memory and sets the
`memory` alarm above the high watermark, clearing it below.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs
import psutil
import trio

log = logging.getLogger(__name__)


@attrs.frozen
class AlarmStatistics:
    active: frozenset[str]
    times_raised: int


class Alarms:
    """The set of active resource alarms; publishing is allowed only while it is empty."""

    def __init__(self) -> None:
        self._active: set[str] = set()
        self._changed = trio.Event()
        self._raised = 0

    @property
    def blocked(self) -> bool:
        return bool(self._active)

    @property
    def active(self) -> frozenset[str]:
        return frozenset(self._active)

    def set(self, name: str, active: bool) -> None:
        """Raise or clear alarm `name`; wakes every waiter when the blocked state changes."""
        if active == (name in self._active):
            return
        if active:
            self._active.add(name)
            self._raised += 1
            log.warning("resource alarm raised: %s; publishers are blocked", name)
        else:
            self._active.discard(name)
            log.warning("resource alarm cleared: %s", name)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_publish_allowed(self) -> None:
        """Return when no alarm is active (at once if none is). Always a checkpoint."""
        await trio.lowlevel.checkpoint()
        while self._active:
            await self._changed.wait()

    async def wait_changed(self) -> frozenset[str]:
        """Wait for the next change of the active set and return it (for connection.blocked)."""
        await self._changed.wait()
        return self.active

    def statistics(self) -> AlarmStatistics:
        return AlarmStatistics(active=self.active, times_raised=self._raised)


def process_rss() -> int:
    return psutil.Process().memory_info().rss


def total_memory() -> int:
    return psutil.virtual_memory().total


class MemoryMonitor:
    """Samples memory use every `interval` seconds and drives the `memory` alarm."""

    def __init__(
        self,
        alarms: Alarms,
        high_watermark: int,
        *,
        interval: float = 1.0,
        sampler: Callable[[], int] = process_rss,
        paging_ratio: float = 0.5,
        on_paging: Callable[[], object] | None = None,
    ) -> None:
        self.alarms = alarms
        self.high_watermark = high_watermark
        self.paging_watermark = int(high_watermark * paging_ratio)
        self.interval = interval
        self.sampler = sampler
        self.on_paging = on_paging
        self.used = 0
        self.paging = False  # memory is short: queues page their backlogs out to the store

    def check(self) -> bool:
        """Sample once; returns whether the memory alarm is now active. While memory is above
        the paging watermark, each sample also asks the queues to page out (`on_paging`)."""
        self.used = used = self.sampler()
        paging = used >= self.paging_watermark
        if paging != self.paging:
            self.paging = paging
            log.info(
                "memory %s the paging watermark (%d of %d bytes): queues %s",
                "above" if paging else "below",
                used,
                self.paging_watermark,
                "page transient messages out" if paging else "stop paging",
            )
        if paging and self.on_paging is not None:
            self.on_paging()
        over = used >= self.high_watermark
        self.alarms.set("memory", over)
        return over

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.check()
        task_status.started()
        while True:
            await trio.sleep(self.interval)
            self.check()
