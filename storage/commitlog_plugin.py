"""The commit-log store as a herald plugin (entry point `commitlog`): its `[commitlog]` config
section, the storage backend named "commitlog", and its background services when the
broker's store is one. The store itself is commitlog.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from herald.core.hookspecs import hookimpl
from herald.core.plugin_types import ConfigSection, Service, StorageBackend
from herald.storage.commitlog import CommitLogStore
from herald.storage.commitlog_config import CommitLogConfig
from herald.storage.disk_monitor import run_disk_monitor

if TYPE_CHECKING:
    from herald.core.broker import Broker


@hookimpl
def herald_config_sections() -> list[ConfigSection]:
    return [ConfigSection("commitlog", CommitLogConfig)]


def _make_store(config: Any, data_dir: Path) -> CommitLogStore:
    if not isinstance(config, CommitLogConfig):
        config = CommitLogConfig()
    return CommitLogStore(Path(data_dir) / "store", config)


@hookimpl
def herald_storage_backends() -> list[StorageBackend]:
    """Offer this store as the storage backend named "commitlog"."""
    return [
        StorageBackend(
            name="commitlog",
            description="RocketMQ-style commit log on disk, with group-commit fsync",
            factory=_make_store,
        )
    ]


async def _run_flusher(broker: Broker, *, task_status: trio.TaskStatus[None]) -> None:
    store = broker.store
    assert isinstance(store, CommitLogStore)
    await store.run_flusher(task_status=task_status)


@hookimpl
def herald_services(broker: Broker) -> list[Service]:
    """The flusher / housekeeping task and the disk monitor (the `disk` alarm), when the
    broker's store is a commit-log store."""
    if isinstance(broker.store, CommitLogStore):
        return [
            Service("commitlog-flusher", _run_flusher),
            Service("commitlog-disk-monitor", run_disk_monitor),
        ]
    return []
