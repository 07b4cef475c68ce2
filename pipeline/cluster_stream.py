"""`spark.readStream.format("herald").option("cluster", ...)`: tailing every group of a cluster.

Offsets are a JSON map group -> commit-log position, `{"g1": 40960, "g2": 0}`, each with the
single data dir's meaning (stream.py): every message record of that group's log starting
below it was handed to Spark, none at or above it. A group's nodes hold its log byte for byte,
so a position names the same record on each of them: the reader keeps one node per group
(cluster_layout.py: a slave where one exists) and moves to another only when that one is gone
or unreadable, and it reads each micro-batch from a node whose log reaches the batch's end (a
restarted query may have chosen a node that is behind the checkpoint). When it moves, or on a
restart, it checks that the group's position is a record boundary on the new node: a node
that cut a tail at a failover (CLUSTER.md §3.3) may not hold the records the query read.

A group that joins the cluster while the query runs is read from its start (what it still
has); a group that leaves keeps its last position in the offsets. `maxRecordsPerTrigger`
is shared out over the groups, each turn starting at the next group.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows

from herald.pipeline.cluster_layout import (
    ClusterError,
    ClusterOptions,
    Layout,
    NodeDir,
    choose,
    readable,
    resolve,
)
from herald.pipeline.log_view import LogView, open_log, splits
from herald.pipeline.options import OptionError
from herald.pipeline.records import Segment, first_record
from herald.pipeline.source import HeraldPartition
from herald.pipeline.stream import (
    DataLossError,
    HeraldStreamReader,
    advance,
    check_boundary,
    is_boundary,
    lost_range,
    position_at_time,
)

log = logging.getLogger(__name__)

STARTING_HELP = (
    'for a cluster: earliest, latest, or a JSON map of every group, {"g1": N, "g2": "earliest"}'
)


class ClusterStreamReader(HeraldStreamReader):
    """Micro-batches over every group of a cluster; the options of `HeraldStreamReader`,
    with `startingOffsets` per group (see STARTING_HELP)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        cluster = ClusterOptions.from_options(options)
        if cluster is None:
            raise OptionError("ClusterStreamReader needs .option('cluster', ...)")
        self.cluster = cluster
        self._layout: Layout | None = None
        self._sources: dict[str, NodeDir] = {}
        self._views: dict[str, LogView] = {}
        self._fresh: set[str] = set()  # groups whose node was (re)chosen: check positions
        self._group_until: dict[str, int] | None = None  # availableNow: ends at the start
        self._turn = 0

    # -- the groups and their nodes ------------------------------------------------------------
    def _refresh_groups(self) -> dict[str, LogView]:
        """Every group's view, from its node (kept while it is listed and readable)."""
        try:
            layout = resolve(self.cluster)
        except ClusterError as exc:
            if self._layout is None:
                raise
            log.warning("herald stream: %s; reading from the nodes chosen before", exc)
            layout = self._layout
        self._layout = layout
        for group in layout.groups():
            node = self._keep(layout, group)
            assert node.data_dir is not None  # readable
            self._views[group] = open_log(
                node.data_dir, self.read_options.durable_only, self._views.get(group)
            )
            self._sources[group] = node
        return {g: self._views[g] for g in layout.groups()}

    def _keep(self, layout: Layout, group: str) -> NodeDir:
        old = self._sources.get(group)
        if old is not None:
            for node in layout.candidates(group):
                if node.node == old.node and readable(node) is None:
                    return node
        node = choose(layout, group, self.cluster.read_from)
        self._fresh.add(group)
        log.info("herald stream: group %s is read from %s", group, node.describe())
        return node

    def _positions(self, value: Mapping[str, Any]) -> dict[str, int]:
        groups = set() if self._layout is None else set(self._layout.groups())
        if set(value) == {"offset"} and "offset" not in groups:
            raise OptionError(
                "herald stream: this checkpoint holds a data dir's offset "
                f"({json.dumps(dict(value))}), not a cluster's: give the cluster's query a "
                "checkpoint of its own"
            )
        try:
            return {str(group): int(position) for group, position in value.items()}
        except (TypeError, ValueError):
            raise OptionError(f"herald stream: not a cluster's offsets: {value!r}") from None

    # -- driver side -------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, int]:
        views = self._refresh_groups()
        if self.starting_ms is not None:
            return {g: position_at_time(v, self.starting_ms) for g, v in views.items()}
        text = self.starting.lower()
        if text in ("earliest", "latest"):
            return {g: v.start if text == "earliest" else v.end for g, v in views.items()}
        try:
            value = json.loads(self.starting)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise OptionError(f"option startingOffsets: {STARTING_HELP}, not {self.starting!r}")
        unknown, missing = sorted(set(value) - set(views)), sorted(set(views) - set(value))
        if unknown or missing:
            raise OptionError(
                f"option startingOffsets: {STARTING_HELP}; unknown: {', '.join(unknown) or '-'}"
                f", missing: {', '.join(missing) or '-'} (the cluster has {', '.join(views)})"
            )
        return {g: _starting(g, views[g], value[g]) for g in sorted(views)}

    def prepareForTriggerAvailableNow(self) -> None:
        self._group_until = {g: v.end for g, v in self._refresh_groups().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        views = self._refresh_groups()
        positions = self._positions(start)
        out = dict(positions)  # a group that left keeps its position
        groups = sorted(views)
        turn = self._turn % len(groups) if groups else 0
        self._turn += 1
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        for i, group in enumerate(groups[turn:] + groups[:turn]):
            view = views[group]
            known = group in positions
            begin = self._begin_group(group, view, positions[group]) if known else view.start
            end = view.end
            if self._group_until is not None:
                end = min(end, self._group_until.get(group, end))
            if end <= begin or budget == 0:
                if known:
                    out[group] = max(begin, positions[group])
                continue
            if budget is not None:
                end, seen = advance(view, begin, -(-budget // (len(groups) - i)), end)
                budget -= seen
            out[group] = end
        return {g: out[g] for g in sorted(out)}

    def _begin_group(self, group: str, view: LogView, position: int) -> int:
        """`position`, or where the group's log goes on: after what retention deleted, or
        (with failOnDataLoss=false) after a position that is no record on a new node."""
        lost = lost_range(view, position)
        if lost is not None:
            if self.fail_on_data_loss:
                raise DataLossError(
                    f"herald stream: group {group}: records from log position {lost[0]} to "
                    f"{lost[1]} were deleted by retention in {view.root} before this query "
                    "read them. Restart with a new checkpoint, or set failOnDataLoss=false "
                    "to skip what was lost."
                )
            log.warning("herald stream: group %s: positions %d to %d were deleted", group, *lost)
            return lost[1]
        if group not in self._fresh or position >= view.end:
            return position
        self._fresh.discard(group)
        if is_boundary(view, position):
            return position
        node = self._sources[group].node
        if self.fail_on_data_loss:
            raise DataLossError(
                f"herald stream: group {group}: no record starts at log position {position} "
                f"in {view.root} (node {node}): its log is not the one this query read (a "
                "tail cut at a failover?). Restart with a new checkpoint, or set "
                "failOnDataLoss=false to go on from the next record."
            )
        resumed = _next_record(view, position)
        log.warning(
            "herald stream: group %s: %d is no record on %s; from %d",
            group,
            position,
            node,
            resumed,
        )
        return resumed

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[HeraldPartition]:
        if self._layout is None:
            self._refresh_groups()
        positions, stops = self._positions(start), self._positions(end)
        out: list[HeraldPartition] = []
        for group in sorted(stops):
            known = group in positions
            begin, stop = positions.get(group, 0), stops[group]
            if begin >= stop:
                continue
            view = self._serving(group, stop)
            if self.fail_on_data_loss and known:
                self._begin_group(group, view, begin)
            out += [
                HeraldPartition(
                    str(view.root),
                    split,
                    self.read_options,
                    view.queues,
                    not (self.fail_on_data_loss and known),
                    self.verify,
                    group,
                )
                for split in splits(
                    view.segment_size,
                    begin,
                    stop,
                    self.read_options.split_bytes,
                    None if known else view.segments,  # a new group: what it still has
                )
            ]
        return out

    def _serving(self, group: str, stop: int) -> LogView:
        """A view of the group's log that reaches `stop`: its node's, else another node's."""
        view = self._views.get(group)
        if view is None or view.end < stop:
            view = self._refresh_groups().get(group)
        if view is not None and view.end >= stop:
            return view
        seen = []
        layout = self._layout
        for node in [] if layout is None else layout.candidates(group, self.cluster.read_from):
            if readable(node) is None and node.data_dir is not None:
                other = open_log(node.data_dir, self.read_options.durable_only)
                if other.end >= stop:
                    log.info("herald stream: group %s: batch read from %s", group, node.node)
                    return other
                seen.append(f"{node.node} ends at {other.end}")
        raise DataLossError(
            f"herald stream: group {group}: no node's log reaches position {stop} of this "
            f"batch ({'; '.join(seen) or 'no readable node'}): wait for the group's nodes"
        )


def _starting(group: str, view: LogView, value: Any) -> int:
    """One group's `startingOffsets` entry: earliest, latest or a record's position."""
    if value in ("earliest", "latest"):
        return view.start if value == "earliest" else view.end
    if not isinstance(value, int) or isinstance(value, bool):
        raise OptionError(f"option startingOffsets: group {group}: {STARTING_HELP}")
    try:
        check_boundary(view, value)
    except OptionError as exc:
        raise OptionError(f"group {group}: {exc}") from None
    return value


def _next_record(view: LogView, position: int) -> int:
    """The first record boundary after `position` in its segment (or the next segment)."""
    seg = position - position % view.segment_size
    with Segment(view.path_of(seg), seg) as segment:
        stop = min(view.end - seg, segment.size)
        found = first_record(segment, position - seg, stop)
    return seg + (found if found is not None else stop)
