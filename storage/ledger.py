"""Which stored messages are still live, in memory that does not grow with the live messages.

Per durable queue, over its consume-queue entry indexes: a low watermark (every entry below is
done) and the set of done entries above it (out-of-order acks), the delivery counts of the
entries that have one, and the next queue offset. Live entries are the indexes from the
watermark to the end that are not in the done set; an ack names a queue offset and finds its
entry by binary search in the consume queue (offsets only grow), so no map from offsets to
entries is kept. A queue of ten million un-acked messages costs a few integers here.

Per message, a reference count only for a message with more than one target (fan-out) while
some but not all of its targets are done: a single-target message is released by its one ack,
and each consume-queue entry says how many targets its message has. When a message is released
it leaves the running totals (messages, stored bytes) and its segment's live count: a segment
with no live message can be deleted once checkpoints no longer need it
(`CommitLogStore.reclaim`). The totals, segment counts and reference counts are saved in every
checkpoint, so opening a store does not walk its consume queues.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from herald.storage.checkpoint import Totals
from herald.storage.consume_queue import CHUNK, ConsumeQueue, Entry


@attrs.define(slots=True, eq=False)
class QueueState:
    """One durable queue: its consume queue and which of its entries are done."""

    queue_id: int
    cq: ConsumeQueue
    low: int = 0
    acked: set[int] = attrs.field(factory=set)  # done entry indexes >= low
    counts: dict[int, int] = attrs.field(factory=dict)  # queue offset -> delivery count
    next_offset: int = 0  # one past the highest queue offset appended

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

    def find(self, offset: int) -> int | None:
        """The entry index of the live entry at queue `offset`, or None."""
        index = self.cq.find(offset, self.low, self.next_offset - 1)
        if index is None or index in self.acked:
            return None
        return index

    def find_entry(self, offset: int) -> tuple[int, Entry] | None:
        """(entry index, entry) of the live entry at queue `offset`, or None."""
        found = self.cq.find_entry(offset, self.low, self.next_offset - 1)
        if found is None or found[0] in self.acked:
            return None
        return found

    def live_entries(self, begin: int = 0, chunk: int = CHUNK) -> Iterator[tuple[int, Entry]]:
        """(index, entry) of every live entry from index `begin` on, in order; the consume
        queue is read `chunk` entries at a time."""
        acked = self.acked
        entries = self.cq.entries(max(begin, self.low), chunk)
        if not acked:
            return entries
        return ((index, entry) for index, entry in entries if index not in acked)


class Ledger:
    """Every durable queue's state, the live totals, and the live count of every segment."""

    def __init__(self, segment_size: int) -> None:
        self.segment_size = segment_size
        self.queues: dict[int, QueueState] = {}
        self.refs: dict[int, int] = {}  # fan-out message offset -> live targets (if > 0)
        self.segments: dict[int, int] = {}  # segment start -> live messages
        self.messages = 0
        self.bytes = 0

    def add_message(self, position: int, raw_length: int, targets: int) -> None:
        """A message was stored with `targets` live entries."""
        self.messages += 1
        self.bytes += raw_length
        segment = position - position % self.segment_size
        segments = self.segments
        segments[segment] = segments.get(segment, 0) + 1
        if targets > 1:
            self.refs[position] = targets

    def release(self, position: int, raw_length: int, targets: int) -> None:
        """One live entry of the message at `position` is done."""
        if targets > 1:
            left = self.refs.pop(position, 1) - 1
            if left > 0:
                self.refs[position] = left
                return
        self.messages -= 1
        self.bytes -= raw_length
        segment = position - position % self.segment_size
        left = self.segments.get(segment, 0) - 1
        if left > 0:
            self.segments[segment] = left
        else:
            self.segments.pop(segment, None)

    def drop_index(self, state: QueueState, index: int) -> None:
        """The live entry `index` of `state` is done (acked, or unreadable)."""
        state.mark_done(index)
        entry = state.cq.entry(index)
        if entry is not None:
            self.release_entry(state, entry)

    def release_entry(self, state: QueueState, entry: Entry) -> None:
        """`entry` of `state`, marked done, leaves the totals (and its delivery count)."""
        position, _, raw_length, _, targets, offset = entry
        if state.counts:
            state.counts.pop(offset, None)
        self.release(position, raw_length, targets)

    def drop(self, state: QueueState, offset: int) -> bool:
        """The entry at `offset` is done; False if no such live entry."""
        index = state.find(offset)
        if index is None:
            return False
        self.drop_index(state, index)
        return True

    def remove_queue(self, queue_id: int) -> QueueState | None:
        """Forget a queue and release its live entries; returns its state (to destroy).
        This walks the queue's live entries: O(live entries), read from the consume queue."""
        state = self.queues.pop(queue_id, None)
        if state is None:
            return None
        refs, size = self.refs, self.segment_size
        released = released_bytes = 0
        per_segment: dict[int, int] = {}
        for _, (position, _, raw_length, _, targets, _) in state.live_entries():
            if targets > 1:
                left = refs.pop(position, 1) - 1
                if left > 0:
                    refs[position] = left
                    continue
            released += 1
            released_bytes += raw_length
            segment = position - position % size
            per_segment[segment] = per_segment.get(segment, 0) + 1
        self.messages -= released
        self.bytes -= released_bytes
        segments = self.segments
        for segment, count in per_segment.items():
            left = segments.get(segment, 0) - count
            if left > 0:
                segments[segment] = left
            else:
                segments.pop(segment, None)
        return state

    # -- checkpoints -----------------------------------------------------------------------
    def totals(self) -> Totals:
        return Totals(self.messages, self.bytes, dict(self.segments), dict(self.refs))

    def load_totals(self, totals: Totals) -> None:
        self.messages = totals.messages
        self.bytes = totals.bytes
        self.segments = dict(totals.segments)
        self.refs = dict(totals.refs)
