"""ha_catchup.py's figures of a finished run: medians over repetitions, the check that the
slave holds the master's whole log, a run's one-line summary, a snapshot resync's figures."""

from __future__ import annotations

import statistics
from typing import Any

from herald.cluster.ha.slave import Follower

MEDIAN_KEYS = (
    "seconds", "mb_per_s", "mib_per_s", "records_per_s", "slave_cpu_share", "master_cpu_share",
    "us_per_record", "write_mb_per_s", "mb_per_thread_cpu_s", "records_per_thread_cpu_s",
    "slave_thread_runqueue_wait_s", "snapshot_mb_per_s", "snapshot_seconds",
)  # fmt: skip


def medians_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for k in MEDIAN_KEYS:
        if all(k in r for r in runs):
            median = statistics.median(r[k] for r in runs)
            found[k] = round(median) if k.startswith("records") else round(median, 2)
    return found


def check(figures: dict[str, Any], replay: dict[str, Any]) -> None:
    """The slave applied every record of the master's log (its recovery counted them), or
    took one snapshot of the whole log."""
    whole = figures["records"] == replay["records"] or figures.get("snapshots") == 1
    if not whole or figures["bytes"] != replay["bytes"]:
        raise RuntimeError(
            f"the slave applied {figures['records']} records ({figures['bytes']} bytes), "
            f"the master's log holds {replay['records']} ({replay['bytes']} bytes)"
        )


def said(figures: dict[str, Any]) -> str:
    line = (
        f"{figures['mb_per_s']} MB/s, {figures['records_per_s']} records/s, {figures['seconds']} s"
    )
    if "snapshot_mb_per_s" in figures:
        line += f"; shipping the snapshot {figures['snapshot_mb_per_s']} MB/s"
    return line


def snapshot_figures(follower: Follower) -> dict[str, Any]:
    """The snapshot a `Follower` took in, if it took one: its bytes (the files shipped: every
    segment below its end and the consume-queue and index files up to their checkpointed
    ends), and the seconds from SNAP_BEGIN to the staging directory complete and fsynced."""
    shipped = follower.last_snapshot
    if shipped is None:
        return {"snapshots": follower.snapshots}
    return {
        "snapshots": follower.snapshots,
        "snapshot_bytes": shipped.bytes,
        "snapshot_seconds": round(shipped.seconds, 2),
        "snapshot_mb_per_s": round(shipped.bytes / shipped.seconds / 1e6, 1),
    }
