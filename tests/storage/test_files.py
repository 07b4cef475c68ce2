"""The file-level pieces on their own: segments, the segment queue, consume queues, index files."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from herald.storage import record as rec
from herald.storage.consume_queue import ConsumeQueue
from herald.storage.index_file import IndexFile, IndexService
from herald.storage.mapped_file import MappedFile, MappedFileQueue, file_name, mmap_write
from herald.storage.recovery import scan

SEGMENT = 64 * 1024


def test_segment_is_named_by_offset_and_preallocated(tmp_path: Path) -> None:
    file = MappedFile.create(tmp_path / file_name(3 * SEGMENT), 3 * SEGMENT, SEGMENT)
    try:
        assert file.path.name == "00000000000000196608"
        stat = os.stat(file.path)
        assert stat.st_size == SEGMENT
        assert stat.st_blocks * 512 >= SEGMENT  # space claimed now, not on first write
    finally:
        file.close()


def test_segments_roll_and_records_never_span(tmp_path: Path) -> None:
    log = MappedFileQueue(tmp_path, SEGMENT)
    written = []
    for n in range(40):
        big = n % 3 == 0
        pending = rec.encode_metadata("k", "x" * 12000, "1") if big else rec.encode_delete_queue(n)
        position = log.place(pending.space, mmap_write, log.prepare)
        file = log.files[log.segment_start(position)]
        mmap_write(file, position % SEGMENT, [pending.head(position), pending.body])
        log.advance(position, pending.space)
        assert position // SEGMENT == (position + pending.space - 1) // SEGMENT
        written.append((position, pending.space))
    assert len(log) >= 3
    seen: list[rec.Record] = []
    end, count, skipped = scan(log, 0, seen.append)
    assert [r.position for r in seen] == [p for p, _ in written] and count == 40 and not skipped
    assert end == log.write_offset
    for (position, space), (following, _) in itertools.pairwise(written):
        if position // SEGMENT != following // SEGMENT:  # rolled: the rest is a filler
            at = (position + space) % SEGMENT
            file = log.files[position - position % SEGMENT]
            assert rec.decode(file.read(at, 8), position + space) == rec.EndRecord(
                position + space, SEGMENT - at
            )
    log.close()


def test_consume_queue_files_and_cut(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path / "7-0", 16)
    for n in range(40):
        cq.reserve()
        assert cq.put(1000 + n, 64, 50 + n, 40 + n, 1 + n % 2, n * 2) == n
    assert cq.get(33) == (1033, 64, 66)
    assert cq.entry(33) == (1033, 64, 83, 73, 2, 66)
    assert cq.get(40) is None
    assert sorted(os.listdir(cq.directory)) == [file_name(0), file_name(512), file_name(1024)]
    released = cq.release_below(35)
    assert len(released) == 2
    for file in released:
        file.delete()
    assert cq.get(20) is None and cq.get(35) == (1035, 64, 70)
    cq.close()
    again = ConsumeQueue.load(tmp_path / "7-0", 16, 36)
    assert again.length == 36 and again.first == 32
    assert again.get(35) == (1035, 64, 70) and again.get(36) is None
    again.destroy()
    assert not (tmp_path / "7-0").exists()


def test_index_file_chains_and_time_ranges(tmp_path: Path) -> None:
    index = IndexFile.create(tmp_path / file_name(0), 0, 1, 10)  # one slot: one chain
    base = 1_700_000_000_000
    for n in range(6):
        assert index.put(f"k{n % 2}", n * 100, base + n * 5000)
    assert index.query("k0", 0, 2**62, 10) == [400, 200, 0]  # newest first
    assert index.query("k1", base + 5000, base + 15000, 10) == [300, 100]
    assert index.query("k1", base, base + 6000, 1) == [100]
    assert index.query("k0", base + 60_000, 2**62, 10) == []
    assert index.query("zz", 0, 2**62, 10) == []
    for n in range(6, 9):
        assert index.put("k2", n * 100, base + n * 5000)
    assert not index.put("k2", 999, base + 50000)  # full: entry numbers 1..9
    index.truncate(4)  # after a crash: keep the first three entries
    assert index.query("k0", 0, 2**62, 10) == [200, 0]
    assert index.query("k2", 0, 2**62, 10) == []
    assert index.put("k2", 1200, base + 60000)
    assert index.query("k2", 0, 2**62, 10) == [1200]
    index.file.close()


def test_index_service_moves_to_the_prepared_file(tmp_path: Path) -> None:
    service = IndexService(tmp_path, 8, 4)
    service.files.append(service.prepare(0))
    for n in range(3):
        assert service.put("a", n, 1000)
    assert service.needs_prepare() == 1
    assert not service.put("a", 3, 1000)  # full and nothing prepared
    service.prepared = service.prepare(1)
    assert service.put("a", 4, 1000)
    assert [f.number for f in service.files] == [0, 1]
    assert service.query("a", 0, 2**62, 10) == [4, 2, 1, 0]
    service.close()
