"""Consumers: single active consumer, priorities, round-robin, exclusivity; queue lifetimes."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from herald.core.errors import AccessRefused, PreconditionFailed, ResourceLocked
from herald.core.vhost import VirtualHost
from tests.kernel_helpers import (
    RecordingSink,
    declare,
    drain,
    publish,
    ready_bodies,
    take,
)


def fill(vhost: VirtualHost, queue: str, count: int) -> None:
    for i in range(count):
        publish(vhost, str(i), queue)


# -- single active consumer -----------------------------------------------------------------


async def test_single_active_consumer_only_the_first_gets_messages(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_single_active_consumer=True)
    first, second = RecordingSink(), RecordingSink()
    queue.add_consumer("first", first)
    queue.add_consumer("second", second)
    fill(vhost, "q", 3)
    assert first.bodies == [b"0", b"1", b"2"]
    assert second.bodies == []


async def test_single_active_consumer_others_wait_even_when_it_is_full(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_single_active_consumer=True)
    first, second = RecordingSink(), RecordingSink()
    queue.add_consumer("first", first, prefetch_count=1)
    queue.add_consumer("second", second)
    fill(vhost, "q", 3)
    assert first.bodies == [b"0"]
    assert second.bodies == []
    assert ready_bodies(queue) == [b"1", b"2"]


async def test_next_consumer_takes_over_with_the_unacked_messages_first(
    vhost: VirtualHost,
) -> None:
    queue = declare(vhost, "q", x_single_active_consumer=True)
    first, second, third = RecordingSink(), RecordingSink(), RecordingSink()
    active = queue.add_consumer("first", first, prefetch_count=2)
    queue.add_consumer("second", second)
    queue.add_consumer("third", third)
    fill(vhost, "q", 4)
    assert first.bodies == [b"0", b"1"]
    queue.remove_consumer(active)
    assert second.bodies == [b"0", b"1", b"2", b"3"]
    assert [e.redelivered for e in second.entries] == [True, True, False, False]
    assert third.bodies == []


async def test_cancelling_a_waiting_consumer_leaves_the_active_one(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_single_active_consumer=True)
    first, second, third = RecordingSink(), RecordingSink(), RecordingSink()
    queue.add_consumer("first", first)
    waiting = queue.add_consumer("second", second)
    queue.add_consumer("third", third)
    queue.remove_consumer(waiting)
    fill(vhost, "q", 2)
    assert first.bodies == [b"0", b"1"]
    assert second.bodies == third.bodies == []


async def test_first_consumer_after_all_left_becomes_active(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_single_active_consumer=True)
    queue.remove_consumer(queue.add_consumer("gone", RecordingSink()))
    sink = RecordingSink()
    queue.add_consumer("new", sink)
    fill(vhost, "q", 1)
    assert sink.bodies == [b"0"]


# -- consumer priority ----------------------------------------------------------------------


async def test_higher_priority_consumer_gets_messages_while_it_has_credit(
    vhost: VirtualHost,
) -> None:
    queue = vhost.declare_queue("q")
    low, high = RecordingSink(), RecordingSink()
    queue.add_consumer("low", low)
    queue.add_consumer("high", high, prefetch_count=2, arguments={"x-priority": 10})
    fill(vhost, "q", 5)
    assert high.bodies == [b"0", b"1"]
    assert low.bodies == [b"2", b"3", b"4"]


async def test_lower_priority_consumer_waits_while_higher_has_credit(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    low, high = RecordingSink(), RecordingSink()
    queue.add_consumer("high", high, prefetch_count=1, priority=5)
    queue.add_consumer("low", low, prefetch_count=1)
    fill(vhost, "q", 3)
    assert (high.bodies, low.bodies) == ([b"0"], [b"1"])
    high.ack_all()
    assert high.bodies == [b"2"]
    assert low.bodies == [b"1"]


async def test_invalid_consumer_priority_is_precondition_failed(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    with pytest.raises(PreconditionFailed) as caught:
        queue.add_consumer("c", RecordingSink(), arguments={"x-priority": "high"})
    assert caught.value.reply_code == 406
    assert not queue.consumers


async def test_round_robin_across_equal_consumers(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    sinks = [RecordingSink() for _ in range(3)]
    for index, sink in enumerate(sinks):
        queue.add_consumer(f"c{index}", sink)
    fill(vhost, "q", 7)
    assert [s.bodies for s in sinks] == [[b"0", b"3", b"6"], [b"1", b"4"], [b"2", b"5"]]


async def test_round_robin_skips_a_consumer_without_credit(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    full, free = RecordingSink(), RecordingSink()
    queue.add_consumer("full", full, prefetch_count=1)
    queue.add_consumer("free", free)
    fill(vhost, "q", 4)
    assert full.bodies == [b"0"]
    assert free.bodies == [b"1", b"2", b"3"]


# -- exclusive consumer ---------------------------------------------------------------------


async def test_exclusive_consumer_refused_when_others_exist(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    queue.add_consumer("plain", RecordingSink())
    with pytest.raises(AccessRefused) as caught:
        queue.add_consumer("mine", RecordingSink(), exclusive=True)
    assert caught.value.reply_code == 403
    assert len(queue.consumers) == 1


async def test_others_refused_while_an_exclusive_consumer_exists(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    only = RecordingSink()
    mine = queue.add_consumer("mine", only, exclusive=True)
    with pytest.raises(AccessRefused) as caught:
        queue.add_consumer("other", RecordingSink())
    assert caught.value.reply_code == 403
    fill(vhost, "q", 2)
    assert only.bodies == [b"0", b"1"]
    queue.remove_consumer(mine)
    queue.add_consumer("other", RecordingSink())
    assert len(queue.consumers) == 1


# -- settling around deletion ----------------------------------------------------------------


async def test_deleting_a_queue_cancels_its_consumers(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink)
    publish(vhost, "m", "q")
    assert vhost.delete_queue("q") == 0
    assert sink.cancelled == [consumer]


async def test_settling_a_delivery_of_a_deleted_queue_is_harmless(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    publish(vhost, "acked", "q")
    publish(vhost, "nacked", "q")
    vhost.delete_queue("q")
    acked, nacked = sink.entries
    queue.ack(acked)
    queue.reject(nacked, requeue=True)
    assert queue.message_count == 0


async def test_nack_of_a_got_message_after_its_queue_is_deleted_is_not_dead_lettered(
    vhost: VirtualHost,
) -> None:
    dlq = vhost.declare_queue("dlq")
    queue = declare(vhost, "q", x_dead_letter_exchange="", x_dead_letter_routing_key="dlq")
    publish(vhost, "m", "q")
    entry = take(queue)
    vhost.delete_queue("q")
    queue.reject(entry, requeue=False)
    assert ready_bodies(dlq) == []


async def test_acking_twice_is_precondition_failed(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    publish(vhost, "m", "q")
    entry = take(queue)
    queue.ack(entry)
    with pytest.raises(PreconditionFailed) as caught:
        queue.ack(entry)
    assert caught.value.reply_code == 406


# -- auto-delete ----------------------------------------------------------------------------


async def test_auto_delete_queue_survives_until_it_had_a_consumer(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = vhost.declare_queue("q", auto_delete=True)
    publish(vhost, "m", "q")
    assert drain(queue) == [b"m"]
    await trio.sleep(3600)
    assert vhost.queues["q"] is queue


async def test_auto_delete_queue_goes_when_its_last_consumer_cancels(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q", auto_delete=True)
    first = queue.add_consumer("first", RecordingSink())
    second = queue.add_consumer("second", RecordingSink())
    queue.remove_consumer(first)
    assert "q" in vhost.queues
    queue.remove_consumer(second)
    assert "q" not in vhost.queues
    assert queue.deleted


# -- x-expires ------------------------------------------------------------------------------


async def test_unused_queue_expires_after_x_expires(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    declare(vhost, "q", x_expires=1000)
    publish(vhost, "m", "q")  # publishing is not a use
    await trio.sleep(0.9)
    assert "q" in vhost.queues
    await trio.sleep(0.2)
    assert "q" not in vhost.queues


async def test_redeclaring_restarts_x_expires(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    declare(vhost, "q", x_expires=1000)
    await trio.sleep(0.9)
    declare(vhost, "q", x_expires=1000)
    await trio.sleep(0.9)
    assert "q" in vhost.queues
    await trio.sleep(0.2)
    assert "q" not in vhost.queues


async def test_basic_get_restarts_x_expires(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q", x_expires=1000)
    await trio.sleep(0.9)
    assert queue.get(None) is None
    await trio.sleep(0.9)
    assert "q" in vhost.queues
    await trio.sleep(0.2)
    assert "q" not in vhost.queues


async def test_queue_with_a_consumer_does_not_expire(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q", x_expires=1000)
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink)
    await trio.sleep(60)
    assert "q" in vhost.queues
    queue.remove_consumer(consumer)
    await trio.sleep(0.9)
    assert "q" in vhost.queues
    await trio.sleep(0.2)
    assert "q" not in vhost.queues
    assert sink.cancelled == []  # the client cancelled it; the broker has nothing to say


# -- exclusive queues -----------------------------------------------------------------------


async def test_exclusive_queue_is_locked_for_another_owner(vhost: VirtualHost) -> None:
    mine, theirs = object(), object()
    queue = vhost.declare_queue("q", exclusive=True, owner=mine)
    for attempt in (
        lambda: vhost.declare_queue("q", exclusive=True, owner=theirs),
        lambda: vhost.declare_queue("q", passive=True, owner=theirs),
        lambda: vhost.get_queue("q", owner=theirs),
        lambda: queue.add_consumer("c", RecordingSink(), owner=theirs),
        lambda: vhost.delete_queue("q", owner=theirs),
    ):
        with pytest.raises(ResourceLocked) as caught:
            attempt()
        assert caught.value.reply_code == 405
    assert vhost.get_queue("q", owner=mine) is queue
    queue.add_consumer("c", RecordingSink(), owner=mine)


async def test_exclusive_queue_is_deleted_when_its_owner_closes(vhost: VirtualHost) -> None:
    mine, theirs = object(), object()
    vhost.declare_queue("mine", exclusive=True, owner=mine)
    vhost.declare_queue("theirs", exclusive=True, owner=theirs)
    vhost.declare_queue("shared")
    publish(vhost, "m", "mine")
    sink = RecordingSink()
    consumer = vhost.get_queue("mine", owner=mine).add_consumer("c", sink, owner=mine)
    vhost.owner_closed(mine)
    assert sorted(vhost.queues) == ["shared", "theirs"]
    assert sink.cancelled == [consumer]
    vhost.declare_queue("mine", exclusive=True, owner=theirs)  # the name is free again
