"""`ConsumeQueue.collect`: the entries a swapped range's read-back asks for, cut at the
range's last offset, the limit and file boundaries, with and without skipped indexes."""

from __future__ import annotations

from pathlib import Path

import pytest

from herald.storage.consume_queue import ConsumeQueue, Entry


def _queue(directory: Path, offsets: list[int], per_file: int = 8) -> ConsumeQueue:
    cq = ConsumeQueue(directory / "cq", per_file)
    for n, offset in enumerate(offsets):
        cq.reserve()
        cq.put(n * 64, 60, 30, 10, 1, offset)
    return cq


def _offsets(entries: list[Entry]) -> list[int]:
    return [entry[5] for entry in entries]


@pytest.mark.parametrize("per_file", [4, 8, 1000])
def test_collect_cuts_at_last_offset_within_a_chunk(tmp_path: Path, per_file: int) -> None:
    offsets = [0, 1, 2, 4, 5, 7, 8, 9, 12, 13, 15]  # gaps, as transient messages leave
    cq = _queue(tmp_path, offsets, per_file)
    try:
        assert _offsets(cq.collect(0, 8, 100, set())) == [0, 1, 2, 4, 5, 7, 8]
        assert _offsets(cq.collect(0, 6, 100, set())) == [0, 1, 2, 4, 5]
        assert _offsets(cq.collect(3, 100, 100, set())) == offsets[3:]
        assert cq.collect(0, -1, 100, set()) == []
        assert cq.collect(len(offsets), 100, 100, set()) == []
    finally:
        cq.close()


@pytest.mark.parametrize("per_file", [4, 8, 1000])
def test_collect_stops_at_the_limit(tmp_path: Path, per_file: int) -> None:
    offsets = list(range(0, 40, 2))
    cq = _queue(tmp_path, offsets, per_file)
    try:
        for limit in (1, 3, 4, 5, 8, 9, 20, 25):
            assert _offsets(cq.collect(0, 1000, limit, set())) == offsets[:limit]
        assert _offsets(cq.collect(2, 11, 3, set())) == [4, 6, 8]
        assert _offsets(cq.collect(2, 7, 3, set())) == [4, 6]
    finally:
        cq.close()


def test_collect_leaves_out_skipped_indexes(tmp_path: Path) -> None:
    offsets = list(range(12))
    cq = _queue(tmp_path, offsets, 4)
    try:
        assert _offsets(cq.collect(0, 9, 5, {1, 2, 5})) == [0, 3, 4, 6, 7]
        assert _offsets(cq.collect(0, 6, 100, {0, 6})) == [1, 2, 3, 4, 5]
        whole = cq.collect(0, 100, 100, set())
        assert whole == [cq.entry(n) for n in range(12)]
    finally:
        cq.close()
