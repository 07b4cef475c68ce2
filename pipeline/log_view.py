"""The driver's view of a data dir: its segments, where its readable log ends, and the names
of its queues. Read-only: nothing here takes the store's lock or writes a byte, so it works on
the data dir of a running broker as on a copy.

Where the log ends: the newest checkpoint says the log is fsynced below `log_end`; after it,
the tail is scanned record by record with recovery's checks (size, magic, own position, CRC),
and the readable log ends before the first record that fails them. A record the broker is
copying into the page cache at that moment fails its CRC, so a reader never returns a torn
record; the next scan picks it up once complete. `durable_only` stops at the checkpoint.

Queue names: records name queues by store id. The checkpoint holds the metadata table (queue
records carry `store_id`, `vhost`, `name`); metadata records after it (new queues) are read
by the same tail scan. A queue deleted before both kept checkpoints has no name any more:
its rows have a `queue_id` and a null `queue`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import attrs

from herald.pipeline.records import MAGIC_METADATA, Segment, metadata_at, valid_size
from herald.storage.checkpoint import read_checkpoints
from herald.storage.mapped_file import file_name, parse_name
from herald.storage.record import ALIGN, MAGIC_END, aligned

log = logging.getLogger(__name__)

QUEUE_KIND = "queue"  # core/definitions.py's metadata kind for durable queues


class DataDirError(ValueError):
    """A path that is not a herald data dir (the message says what was expected)."""


def store_root(path: Path) -> Path:
    """The store directory of a data dir: `DATA_DIR/store`, or DATA_DIR itself if it is one."""
    path = Path(path)
    for candidate in (path / "store", path):
        if (candidate / "commitlog").is_dir():
            return candidate
    raise DataDirError(
        f"{path} is not a herald data dir: expected {path / 'store' / 'commitlog'} "
        "(the --data-dir of a broker using the commit-log store)"
    )


@attrs.frozen
class LogView:
    """What a query plans against: segments by start offset and the readable end."""

    root: Path
    segment_size: int
    segments: tuple[int, ...]  # start offsets of the segment files present, sorted
    start: int  # the first readable position (the first segment's start)
    end: int  # readable records all start below this
    durable: int  # the newest checkpoint's log_end
    queues: dict[int, tuple[str, str]]  # store id -> (vhost, name)

    def path_of(self, start: int) -> Path:
        return self.root / "commitlog" / file_name(start)


def _segment_starts(root: Path) -> list[int]:
    starts = [parse_name(p.name) for p in (root / "commitlog").iterdir()]
    return sorted(s for s in starts if s is not None)


def _queue_names(metadata: dict[str, dict[str, str]], into: dict[int, tuple[str, str]]) -> None:
    for text in metadata.get(QUEUE_KIND, {}).values():
        _add_queue(text, into)


def _add_queue(text: str | None, into: dict[int, tuple[str, str]]) -> None:
    if text is None:
        return
    try:
        record = json.loads(text)
        into[int(record["store_id"])] = (str(record["vhost"]), str(record["name"]))
    except (ValueError, KeyError, TypeError):
        return  # a queue without a store id (transient) or an unexpected record


def open_log(path: Path, durable_only: bool = False, scan_from: LogView | None = None) -> LogView:
    """The current view of the data dir at `path`. With `scan_from` (a previous view of the
    same dir), the tail scan continues where that one ended instead of at the checkpoint."""
    root = store_root(path)
    checkpoints = read_checkpoints(root)
    newest, previous = checkpoints.newest, checkpoints.previous
    starts = _segment_starts(root)
    if newest is not None:
        segment_size = newest.segment_size
    elif starts:
        segment_size = (root / "commitlog" / file_name(starts[0])).stat().st_size
    else:
        segment_size = 0
    queues: dict[int, tuple[str, str]] = {}
    for checkpoint in (previous, newest):
        if checkpoint is not None:
            _queue_names({k: dict(v) for k, v in checkpoint.metadata.items()}, queues)
    durable = newest.log_end if newest is not None else (starts[0] if starts else 0)
    first = starts[0] if starts else durable
    if scan_from is not None and scan_from.root == root:
        queues.update(scan_from.queues)
        tail_from = max(scan_from.end, durable)
    else:
        tail_from = durable if newest is not None else first
    end = durable if durable_only else _scan_tail(root, starts, segment_size, tail_from, queues)
    return LogView(root, segment_size, tuple(starts), first, end, durable, queues)


def _scan_tail(
    root: Path,
    starts: list[int],
    segment_size: int,
    at: int,
    queues: dict[int, tuple[str, str]],
) -> int:
    """The readable end: scanning valid records from `at` (collecting queue names)."""
    if not starts or segment_size <= 0:
        return at
    present = set(starts)
    while True:
        seg_start = at - at % segment_size
        if seg_start not in present:
            later = [s for s in starts if s > seg_start]
            if not later:
                return at
            at = later[0]  # deleted by retention: the log goes on in the next segment kept
            continue
        with Segment(root / "commitlog" / file_name(seg_start), seg_start) as segment:
            rel = at - seg_start
            while rel < segment_size:  # a segment filled to its last byte has no filler
                found = valid_size(segment, rel)
                if found is None:
                    return seg_start + rel
                magic, size = found
                if magic == MAGIC_END:
                    break
                if magic == MAGIC_METADATA:
                    record = metadata_at(segment, rel, size)
                    if record is not None and record.kind == QUEUE_KIND:
                        _add_queue(record.value_json, queues)
                rel += (size + ALIGN - 1) & ~(ALIGN - 1)
        at = seg_start + segment_size


@attrs.frozen
class Split:
    """A byte range of one segment: its reader takes the records that start in it."""

    segment: int  # the segment's start offset
    begin: int  # relative to the segment, inclusive
    stop: int  # relative, exclusive
    limit: int  # relative: where the readable log ends in this segment


def splits(
    segment_size: int,
    begin: int,
    end: int,
    split_bytes: int,
    present: tuple[int, ...] | None = None,
) -> Iterator[Split]:
    """Ranges covering the records that start in [begin, end): the part of each segment is
    cut into as few equal ranges as keep each within `split_bytes` (so 224 MiB of a segment
    are two tasks of 112 MiB, not 64 + 64 + 64 + 32: tasks of one size keep every core busy
    to the end, and each task costs Spark some tens of milliseconds). The same (begin, end)
    always gives the same ranges; segments not in `present` (when given) are left out."""
    if segment_size <= 0:
        return
    step = max(ALIGN, split_bytes - split_bytes % ALIGN)
    seg = begin - begin % segment_size
    while seg < end:
        if present is None or seg in present:
            lo = max(begin, seg) - seg
            limit = min(end - seg, segment_size)
            if lo < limit:
                parts = -(-(limit - lo) // step)
                size = aligned(-(-(limit - lo) // parts))
                while lo < limit:
                    hi = min(lo + size, limit)
                    yield Split(seg, lo, hi, limit)
                    lo = hi
        seg += segment_size
