"""`ConsumerSet.next_with_credit` stops at the first consumer of the top priority with credit;
it must pick what a full scan picks, and move the round-robin cursor the same way."""

from __future__ import annotations

from typing import cast

from hypothesis import given
from hypothesis import strategies as st

from herald.core.consumer import Consumer, ConsumerSet, DeliverySink
from herald.core.queue import Queue

# Stand-ins: the pick reads a consumer's priority and credit, never its queue or sink.
NO_QUEUE = cast(Queue, None)
NO_SINK = cast(DeliverySink, None)


def full_scan(consumers: list[Consumer], rr: int) -> tuple[Consumer | None, int]:
    """The pick of a scan over every consumer (the code before the early stop)."""
    count = len(consumers)
    start = rr % count if count else 0
    best, best_index = None, 0
    for step in range(count):
        index = (start + step) % count
        candidate = consumers[index]
        if best is not None and candidate.priority < best.priority:
            continue
        if candidate.has_credit() and (best is None or candidate.priority > best.priority):
            best, best_index = candidate, index
    return best, (best_index + 1 if best is not None else rr)


@given(
    st.lists(st.tuples(st.integers(-2, 2), st.booleans()), max_size=6),
    st.integers(0, 20),
)
def test_the_pick_and_the_cursor_match_a_full_scan(specs: list[tuple[int, bool]], rr: int) -> None:
    consumers = ConsumerSet()
    for number, (priority, credit) in enumerate(specs):
        consumer = Consumer(NO_QUEUE, str(number), NO_SINK, priority=priority)
        consumer.suspended = not credit
        consumers.add(consumer)
    ordered = list(consumers)
    consumers._rr = rr
    expected, cursor = full_scan(ordered, rr)
    assert consumers.next_with_credit() is expected
    if len(ordered) > 1:
        assert consumers._rr == cursor
