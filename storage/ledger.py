"""Which stored messages are still live: per-queue ack state and per-message reference counts.

Each durable queue keeps, over its consume-queue entry indexes, a low watermark (every entry
below it is done) plus the set of done entries above it, which is all a checkpoint needs to
save; and in memory a map queue offset -> entry index of its live entries, rebuilt at open
by reading the consume queue from the watermark. Acks name a queue offset (what the kernel
knows), so they stay right even if recovery had to skip a corrupt record.

Each message counts its live targets; when the last one goes, the message and its bytes leave
the statistics and its segment's live count drops: a segment with no live message can be
deleted once checkpoints no longer need it (`CommitLogStore.reclaim`).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from herald.storage.consume_queue import ConsumeQueue


@attrs.define(slots=True, eq=False)
class QueueState:
    """One durable queue: its consume queue and which of its entries are live."""

    queue_id: int
    cq: ConsumeQueue
    low: int = 0
    acked: set[int] = attrs.field(factory=set)
    live: dict[int, int] = attrs.field(factory=dict)  # queue offset -> entry index
    counts: dict[int, int] = attrs.field(factory=dict)  # queue offset -> delivery count

    def mark_done(self, index: int) -> None:
        low = self.low
        if index == low:
            low += 1
            acked = self.acked
            while low in acked:
                acked.remove(low)
                low += 1
            self.low = low
        elif index > low:
            self.acked.add(index)

    def load_live(self) -> list[tuple[int, int, int]]:
        """Rebuild `live` from the consume queue; returns (offset, index, position) of each."""
        found = []
        for index in range(self.low, self.cq.length):
            if index in self.acked:
                continue
            entry = self.cq.get(index)
            if entry is None:
                self.mark_done(index)
                continue
            position, _, offset = entry
            old = self.live.get(offset)
            if old is not None:  # the offset was reused; the older entry is done
                self.mark_done(old)
                found = [f for f in found if f[1] != old]
            self.live[offset] = index
            found.append((offset, index, position))
        return found


class Ledger:
    """Every durable queue's state and the live count of every message and segment."""

    def __init__(self, segment_size: int, raw_length: Callable[[int], int]) -> None:
        self.segment_size = segment_size
        self._raw_length = raw_length  # stored-bytes length of the message at an offset
        self.queues: dict[int, QueueState] = {}
        self.refs: dict[int, int] = {}  # message offset -> live targets
        self.segments: dict[int, int] = {}  # segment start -> live messages
        self.messages = 0
        self.bytes = 0

    def ref(self, position: int, raw_length: int | None = None) -> None:
        count = self.refs.get(position, 0)
        self.refs[position] = count + 1
        if count == 0:
            self.messages += 1
            self.bytes += self._raw_length(position) if raw_length is None else raw_length
            segment = position - position % self.segment_size
            self.segments[segment] = self.segments.get(segment, 0) + 1

    def unref(self, position: int) -> None:
        count = self.refs.get(position, 0) - 1
        if count > 0:
            self.refs[position] = count
            return
        if count < 0:
            return
        del self.refs[position]
        self.messages -= 1
        self.bytes -= self._raw_length(position)
        segment = position - position % self.segment_size
        left = self.segments.get(segment, 0) - 1
        if left > 0:
            self.segments[segment] = left
        else:
            self.segments.pop(segment, None)

    def add(
        self, state: QueueState, offset: int, index: int, position: int, raw_length: int
    ) -> None:
        """A new live entry; an entry live at the same offset is replaced (done)."""
        if offset in state.live:
            self.drop(state, offset)
        state.live[offset] = index
        self.ref(position, raw_length)

    def drop(self, state: QueueState, offset: int) -> bool:
        """The entry at `offset` is done (acked); False if no such live entry."""
        index = state.live.pop(offset, None)
        if index is None:
            return False
        state.counts.pop(offset, None)
        state.mark_done(index)
        entry = state.cq.get(index)
        if entry is not None:
            self.unref(entry[0])
        return True

    def remove_queue(self, queue_id: int) -> QueueState | None:
        """Forget a queue and release its live entries; returns its state (to destroy)."""
        state = self.queues.pop(queue_id, None)
        if state is not None:
            for index in state.live.values():
                entry = state.cq.get(index)
                if entry is not None:
                    self.unref(entry[0])
            state.live.clear()
        return state
