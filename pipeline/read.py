"""Reading one split into Arrow batches, and planning the splits of a read: the part of the
data source that needs no Spark, so the benchmark's plain-Python baseline and the tests run
the very code the executors run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path

import pyarrow as pa

from herald.pipeline.columns import FIELD_NAMES, BatchBuilder
from herald.pipeline.log_view import LogView, Split, splits
from herald.pipeline.options import ReadOptions
from herald.pipeline.records import Segment, first_record, hop
from herald.pipeline.scan import ScanResult, scan
from herald.storage.mapped_file import file_name
from herald.storage.record import MAGIC_MESSAGE, MESSAGE

log = logging.getLogger(__name__)

STORE_MS = FIELD_NAMES.index("store")  # in record.py's MESSAGE fields


class SegmentGone(RuntimeError):
    """A segment a query planned to read was deleted (retention) before it was read."""


def read_split(
    root: Path,
    split: Split,
    options: ReadOptions,
    queues: Mapping[int, tuple[str, str]],
    missing_ok: bool = True,
    verify: bool = True,
) -> Iterator[pa.RecordBatch]:
    """The record batches of the message records that start in `split`."""
    path = root / "commitlog" / file_name(split.segment)
    try:
        segment = Segment(path, split.segment)
    except FileNotFoundError:
        if missing_ok:
            log.warning("segment %s was deleted before it was read", path.name)
            return
        raise SegmentGone(
            f"commit log segment {path} was deleted (retention) before this query read it: "
            "the records in it are lost to this query; set failOnDataLoss=false to skip them"
        ) from None
    with segment:
        stop = min(split.stop, split.limit)
        at = split.begin
        if at:
            found = first_record(segment, at, stop)
            if found is None:
                return
            at = found
        builder = BatchBuilder(options, queues)
        for starts in _batches(scan(segment, at, stop, verify, ScanResult()), options.batch_rows):
            batch = builder.build(segment, starts)
            if batch is not None:
                yield batch


def _batches(parts: Iterator[pa.Array], rows: int) -> Iterator[pa.Array]:
    """The starts of `parts` regrouped into arrays of `rows` (the last one shorter)."""
    held: list[pa.Array] = []
    count = 0
    for part in parts:
        held.append(part)
        count += len(part)
        if count >= rows:
            pending = pa.concat_arrays(held) if len(held) > 1 else held[0]
            cut = count - count % rows
            for lo in range(0, cut, rows):
                yield pending.slice(lo, rows)
            held = [pending.slice(cut)] if cut < count else []
            count -= cut
    if count:
        yield pa.concat_arrays(held) if len(held) > 1 else held[0]


def first_store_ms(root: Path, start: int) -> int | None:
    """The store time of the first message record of a segment (store times never decrease
    along the log, so it bounds every later record from below)."""
    try:
        segment = Segment(root / "commitlog" / file_name(start), start)
    except FileNotFoundError:
        return None
    with segment:
        for at, magic, _ in hop(segment, 0, segment.size):
            if magic == MAGIC_MESSAGE:
                return MESSAGE.unpack_from(segment.data, at)[STORE_MS]
    return None


def plan(
    view: LogView, options: ReadOptions, begin: int | None = None, end: int | None = None
) -> list[Split]:
    """The splits of a batch read: the readable log, cut to the offset and time options."""
    lo = view.start if begin is None else begin
    hi = view.end if end is None else end
    if options.start_offset is not None:
        lo = max(lo, options.start_offset)
    if options.end_offset is not None:
        hi = min(hi, options.end_offset)
    present = view.segments
    if options.start_ms is not None or options.end_ms is not None:
        present = _segments_in_time(view, options)
    return list(splits(view.segment_size, lo, hi, options.split_bytes, present))


def _segments_in_time(view: LogView, options: ReadOptions) -> tuple[int, ...]:
    """Segments that may hold records stored in [start_ms, end_ms): segment k holds store
    times from its first record's to the next segment's first record's."""
    firsts = [(s, first_store_ms(view.root, s)) for s in view.segments]
    keep = []
    for i, (start, first) in enumerate(firsts):
        later = [t for _, t in firsts[i + 1 :] if t is not None]
        upper = later[0] if later else None
        if first is None:
            keep.append(start)
            continue
        if options.end_ms is not None and first >= options.end_ms:
            continue
        if options.start_ms is not None and upper is not None and upper < options.start_ms:
            continue
        keep.append(start)
    return tuple(keep)
