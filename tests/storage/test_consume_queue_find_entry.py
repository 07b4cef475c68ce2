"""`ConsumeQueue.find_entry`, an ack's lookup: the same answer as `find` then `entry` for every
offset, with and without gaps, below `low`, past the end and across file boundaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from herald.storage.consume_queue import ConsumeQueue


def _queue(directory: Path, offsets: list[int], per_file: int) -> ConsumeQueue:
    cq = ConsumeQueue(directory / "cq", per_file)
    for n, offset in enumerate(offsets):
        cq.reserve()
        cq.put(n * 64, 60, 30, 10, 1, offset)
    return cq


def _two_steps(cq: ConsumeQueue, offset: int, low: int, last: int) -> tuple[int, tuple] | None:
    index = cq.find(offset, low, last)
    if index is None:
        return None
    entry = cq.entry(index)
    return None if entry is None else (index, entry)


@pytest.mark.parametrize("per_file", [3, 8, 1000])
@pytest.mark.parametrize(
    "offsets",
    [list(range(20)), [0, 1, 2, 4, 5, 7, 8, 9, 12, 13, 15], [3, 4, 10, 11, 12, 30]],
    ids=["no gaps", "gaps", "gaps at the end"],
)
def test_find_entry_agrees_with_find_then_entry(
    tmp_path: Path, per_file: int, offsets: list[int]
) -> None:
    cq = _queue(tmp_path, offsets, per_file)
    try:
        last = offsets[-1]
        for low in (0, 2, len(offsets) - 1, len(offsets)):
            for offset in range(-1, last + 3):
                found = cq.find_entry(offset, low, last)
                assert found == _two_steps(cq, offset, low, last), (offset, low)
                if found is not None:
                    assert found[1][5] == offset and found[0] >= low
        assert cq.find_entry(offsets[5], 0, last) == (5, cq.entry(5))
    finally:
        cq.close()
