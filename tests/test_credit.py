"""Consumers, credit, acks, nacks and requeue order."""

from __future__ import annotations

import pytest

from herald.core.consumer import SharedLimit
from herald.core.errors import PreconditionFailed
from herald.core.vhost import VirtualHost
from tests.sinks import RecordingSink, body, msg


def fill(vhost: VirtualHost, queue: str, n: int) -> None:
    for i in range(n):
        vhost.publish(msg(str(i), queue))


async def test_prefetch_count_limits_unacked(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    fill(vhost, "q", 10)
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=3)
    assert sink.bodies == [b"0", b"1", b"2"]
    queue.ack(sink.entries[1])
    assert sink.bodies == [b"0", b"1", b"2", b"3"]
    assert queue.statistics().messages_unacknowledged == 3


async def test_prefetch_bytes_limits_unacked(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    for _ in range(5):
        vhost.publish(msg(b"x" * 100, "q"))
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_bytes=250)
    assert len(sink.entries) == 3  # 0, 100, 200 bytes held are below 250: a third goes out
    queue.ack(sink.entries[0])
    assert len(sink.entries) == 4


async def test_unlimited_prefetch_takes_everything(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    fill(vhost, "q", 50)
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    assert len(sink.entries) == 50 and queue.message_count == 0


async def test_channel_wide_limit_is_shared(vhost: VirtualHost) -> None:
    a, b = vhost.declare_queue("a"), vhost.declare_queue("b")
    fill(vhost, "a", 5)
    fill(vhost, "b", 5)
    limit = SharedLimit(count_limit=4)
    sink = RecordingSink()
    a.add_consumer("ca", sink, limit=limit)
    b.add_consumer("cb", sink, limit=limit)
    assert len(sink.entries) == 4
    first = sink.entries[0]
    first.queue.ack(first)
    assert len(sink.entries) == 5


async def test_set_prefetch_widens_window(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    fill(vhost, "q", 5)
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink, prefetch_count=1)
    consumer.set_prefetch(3)
    assert len(sink.entries) == 3


async def test_suspended_consumer_gets_nothing_until_resumed(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink)
    consumer.suspend()
    fill(vhost, "q", 3)
    assert sink.entries == []
    consumer.resume()
    assert sink.bodies == [b"0", b"1", b"2"]


async def test_round_robin_between_equal_consumers(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    first, second = RecordingSink(auto_ack=True), RecordingSink(auto_ack=True)
    queue.add_consumer("1", first, prefetch_count=1)
    queue.add_consumer("2", second, prefetch_count=1)
    fill(vhost, "q", 6)
    assert first.bodies == [b"0", b"2", b"4"]
    assert second.bodies == [b"1", b"3", b"5"]


async def test_nack_requeue_returns_to_original_position(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    fill(vhost, "q", 5)
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=2)
    e0, e1 = sink.take()
    queue.reject(e1, requeue=True)  # back before 2, 3, 4
    assert [body(e.message) for e in sink.entries] == [b"1"]
    assert sink.entries[0].redelivered and sink.entries[0].delivery_count == 1
    queue.reject(e0, requeue=True)
    queue.ack(sink.entries[0])
    assert sink.bodies == [b"1", b"0", b"2"]


async def test_cancelled_consumer_unacked_go_to_next_consumer_first(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    fill(vhost, "q", 4)
    first = RecordingSink()
    consumer = queue.add_consumer("1", first, prefetch_count=2)
    queue.remove_consumer(consumer)
    second = RecordingSink()
    queue.add_consumer("2", second)
    assert second.bodies == [b"0", b"1", b"2", b"3"]
    assert [e.redelivered for e in second.entries] == [True, True, False, False]


async def test_reject_without_requeue_drops(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    fill(vhost, "q", 1)
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    queue.reject(sink.entries[0], requeue=False)
    stats = queue.statistics()
    assert stats.messages_ready == 0 and stats.messages_unacknowledged == 0


async def test_double_ack_is_an_error(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    fill(vhost, "q", 1)
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    queue.ack(sink.entries[0])
    with pytest.raises(PreconditionFailed):
        queue.ack(sink.entries[0])


async def test_no_ack_consumer_settles_on_delivery(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    fill(vhost, "q", 3)
    sink = RecordingSink()
    queue.add_consumer("c", sink, no_ack=True)
    assert len(sink.entries) == 3
    assert queue.statistics().messages_unacknowledged == 0


async def test_get_with_and_without_ack(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    fill(vhost, "q", 3)
    holder = queue.getter(RecordingSink())
    entry = queue.get(holder)
    assert entry is not None and body(entry.message) == b"0"
    assert queue.get(None) is not None  # no-ack get
    assert queue.statistics().messages_unacknowledged == 1
    queue.release(holder)  # the channel closed: the unacked get goes back first
    assert [body(e.message) for e in queue.browse()] == [b"0", b"2"]
    assert queue.browse()[0].redelivered
    queue.get(None)
    queue.get(None)
    assert queue.get(None) is None


async def test_ack_inside_delivery_keeps_order(vhost: VirtualHost) -> None:
    """A sink that acks while the queue is dispatching (re-entrancy) sees every message once."""
    queue = vhost.declare_queue("q")
    fill(vhost, "q", 100)
    sink = RecordingSink(auto_ack=True)
    queue.add_consumer("c", sink, prefetch_count=1)
    assert sink.bodies == [str(i).encode() for i in range(100)]


async def test_cancel_without_requeue_keeps_unacked_settleable(vhost: VirtualHost) -> None:
    """AMQP basic.cancel: deliveries already sent stay with the channel until acked or closed."""
    queue = vhost.declare_queue("q")
    fill(vhost, "q", 3)
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink, prefetch_count=2)
    queue.remove_consumer(consumer, requeue=False)
    first, _second = sink.take()
    queue.ack(first)  # acking after the cancel is fine, nothing is redelivered
    assert queue.statistics().messages_unacknowledged == 1
    queue.release(consumer)  # the channel closed: what is left goes back
    assert [body(e.message) for e in queue.browse()] == [b"1", b"2"]
    assert queue.browse()[0].redelivered
