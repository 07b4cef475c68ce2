"""The `disk` resource alarm: publishers wait while the store's disk is nearly full.

RabbitMQ's model (`disk_free_limit`, default 50 MB): the broker samples the free space of the
disk its data lives on and, below the limit, raises a resource alarm that blocks every
publishing connection (core/flow.py) until space comes back. Blocking at a limit is kinder
than failing at zero: publishers are slowed by TCP backpressure instead of receiving errors,
and consumers keep draining, which is what frees space (acked segments are reclaimed).

Two more reasons hold the alarm, both about the store's own files. Once the next segment is
due (the active one is 75 % full), it needs `segment_size` + `min_free_bytes` free: below that
its creation will fail, so publishers are blocked before they get errors (a 1 GiB segment does
not fit in 500 MB, whatever the limit says). And a write the disk refused
(`CommitLogStore.disk_alarm`, set on ENOSPC: a consume-queue file, inodes, quotas) holds the
alarm until a segment is created again or the free space grows past what it was when the
refusal was seen: consumers draining, and the store reclaiming their segments, is what frees
space; if the disk refuses again, the flag comes back with the next publish. A refusal wakes
the monitor at once (`CommitLogStore.wait_refusal`): a fast publisher fills the last quarter of
a segment well within one sample interval. While free space is short the monitor says so
(`CommitLogStore.short_of_space`), and the store checkpoints to let retention delete drained
segments (housekeeping.py).

The free space is read through `CommitLogStore.free_space`, a seam tests replace with a
function returning a chosen number.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.core.flow import Alarms
    from herald.storage.commitlog import CommitLogStore

log = logging.getLogger(__name__)

ALARM = "disk"


def disk_free_bytes(path: Path) -> int:
    """Bytes an unprivileged process may still write on the filesystem holding `path`."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


class DiskMonitor:
    """Samples the store's free space every `interval` seconds and drives the `disk` alarm."""

    def __init__(self, store: CommitLogStore, alarms: Alarms, limit: int, interval: float) -> None:
        self.store = store
        self.alarms = alarms
        self.limit = limit
        self.interval = interval
        self.free: int | None = None  # the last sample
        self.refused_free: int | None = None  # the free space when a refusal was first seen

    def check(self) -> bool:
        """Sample once; returns whether the disk alarm is now active."""
        store = self.store
        try:
            free = store.free_space(store.root)
        except OSError as exc:  # keep the last verdict; the next sample may work
            log.warning("cannot read the free space of %s: %s", store.root, exc)
            return ALARM in self.alarms.active
        self.free = free
        needed = self.limit
        if store.log.needs_prepare() is not None:
            needed = max(needed, store.config.segment_size + store.config.min_free_bytes)
        if not store.disk_alarm:
            self.refused_free = None
        elif self.refused_free is None:
            self.refused_free = free
        elif free > self.refused_free:  # space came back since the disk said no
            store.disk_alarm = False
            self.refused_free = None
        store.short_of_space = free < needed
        active = free < needed or store.disk_alarm
        if active and ALARM not in self.alarms.active:
            log.warning(
                "disk alarm: %d bytes free in %s, %d needed%s",
                free,
                store.root,
                needed,
                "; the disk refused a write" if store.disk_alarm else "",
            )
        self.alarms.set(ALARM, active)
        return active

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.check()
        task_status.started()
        while True:
            with trio.move_on_after(self.interval):
                await self.store.wait_refusal()  # a refused write is looked at at once
            self.check()


async def run_disk_monitor(broker: Broker, *, task_status: trio.TaskStatus[None]) -> None:
    """The `herald_services` entry: watch the broker's commit-log store."""
    from herald.storage.commitlog import CommitLogStore

    store = broker.store
    assert isinstance(store, CommitLogStore)
    config = store.config
    monitor = DiskMonitor(
        store, broker.alarms, config.disk_free_limit, config.disk_check_interval_ms / 1000
    )
    await monitor.run(task_status=task_status)
