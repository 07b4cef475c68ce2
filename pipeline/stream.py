"""`spark.readStream.format("herald")`: tailing a data dir.

Offsets are commit-log positions, `{"offset": N}`: N is a record boundary (or a segment's
start), every message record starting below it was delivered to Spark and none at or above
it. One key, so the JSON Spark compares as text is deterministic. A micro-batch (start, end)
is cut into splits by arithmetic alone (`log_view.splits`), so replaying it after a restart
reads exactly the same records: no duplicates, no gaps.

`latestOffset`, `initialOffset`, `partitions` and `commit` run in one long-lived Python
process per query on the driver, so its `LogView` is kept and the tail scan continues from
the last end instead of the checkpoint. `read` runs on executors, from the partition alone.

Data loss: retention deletes a segment once its messages are all acked. If a batch needs a
segment that is gone, the query fails with a message that names it, or, with
`failOnDataLoss=false`, skips to what still exists (Kafka's option of the same name).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from herald.pipeline.log_view import LogView, open_log, splits
from herald.pipeline.options import (
    OptionError,
    ReadOptions,
    _get,
    parse_bool,
    parse_int,
    parse_time_ms,
)
from herald.pipeline.read import STORE_MS, first_store_ms
from herald.pipeline.records import Segment, hop, valid_size
from herald.pipeline.source import HeraldPartition
from herald.storage.mapped_file import file_name
from herald.storage.record import ALIGN, MAGIC_MESSAGE, MESSAGE

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Records a streaming query needs were deleted by retention."""


def offset(position: int) -> dict[str, int]:
    return {"offset": int(position)}


class HeraldStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the commit log. Options: `startingOffsets` (earliest, latest,
    a position or `{"offset": N}`), `startingTimestamp` (store time, ms or ISO-8601),
    `maxRecordsPerTrigger`, `failOnDataLoss`, and the batch reader's filters."""

    def __init__(self, options: dict[str, str]) -> None:
        self.read_options = ReadOptions.from_options(options)
        self.starting = (_get(options, "startingOffsets") or "latest").strip()
        text = _get(options, "startingTimestamp")
        self.starting_ms = None if text is None else parse_time_ms(text, "startingTimestamp")
        self.max_records = parse_int(options, "maxRecordsPerTrigger", None, low=1)
        self.fail_on_data_loss = parse_bool(options, "failOnDataLoss", True)
        self.verify = parse_bool(options, "verifyCrc", True)
        self._view: LogView | None = None
        self._until: int | None = None  # availableNow: the end when the query started

    # -- driver side -------------------------------------------------------------------------
    def _refresh(self) -> LogView:
        self._view = open_log(self.read_options.path, self.read_options.durable_only, self._view)
        return self._view

    def initialOffset(self) -> dict[str, int]:
        view = self._refresh()
        if self.starting_ms is not None:
            return offset(position_at_time(view, self.starting_ms))
        text = self.starting.lower()
        if text == "earliest":
            return offset(view.start)
        if text == "latest":
            return offset(view.end)
        try:
            value = json.loads(self.starting)
            position = int(value["offset"] if isinstance(value, dict) else value)
        except (ValueError, KeyError, TypeError):
            raise OptionError(
                "option startingOffsets: expected earliest, latest, a log position or "
                f'{{"offset": N}}, not {self.starting!r}'
            ) from None
        check_boundary(view, position)
        return offset(position)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_records is None else ReadMaxRows(self.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        self._until = self._refresh().end

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        view = self._refresh()
        begin = self._begin(view, int(start["offset"]))
        end = view.end if self._until is None else min(view.end, self._until)
        if end <= begin:
            return offset(max(begin, int(start["offset"])))  # past what retention deleted
        if isinstance(limit, ReadMaxRows):
            end, _ = advance(view, begin, limit.max_rows, end)
        return offset(end)

    def _begin(self, view: LogView, position: int) -> int:
        """`position`, or, when retention deleted its segment, where reading can go on."""
        lost = lost_range(view, position)
        if lost is None:
            return position
        if self.fail_on_data_loss:
            raise DataLossError(
                f"herald stream: records from log position {lost[0]} to {lost[1]} were "
                f"deleted by retention in {view.root} before this query read them. Restart "
                "with a new checkpoint, or set failOnDataLoss=false to skip what was lost."
            )
        log.warning("herald stream: log positions %d to %d were deleted; skipped", *lost)
        return lost[1]

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[HeraldPartition]:
        begin, stop = int(start["offset"]), int(end["offset"])
        if begin >= stop:
            return []
        view = self._view or self._refresh()
        if stop > view.end:
            view = self._refresh()
        if self.fail_on_data_loss:
            self._begin(view, begin)
        options = self.read_options
        return [
            HeraldPartition(
                str(view.root), s, options, view.queues, not self.fail_on_data_loss, self.verify
            )
            for s in splits(view.segment_size, begin, stop, options.split_bytes)
        ]

    def commit(self, end: dict[str, Any]) -> None:
        pass  # the broker keeps no consumer position for Spark: offsets live in the checkpoint

    # -- executors ---------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, HeraldPartition):
            yield from partition.batches()


def lost_range(view: LogView, position: int) -> tuple[int, int] | None:
    """(position, where the log resumes) if the segment holding `position` was deleted."""
    if position >= view.end or view.segment_size <= 0:
        return None
    seg = position - position % view.segment_size
    if seg in view.segments:
        return None
    later = [s for s in view.segments if s > seg]
    return position, (later[0] if later else view.end)


def check_boundary(view: LogView, position: int) -> None:
    """Refuse a starting position where no record starts (it would read from mid-record)."""
    if position < 0 or position > view.end:
        raise OptionError(
            f"option startingOffsets: position {position} is outside the log "
            f"[{view.start}, {view.end}]"
        )
    if not is_boundary(view, position):
        raise OptionError(f"option startingOffsets: no record starts at log position {position}")


def is_boundary(view: LogView, position: int) -> bool:
    """Whether a record starts at `position` (or it is a segment's start, the log's end, or in
    a deleted segment: nothing there to contradict it)."""
    size = view.segment_size
    rel = position % size if size > 0 else 0
    if position >= view.end or rel == 0 or position - rel not in view.segments:
        return True
    with Segment(view.path_of(position - rel), position - rel) as segment:
        return valid_size(segment, rel) is not None


def advance(view: LogView, begin: int, rows: int, end: int) -> tuple[int, int]:
    """(the position after the `rows`-th message record from `begin`, or `end`; how many
    message records lie between `begin` and it)."""
    size, at, seen = view.segment_size, begin, 0
    while at < end:
        seg = at - at % size
        if seg not in view.segments:
            at = seg + size
            continue
        with Segment(Path(view.path_of(seg)), seg) as segment:
            next_at = seg + size
            for rel, magic, length in hop(segment, at - seg, min(end - seg, size)):
                if magic == MAGIC_MESSAGE:
                    seen += 1
                    if seen >= rows:
                        return min(seg + rel + ((length + ALIGN - 1) & ~(ALIGN - 1)), end), seen
        at = next_at
    return end, seen


def position_at_time(view: LogView, when_ms: int) -> int:
    """The position of the first message record stored at or after `when_ms` (store times
    never decrease along the log), or the end of the log."""
    candidates = list(view.segments)
    firsts = [first_store_ms(view.root, s) for s in candidates]
    index = 0
    for i, first in enumerate(firsts):
        if first is not None and first < when_ms:
            index = i
    for seg in candidates[index:]:
        path = view.root / "commitlog" / file_name(seg)
        with Segment(path, seg) as segment:
            stop = min(view.end - seg, segment.size)
            for rel, magic, _ in hop(segment, 0, stop):
                if (
                    magic == MAGIC_MESSAGE
                    and MESSAGE.unpack_from(segment.data, rel)[STORE_MS] >= when_ms
                ):
                    return seg + rel
    return view.end
