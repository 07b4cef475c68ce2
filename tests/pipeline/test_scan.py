"""The record scan: the column-wise fast pass finds exactly the message records that the
record-by-record walk finds, on clean segments and on damaged ones; the tail scan and the
splits of a read."""

from __future__ import annotations

import random
import zlib
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from herald.pipeline import scan
from herald.pipeline.log_view import open_log, splits
from herald.pipeline.options import MIB, ReadOptions
from herald.pipeline.read import plan, read_split
from herald.pipeline.records import Segment, hop
from herald.storage import record
from herald.storage.mapped_file import file_name
from tests.pipeline.segments import LogBuilder, filling, message, queue_metadata

SEGMENT = 65536
MAGIC = record.MAGIC_MESSAGE


def _mixed_log() -> tuple[LogBuilder, list[int]]:
    """One segment of messages of many sizes among acks, deliveries and metadata records,
    with one message whose body holds a record header naming its own position (a record to
    any reader that trusts a magic alone); returns the builder and the message positions."""
    rng = random.Random(10)
    log = LogBuilder(SEGMENT)
    for pending in queue_metadata():
        log.add(pending)
    positions = []
    i = 0
    while log.free() > 2048:
        kind = rng.random()
        if kind < 0.1:
            log.add(record.encode_acks(1, [i, i + 1, i + 2]))
        elif kind < 0.15:
            log.add(record.encode_ack(2, i))
        elif kind < 0.2:
            log.add(record.encode_delivery(3, i, 2))
        elif kind < 0.22:
            log.add(queue_metadata()[0])
        elif kind < 0.23:  # valid but shorter than any message record: not a message
            data = bytes(28)
            log.add(record.Pending(48, record.MAGIC_MESSAGE, zlib.crc32(data), data + bytes(4)))
        else:
            body = bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 7, 100, 600))))
            message_id = f"m{i}" if i % 5 == 0 else None
            targets = [(1, i), (2, i)] if i % 7 == 0 else None
            positions.append(log.add(message(i, body, targets, message_id)))
        i += 1
    # a body with a record header at an aligned spot, holding that spot's own position
    plain = message(i, bytes(512))
    at = log.at
    fake_at = (at + plain.size - 512 + 7) & ~7
    fake = bytearray(512)
    head = record.COMMON.pack(64, record.magic_of(record.Kind.ACK), 0, fake_at)
    offset = fake_at - (at + plain.size - 512)
    fake[offset : offset + len(head)] = head
    positions.append(log.add(message(i, bytes(fake))))
    return log, positions


def _damaged(data: bytes, positions: list[int]) -> dict[str, bytes]:
    """Copies of a segment's bytes, each damaged in one way."""
    out = {"clean": data}
    mid = positions[len(positions) // 2]
    flipped = bytearray(data)
    flipped[mid + int.from_bytes(data[mid : mid + 4], "big") - 1] ^= 0x40  # a CRC mismatch
    out["flipped body byte"] = bytes(flipped)
    zeroed = bytearray(data)
    zeroed[mid : mid + 300] = bytes(300)  # a hole inside the log
    out["zeroed records"] = bytes(zeroed)
    garbage = bytearray(data)
    rng = random.Random(3)
    garbage[mid : mid + 1000] = bytes(rng.randrange(256) for _ in range(1000))
    out["garbage"] = bytes(garbage)
    ended = bytearray(data)
    ended[mid:] = bytes(len(ended) - mid)  # the data ends early (never written)
    out["ends early"] = bytes(ended)
    short = bytearray(data)
    short[mid : mid + 4] = (40).to_bytes(4, "big")  # a message record too short to be one
    out["short size"] = bytes(short)
    filler = bytearray(data)
    filler[mid : mid + 8] = record.encode_end(len(data) - mid)  # the segment ends here
    out["early filler"] = bytes(filler)
    last = positions[-1]
    past = bytearray(data)  # the last record's size runs past the end of the segment
    past[last:] = bytes(len(data) - last)
    ack = record.magic_of(record.Kind.ACK)
    past[last : last + 20] = record.COMMON.pack(len(data), ack, 0, last)
    out["runs past the end"] = bytes(past)
    moved = bytearray(data)
    moved[mid + 12 : mid + 20] = (mid + 8).to_bytes(8, "big")  # not its own position
    out["wrong position"] = bytes(moved)
    return out


@pytest.mark.parametrize("window", [scan.WINDOW, 4096])
def test_the_fast_pass_finds_what_the_record_walk_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    monkeypatch.setattr(scan, "WINDOW", window)
    monkeypatch.setattr(scan, "SLOW_RECORDS", 3)  # back to the fast pass soon after damage
    log, positions = _mixed_log()
    data_dir = log.write(tmp_path / "data")
    path = data_dir / "store" / "commitlog" / file_name(0)
    clean = path.read_bytes()
    walked: list[int] = []
    walk_some = scan._walk

    def counted(*args: Any) -> tuple[int, bool, list[int]]:
        found = walk_some(*args)
        walked.extend(found[2])
        return found

    monkeypatch.setattr(scan, "_walk", counted)
    with Segment(path, 0) as segment:
        hop_all = list(hop(segment, 0, segment.size))
        starts = [at for at, _, _ in hop_all]
        assert scan.message_starts(segment, 0, segment.size).starts.to_pylist() == positions
    # the fast pass leaves to the walk only the records after an irregular one (a header
    # inside a body, a message record too short to be one): SLOW_RECORDS each
    irregular = 1 + sum(1 for _, magic, size in hop_all if magic == MAGIC and size < 86)
    assert positions[-1] in walked and len(walked) <= 3 * irregular < len(positions) // 4
    assert len(positions) > 100
    for name, data in _damaged(clean, positions).items():
        path.write_bytes(data)
        with Segment(path, 0) as segment:
            for at in starts[:: max(1, len(starts) // 25)]:
                for stop in (segment.size, at + 1000, at + 8, (at + segment.size) // 2):
                    fast = scan.message_starts(segment, at, stop)
                    walk = scan.walk_all(segment, at, stop)
                    assert fast.starts.to_pylist() == walk.starts.to_pylist(), (name, at, stop)
                    assert fast.corrupt == walk.corrupt, (name, at, stop)
            whole = scan.message_starts(segment, 0, segment.size)
            found = whole.starts.to_pylist()
        if name == "clean":
            continue
        assert found != positions or whole.corrupt, name  # the damage is seen
        assert set(found) <= set(positions), name  # nothing is read from the damage
        assert found[:10] == positions[:10], name  # before the damage, every record is read


def test_crc_checks_can_be_turned_off(tmp_path: Path) -> None:
    log, positions = _mixed_log()
    path = log.write(tmp_path / "data") / "store" / "commitlog" / file_name(0)
    data = _damaged(path.read_bytes(), positions)["flipped body byte"]
    path.write_bytes(data)
    with Segment(path, 0) as segment:
        checked = scan.message_starts(segment, 0, segment.size).starts.to_pylist()
        unchecked = scan.message_starts(segment, 0, segment.size, verify=False).starts
        assert unchecked.to_pylist() == positions
        walked = scan.walk_all(segment, 0, segment.size, False).starts
        assert unchecked.to_pylist() == walked.to_pylist()
    assert len(checked) == len(positions) - 1


def test_the_tail_scan_goes_on_after_a_segment_filled_to_its_last_byte(tmp_path: Path) -> None:
    log = LogBuilder(SEGMENT)
    for pending in queue_metadata():
        log.add(pending)
    i = 0
    while log.free() > 600:
        log.add(message(i))
        i += 1
    log.add(filling(log.free(), i))  # no filler: the next record starts the next segment
    assert log.at == SEGMENT
    for j in range(i + 1, i + 11):
        log.add(message(j))
    data_dir = log.write(tmp_path / "data")
    view = open_log(data_dir)
    assert view.end == log.at
    options = ReadOptions(path=data_dir)
    rows = [b for s in plan(view, options) for b in read_split(view.root, s, options, view.queues)]
    assert sum(len(b) for b in rows) == i + 11


def test_splits_are_equal_parts_of_each_segment() -> None:
    size = 256 * MIB
    got = list(splits(size, 0, size + 224 * MIB, 128 * MIB))
    assert [(s.segment, s.begin, s.stop) for s in got] == [
        (0, 0, 128 * MIB),
        (0, 128 * MIB, size),
        (size, 0, 112 * MIB),
        (size, 112 * MIB, 224 * MIB),
    ]
    odd = list(splits(SEGMENT, 8, 3 * SEGMENT - 16, 20_000))
    assert all(s.stop - s.begin <= 20_000 and s.begin % 8 == 0 for s in odd)
    covered = [(s.segment + s.begin, s.segment + s.stop) for s in odd]
    assert covered[0][0] == 8 and covered[-1][1] == 3 * SEGMENT - 16
    assert all(a[1] == b[0] for a, b in pairwise(covered))
    assert odd == list(splits(SEGMENT, 8, 3 * SEGMENT - 16, 20_000))  # the same every time
