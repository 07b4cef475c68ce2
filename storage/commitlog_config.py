"""`[commitlog]`: the commit-log store's settings."""

from __future__ import annotations

from typing import Any

import attrs

from herald.core.config import InvalidValue

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
MIN_SEGMENT = 64 * KIB
MAX_SEGMENT = 4 * GIB - 4 * KIB


def _segment(instance: Any, attribute: attrs.Attribute, value: int) -> None:
    if not MIN_SEGMENT <= value <= MAX_SEGMENT or value % (4 * KIB):
        raise InvalidValue(
            f"must be a multiple of 4096 between {MIN_SEGMENT} and {MAX_SEGMENT} bytes, "
            f"got {value}",
            attribute.name,
        )


def _at_least(low: int) -> Any:
    def check(instance: Any, attribute: attrs.Attribute, value: int) -> None:
        if value < low:
            raise InvalidValue(f"must be at least {low}, got {value}", attribute.name)

    return check


def _flush(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    if value not in ("sync", "async"):
        raise InvalidValue(f"expected 'sync' or 'async', got {value!r}", attribute.name)


@attrs.frozen
class CommitLogConfig:
    """How the commit-log store lays out and flushes its files (see docs/storage.md)."""

    # 256 MiB, not RocketMQ's 1 GiB: segments are preallocated, and a first `herald run` on a
    # laptop should not take 2 GiB of disk before the first message (docs/storage.md).
    segment_size: int = attrs.field(default=256 * MIB, validator=_segment)
    """Bytes per commit-log segment; a message larger than a segment cannot be stored."""
    flush: str = attrs.field(default="sync", validator=_flush)
    """sync: a publish is durable once fsynced (group commit); async: a timer flushes."""
    flush_interval_ms: int = attrs.field(default=200, validator=_at_least(1))
    """async mode: how often the log is flushed; both modes: housekeeping interval."""
    index: bool = True
    """Keep the message-id hash index (find_by_key)."""
    checkpoint_bytes: int = attrs.field(default=64 * MIB, validator=_at_least(1))
    """Write a checkpoint after this much log growth, bounding crash-recovery replay."""
    min_free_bytes: int = attrs.field(default=0, validator=_at_least(0))
    """Refuse to create segments when the disk would have less than this free."""
    disk_free_limit: int = attrs.field(default=50_000_000, validator=_at_least(0))
    """Below this many free bytes on the store's disk the `disk` alarm blocks publishers
    (RabbitMQ's disk_free_limit, same default); 0: only a refused write raises it."""
    disk_check_interval_ms: int = attrs.field(default=1000, validator=_at_least(1))
    """How often the free space is sampled."""
    cq_entries_per_file: int = attrs.field(default=300_000, validator=_at_least(16))
    """Entries (32 bytes each) per consume-queue file."""
    index_slots: int = attrs.field(default=500_000, validator=_at_least(1))
    """Hash slots per index file."""
    index_entries: int = attrs.field(default=2_000_000, validator=_at_least(2))
    """Entries per index file; a full file is followed by a new one."""
