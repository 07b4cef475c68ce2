"""The ack -> dispatch fast paths: an ack that frees a full shared window dispatches once, and a
persistent message for a queue without a store id takes the transient publish path."""

from __future__ import annotations

from herald.core.consumer import SharedLimit
from herald.core.vhost import RouteStatus, VirtualHost
from tests.sinks import RecordingSink, msg


async def test_ack_freeing_a_full_shared_window_pushes_one_entry(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    for i in range(5):
        vhost.publish(msg(str(i), "q"))
    sink = RecordingSink()
    queue.add_consumer("c", sink, limit=SharedLimit(count_limit=2))
    assert sink.bodies == [b"0", b"1"]
    for acked in range(5):  # each ack frees one place: the next entry, and only it, goes out
        queue.ack(sink.entries[acked])
        assert len(sink.entries) == min(acked + 3, 5)
    assert queue.message_count == 0
    assert queue.statistics().messages_unacknowledged == 0


async def test_ack_with_a_full_shared_window_feeds_the_other_queue(vhost: VirtualHost) -> None:
    a, b = vhost.declare_queue("a"), vhost.declare_queue("b")
    limit = SharedLimit(count_limit=1)
    sink = RecordingSink()
    a.add_consumer("ca", sink, limit=limit)
    b.add_consumer("cb", sink, limit=limit)
    vhost.publish(msg("a0", "a"))
    vhost.publish(msg("b0", "b"))
    assert sink.bodies == [b"a0"]
    a.ack(sink.entries[0])  # the window frees: `b` (the only queue with a message) gets one
    assert sink.bodies == [b"a0", b"b0"]
    assert b.message_count == 0


async def test_ack_with_own_prefetch_full_and_shared_window_free_dispatches(
    vhost: VirtualHost,
) -> None:
    queue = vhost.declare_queue("q")
    for i in range(3):
        vhost.publish(msg(str(i), "q"))
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=1, limit=SharedLimit(count_limit=10))
    assert sink.bodies == [b"0"]
    queue.ack(sink.entries[0])  # the shared window was not full: the ack itself dispatches
    assert sink.bodies == [b"0", b"1"]


async def test_persistent_message_for_a_transient_queue_is_routed_unstored(
    vhost: VirtualHost,
) -> None:
    queue = vhost.declare_queue("q")  # not durable: no store id
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=1)
    first = vhost.publish(msg("0", "q", delivery_mode=2))
    second = vhost.publish(msg("1", "q", delivery_mode=2))
    assert (first.status, first.queues, first.ticket) == (RouteStatus.ROUTED, 1, None)
    assert (second.status, second.queues, second.ticket) == (RouteStatus.ROUTED, 1, None)
    assert sink.bodies == [b"0"] and queue.message_count == 1
    assert all(not entry.stored for entry in sink.entries)
    queue.ack(sink.entries[0])
    assert sink.bodies == [b"0", b"1"] and queue.message_count == 0


async def test_persistent_message_refused_by_a_full_transient_queue(vhost: VirtualHost) -> None:
    vhost.declare_queue("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    assert vhost.publish(msg("0", "q", delivery_mode=2)).status is RouteStatus.ROUTED
    assert vhost.publish(msg("1", "q", delivery_mode=2)).status is RouteStatus.REJECTED
