"""Priority queues (x-max-priority) and where requeued entries go back."""

from __future__ import annotations

import itertools

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herald.core.queue import Queue
from herald.core.vhost import VirtualHost
from tests.kernel_helpers import (
    RecordingSink,
    declare,
    drain,
    publish,
    ready_bodies,
    take,
)


def fill(vhost: VirtualHost, queue: str, *items: tuple[str, int | None]) -> None:
    for text, priority in items:
        publish(vhost, text, queue, priority=priority)


async def test_higher_priority_is_delivered_first(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_priority=10)
    fill(vhost, "q", ("p1", 1), ("p5", 5), ("none", None), ("p3", 3), ("p10", 10))
    assert drain(queue) == [b"p10", b"p5", b"p3", b"p1", b"none"]


async def test_fifo_within_a_priority(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_priority=5)
    fill(vhost, "q", ("a1", 1), ("b2", 2), ("c1", 1), ("d2", 2), ("e0", 0), ("f1", 1))
    assert drain(queue) == [b"b2", b"d2", b"a1", b"c1", b"f1", b"e0"]


async def test_priority_above_max_counts_as_max(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_priority=5)
    fill(vhost, "q", ("p4", 4), ("p5-first", 5), ("p9", 9), ("p5-last", 5), ("p200", 200))
    assert drain(queue) == [b"p5-first", b"p9", b"p5-last", b"p200", b"p4"]


async def test_non_priority_queue_ignores_priority(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    fill(vhost, "q", ("p1", 1), ("p9", 9), ("none", None), ("p5", 5))
    assert drain(queue) == [b"p1", b"p9", b"none", b"p5"]


async def test_consumer_receives_in_priority_order(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_priority=3)
    fill(vhost, "q", ("low", 1), ("high", 3), ("mid", 2))
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    assert sink.bodies == [b"high", b"mid", b"low"]


async def test_higher_priority_arrival_overtakes_waiting_messages(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_priority=9)
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=1)
    fill(vhost, "q", ("first", 0), ("low", 1), ("urgent", 9))
    assert sink.bodies == [b"first"]
    sink.ack_all()
    assert sink.bodies == [b"urgent"]
    sink.ack_all()
    assert sink.bodies == [b"low"]


async def test_requeued_entries_go_back_by_priority_and_offset(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_priority=10)
    fill(vhost, "q", ("a1", 1), ("b5", 5), ("c5", 5), ("d1", 1))
    holder = queue.getter(RecordingSink())
    taken = [queue.get(holder), queue.get(holder)]  # b5, c5
    fill(vhost, "q", ("e5", 5), ("f9", 9))
    queue.release(holder)
    assert ready_bodies(queue) == [b"f9", b"b5", b"c5", b"e5", b"a1", b"d1"]
    assert [e.redelivered for e in queue.browse()] == [False, True, True, False, False, False]
    assert all(e is not None and e.delivery_count == 1 for e in taken)


async def test_requeued_entry_goes_back_to_its_place_in_a_plain_queue(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    fill(vhost, "q", *[(str(i), None) for i in range(5)])
    zero, one, two = take(queue), take(queue), take(queue)
    queue.reject(one, requeue=True)
    assert ready_bodies(queue) == [b"1", b"3", b"4"]
    queue.reject(zero, requeue=True)
    assert ready_bodies(queue) == [b"0", b"1", b"3", b"4"]
    queue.ack(two)
    assert drain(queue) == [b"0", b"1", b"3", b"4"]


_names = itertools.count()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    max_priority=st.integers(min_value=1, max_value=12),
    priorities=st.lists(st.one_of(st.none(), st.integers(min_value=0, max_value=255)), max_size=30),
)
async def test_delivery_order_is_priority_then_publish_order(
    vhost: VirtualHost, max_priority: int, priorities: list[int | None]
) -> None:
    name = f"prop-{next(_names)}"
    queue: Queue = declare(vhost, name, x_max_priority=max_priority)
    for index, priority in enumerate(priorities):
        publish(vhost, str(index), name, priority=priority)
    expected = sorted(
        range(len(priorities)), key=lambda i: (-min(priorities[i] or 0, max_priority), i)
    )
    assert drain(queue) == [str(i).encode() for i in expected]
    vhost.delete_queue(name)
    await trio.lowlevel.checkpoint()
