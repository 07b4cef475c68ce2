"""Crash safety through the kernel: a broker on the commit-log store is SIGKILLed while
publishing (tests/crash/harness.py), and every message it confirmed must survive, whole, once,
in order. The default tier kills a handful of times; `-m slow` runs the long loops."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash.harness import MIB, Scenario, Summary, crash_seed, run_crash_cycles

STANDARD = Scenario()
# 64 KiB bodies: a kill lands inside a record's copy more often (torn records); 16 per segment.
LARGE = Scenario(
    publishers=3,
    shared=1,
    window=4,
    body_min=60 * 1024,
    body_max=64 * 1024,
    segment_size=MIB,
    tear_every=2,  # and every other cycle the child dies half-way through a record, for sure
)
# The smallest segments (64 KiB), consume-queue and index files: files roll during kills.
TINY = Scenario(
    segment_size=64 * 1024,
    body_min=16,
    body_max=2048,
    extra_settings=(
        "commitlog.cq_entries_per_file=256",
        "commitlog.index_slots=512",
        "commitlog.index_entries=1024",
        "commitlog.checkpoint_bytes=262144",
    ),
    tear_every=3,
    tear_within=400,
)
# Confirms from the background flusher (flush = "async") instead of group commit by waiters.
ASYNC = Scenario(extra_settings=('commitlog.flush="async"', "commitlog.flush_interval_ms=20"))


def show(summary: Summary) -> None:
    print(summary.line())  # seen with `pytest -s`; docs/RELIABILITY.md quotes these lines


@pytest.mark.parametrize(
    ("scenario", "cycles"),
    [(STANDARD, 5), (LARGE, 4), (TINY, 3), (ASYNC, 3)],
    ids=["standard", "large", "tiny", "async"],
)
async def test_confirmed_messages_survive_kills(
    tmp_path: Path, scenario: Scenario, cycles: int
) -> None:
    summary = await run_crash_cycles(tmp_path / "data", scenario, cycles, crash_seed())
    show(summary)
    assert summary.kills == cycles and summary.lost == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "cycles"),
    [(STANDARD, 50), (LARGE, 50), (TINY, 50), (ASYNC, 50)],
    ids=["standard", "large", "tiny", "async"],
)
async def test_confirmed_messages_survive_many_kills(
    tmp_path: Path, scenario: Scenario, cycles: int
) -> None:
    summary = await run_crash_cycles(tmp_path / "data", scenario, cycles, crash_seed())
    show(summary)
    assert summary.kills == cycles and summary.lost == 0
