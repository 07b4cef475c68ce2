"""Queue length limits (x-max-length, x-max-length-bytes, x-overflow) and argument checks."""

from __future__ import annotations

from typing import Any

import pytest

from herald.core.errors import PreconditionFailed
from herald.core.vhost import RouteStatus, VirtualHost
from tests.kernel_helpers import (
    RecordingSink,
    declare,
    drain,
    publish,
    ready_bodies,
)

# -- drop-head --------------------------------------------------------------------------------


async def test_max_length_drop_head_drops_the_oldest(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_length=3)
    for i in range(5):
        assert publish(vhost, str(i), "q").status is RouteStatus.ROUTED
    assert ready_bodies(queue) == [b"2", b"3", b"4"]
    assert queue.statistics().published == 5


async def test_max_length_bytes_drop_head_drops_until_it_fits(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_length_bytes=10)
    publish(vhost, "aaaa", "q")
    publish(vhost, "bbbb", "q")
    publish(vhost, "cc", "q")
    assert ready_bodies(queue) == [b"aaaa", b"bbbb", b"cc"]  # exactly 10 bytes fit
    publish(vhost, "dddddd", "q")
    assert ready_bodies(queue) == [b"cc", b"dddddd"]
    assert queue.statistics().message_bytes_ready == 8


async def test_drop_head_dead_letters_the_dropped_messages(vhost: VirtualHost) -> None:
    dlq = vhost.declare_queue("dlq")
    queue = declare(
        vhost, "q", x_max_length_bytes=4, x_dead_letter_exchange="", x_dead_letter_routing_key="dlq"
    )
    publish(vhost, "ab", "q")
    publish(vhost, "cd", "q")
    publish(vhost, "efgh", "q")
    assert ready_bodies(queue) == [b"efgh"]
    assert ready_bodies(dlq) == [b"ab", b"cd"]
    reasons = [(e.message.annotations or {})["x-death"][0]["reason"] for e in dlq.browse()]
    assert reasons == ["maxlen", "maxlen"]


async def test_max_length_zero_still_feeds_a_waiting_consumer(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_length=0)
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=1)
    publish(vhost, "taken", "q")
    publish(vhost, "dropped", "q")
    assert sink.bodies == [b"taken"]
    assert queue.message_count == 0


# -- reject-publish -------------------------------------------------------------------------


async def test_reject_publish_refuses_and_leaves_the_queue_unchanged(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_length=2, x_overflow="reject-publish")
    assert publish(vhost, "1", "q").status is RouteStatus.ROUTED
    assert publish(vhost, "2", "q").status is RouteStatus.ROUTED
    assert publish(vhost, "3", "q").status is RouteStatus.REJECTED
    assert ready_bodies(queue) == [b"1", b"2"]
    assert queue.statistics().published == 2


async def test_reject_publish_by_bytes(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_length_bytes=8, x_overflow="reject-publish")
    assert publish(vhost, "aaaa", "q").status is RouteStatus.ROUTED
    assert publish(vhost, "bbbb", "q").status is RouteStatus.ROUTED
    assert publish(vhost, "c", "q").status is RouteStatus.REJECTED
    assert ready_bodies(queue) == [b"aaaa", b"bbbb"]


async def test_reject_publish_accepts_again_once_there_is_room(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_length=1, x_overflow="reject-publish")
    publish(vhost, "1", "q")
    assert publish(vhost, "2", "q").status is RouteStatus.REJECTED
    assert drain(queue) == [b"1"]
    assert publish(vhost, "3", "q").status is RouteStatus.ROUTED
    assert ready_bodies(queue) == [b"3"]


async def test_reject_publish_in_one_queue_still_delivers_to_the_others(
    vhost: VirtualHost,
) -> None:
    vhost.declare_exchange("fan", "fanout")
    full = declare(vhost, "full", x_max_length=0, x_overflow="reject-publish")
    other = vhost.declare_queue("other")
    vhost.bind_queue("full", "fan")
    vhost.bind_queue("other", "fan")
    result = publish(vhost, "m", exchange="fan")
    assert result.status is RouteStatus.REJECTED
    assert ready_bodies(other) == [b"m"]
    assert ready_bodies(full) == []


# -- what counts ------------------------------------------------------------------------------


async def test_unacked_messages_do_not_count_towards_max_length(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_length=2)
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=2)
    for i in range(4):
        publish(vhost, str(i), "q")
    assert sink.bodies == [b"0", b"1"]
    assert ready_bodies(queue) == [b"2", b"3"]
    assert queue.statistics().messages_unacknowledged == 2


async def test_unacked_messages_do_not_count_towards_reject_publish(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_length=1, x_overflow="reject-publish")
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=2)
    statuses = [publish(vhost, str(i), "q").status for i in range(4)]
    assert statuses == [RouteStatus.ROUTED] * 3 + [RouteStatus.REJECTED]
    assert sink.bodies == [b"0", b"1"]
    assert ready_bodies(queue) == [b"2"]


async def test_unacked_bytes_do_not_count_towards_max_length_bytes(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_length_bytes=4)
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=1)
    publish(vhost, "held", "q")
    publish(vhost, "next", "q")
    assert sink.bodies == [b"held"]
    assert ready_bodies(queue) == [b"next"]


async def test_requeue_over_max_length_drops_from_the_head(vhost: VirtualHost) -> None:
    """As RabbitMQ's requeue_and_run: requeued entries go back to the head, then drop-head."""
    dlq = vhost.declare_queue("dlq")
    queue = declare(
        vhost, "q", x_max_length=2, x_dead_letter_exchange="", x_dead_letter_routing_key="dlq"
    )
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink, prefetch_count=2)
    for i in range(4):
        publish(vhost, str(i), "q")
    assert sink.bodies == [b"0", b"1"]
    queue.remove_consumer(consumer)
    assert ready_bodies(queue) == [b"2", b"3"]
    assert ready_bodies(dlq) == [b"0", b"1"]


async def test_nack_requeue_over_max_length_drops_the_requeued_head(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_length=1)
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=1)
    publish(vhost, "held", "q")
    publish(vhost, "waiting", "q")
    queue.reject(sink.entries[0], requeue=True)
    assert sink.bodies == [b"held", b"waiting"]
    assert queue.message_count == 0


async def test_requeue_may_exceed_a_reject_publish_limit(vhost: VirtualHost) -> None:
    queue = declare(vhost, "q", x_max_length=2, x_overflow="reject-publish")
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink, prefetch_count=2)
    for i in range(4):
        publish(vhost, str(i), "q")
    queue.remove_consumer(consumer)
    assert ready_bodies(queue) == [b"0", b"1", b"2", b"3"]
    assert publish(vhost, "4", "q").status is RouteStatus.REJECTED


# -- argument checks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("x-message-ttl", -1),
        ("x-message-ttl", 1.5),
        ("x-message-ttl", "1000"),
        ("x-expires", 0),
        ("x-max-length", -1),
        ("x-max-length", True),
        ("x-max-length-bytes", -5),
        ("x-overflow", "bogus"),
        ("x-max-priority", 256),
        ("x-max-priority", -1),
        ("x-single-active-consumer", "yes"),
        ("x-single-active-consumer", 1),
        ("x-dead-letter-exchange", 42),
        ("x-queue-type", "stream-of-consciousness"),
    ],
)
async def test_bad_argument_is_precondition_failed_naming_it(
    vhost: VirtualHost, name: str, value: Any
) -> None:
    with pytest.raises(PreconditionFailed) as caught:
        vhost.declare_queue("q", arguments={name: value})
    assert caught.value.reply_code == 406
    assert name in caught.value.reply_text
    assert "q" not in vhost.queues


async def test_unknown_arguments_are_accepted_and_kept(vhost: VirtualHost) -> None:
    arguments = {"x-queue-mode": "lazy", "x-custom": [1, 2], "not-even-x": True}
    queue = vhost.declare_queue("q", arguments=arguments)
    assert dict(queue.arguments) == arguments
    publish(vhost, "m", "q")
    assert drain(queue) == [b"m"]


async def test_redeclare_with_a_different_limit_is_precondition_failed(vhost: VirtualHost) -> None:
    declare(vhost, "q", x_max_length=2)
    with pytest.raises(PreconditionFailed) as caught:
        declare(vhost, "q", x_max_length=3)
    assert caught.value.reply_code == 406
    assert declare(vhost, "q", x_max_length=2).args.max_length == 2
