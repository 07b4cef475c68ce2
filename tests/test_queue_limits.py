"""Queue length limits (x-max-length, x-max-length-bytes, x-overflow) and argument checks."""

from __future__ import annotations

from typing import Any

import pytest

from herald.core.errors import PreconditionFailed
from herald.core.vhost import RouteStatus, VirtualHost
from tests.kernel_helpers import (  # noqa: F401
    RecordingSink,
    broker_fixture,
    declare,
    drain,
    publish,
    ready_bodies,
    vhost_fixture,
)

# -- drop-head --------------------------------------------------------------------------------


async def test_max_length_drop_head_drops_the_oldest(vh: VirtualHost) -> None:
    queue = declare(vh, "q", x_max_length=3)
    for i in range(5):
        assert publish(vh, str(i), "q").status is RouteStatus.ROUTED
    assert ready_bodies(queue) == [b"2", b"3", b"4"]
    assert queue.statistics().published == 5


async def test_max_length_bytes_drop_head_drops_until_it_fits(vh: VirtualHost) -> None:
    queue = declare(vh, "q", x_max_length_bytes=10)
    publish(vh, "aaaa", "q")
    publish(vh, "bbbb", "q")
    publish(vh, "cc", "q")
    assert ready_bodies(queue) == [b"aaaa", b"bbbb", b"cc"]  # exactly 10 bytes fit
    publish(vh, "dddddd", "q")
    assert ready_bodies(queue) == [b"cc", b"dddddd"]
    assert queue.statistics().message_bytes_ready == 8


async def test_drop_head_dead_letters_the_dropped_messages(vh: VirtualHost) -> None:
    dlq = vh.declare_queue("dlq")
    queue = declare(
        vh, "q", x_max_length_bytes=4, x_dead_letter_exchange="", x_dead_letter_routing_key="dlq"
    )
    publish(vh, "ab", "q")
    publish(vh, "cd", "q")
    publish(vh, "efgh", "q")
    assert ready_bodies(queue) == [b"efgh"]
    assert ready_bodies(dlq) == [b"ab", b"cd"]
    reasons = [(e.message.annotations or {})["x-death"][0]["reason"] for e in dlq.browse()]
    assert reasons == ["maxlen", "maxlen"]


async def test_max_length_zero_still_feeds_a_waiting_consumer(vh: VirtualHost) -> None:
    queue = declare(vh, "q", x_max_length=0)
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=1)
    publish(vh, "taken", "q")
    publish(vh, "dropped", "q")
    assert sink.bodies == [b"taken"]
    assert queue.message_count == 0


# -- reject-publish -------------------------------------------------------------------------


async def test_reject_publish_refuses_and_leaves_the_queue_unchanged(vh: VirtualHost) -> None:
    queue = declare(vh, "q", x_max_length=2, x_overflow="reject-publish")
    assert publish(vh, "1", "q").status is RouteStatus.ROUTED
    assert publish(vh, "2", "q").status is RouteStatus.ROUTED
    assert publish(vh, "3", "q").status is RouteStatus.REJECTED
    assert ready_bodies(queue) == [b"1", b"2"]
    assert queue.statistics().published == 2


async def test_reject_publish_by_bytes(vh: VirtualHost) -> None:
    queue = declare(vh, "q", x_max_length_bytes=8, x_overflow="reject-publish")
    assert publish(vh, "aaaa", "q").status is RouteStatus.ROUTED
    assert publish(vh, "bbbb", "q").status is RouteStatus.ROUTED
    assert publish(vh, "c", "q").status is RouteStatus.REJECTED
    assert ready_bodies(queue) == [b"aaaa", b"bbbb"]


async def test_reject_publish_accepts_again_once_there_is_room(vh: VirtualHost) -> None:
    queue = declare(vh, "q", x_max_length=1, x_overflow="reject-publish")
    publish(vh, "1", "q")
    assert publish(vh, "2", "q").status is RouteStatus.REJECTED
    assert drain(queue) == [b"1"]
    assert publish(vh, "3", "q").status is RouteStatus.ROUTED
    assert ready_bodies(queue) == [b"3"]


async def test_reject_publish_in_one_queue_still_delivers_to_the_others(
    vh: VirtualHost,
) -> None:
    vh.declare_exchange("fan", "fanout")
    full = declare(vh, "full", x_max_length=0, x_overflow="reject-publish")
    other = vh.declare_queue("other")
    vh.bind_queue("full", "fan")
    vh.bind_queue("other", "fan")
    result = publish(vh, "m", exchange="fan")
    assert result.status is RouteStatus.REJECTED
    assert ready_bodies(other) == [b"m"]
    assert ready_bodies(full) == []


# -- what counts ------------------------------------------------------------------------------


async def test_unacked_messages_do_not_count_towards_max_length(vh: VirtualHost) -> None:
    queue = declare(vh, "q", x_max_length=2)
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=2)
    for i in range(4):
        publish(vh, str(i), "q")
    assert sink.bodies == [b"0", b"1"]
    assert ready_bodies(queue) == [b"2", b"3"]
    assert queue.statistics().messages_unacknowledged == 2


async def test_unacked_messages_do_not_count_towards_reject_publish(vh: VirtualHost) -> None:
    queue = declare(vh, "q", x_max_length=1, x_overflow="reject-publish")
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=2)
    statuses = [publish(vh, str(i), "q").status for i in range(4)]
    assert statuses == [RouteStatus.ROUTED] * 3 + [RouteStatus.REJECTED]
    assert sink.bodies == [b"0", b"1"]
    assert ready_bodies(queue) == [b"2"]


async def test_unacked_bytes_do_not_count_towards_max_length_bytes(vh: VirtualHost) -> None:
    queue = declare(vh, "q", x_max_length_bytes=4)
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=1)
    publish(vh, "held", "q")
    publish(vh, "next", "q")
    assert sink.bodies == [b"held"]
    assert ready_bodies(queue) == [b"next"]


async def test_requeue_over_max_length_drops_from_the_head(vh: VirtualHost) -> None:
    """As RabbitMQ's requeue_and_run: requeued entries go back to the head, then drop-head."""
    dlq = vh.declare_queue("dlq")
    queue = declare(
        vh, "q", x_max_length=2, x_dead_letter_exchange="", x_dead_letter_routing_key="dlq"
    )
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink, prefetch_count=2)
    for i in range(4):
        publish(vh, str(i), "q")
    assert sink.bodies == [b"0", b"1"]
    queue.remove_consumer(consumer)
    assert ready_bodies(queue) == [b"2", b"3"]
    assert ready_bodies(dlq) == [b"0", b"1"]


async def test_nack_requeue_over_max_length_drops_the_requeued_head(vh: VirtualHost) -> None:
    queue = declare(vh, "q", x_max_length=1)
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=1)
    publish(vh, "held", "q")
    publish(vh, "waiting", "q")
    queue.reject(sink.entries[0], requeue=True)
    assert sink.bodies == [b"held", b"waiting"]
    assert queue.message_count == 0


async def test_requeue_may_exceed_a_reject_publish_limit(vh: VirtualHost) -> None:
    queue = declare(vh, "q", x_max_length=2, x_overflow="reject-publish")
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink, prefetch_count=2)
    for i in range(4):
        publish(vh, str(i), "q")
    queue.remove_consumer(consumer)
    assert ready_bodies(queue) == [b"0", b"1", b"2", b"3"]
    assert publish(vh, "4", "q").status is RouteStatus.REJECTED


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
    vh: VirtualHost, name: str, value: Any
) -> None:
    with pytest.raises(PreconditionFailed) as caught:
        vh.declare_queue("q", arguments={name: value})
    assert caught.value.reply_code == 406
    assert name in caught.value.reply_text
    assert "q" not in vh.queues


async def test_unknown_arguments_are_accepted_and_kept(vh: VirtualHost) -> None:
    arguments = {"x-queue-mode": "lazy", "x-custom": [1, 2], "not-even-x": True}
    queue = vh.declare_queue("q", arguments=arguments)
    assert dict(queue.arguments) == arguments
    publish(vh, "m", "q")
    assert drain(queue) == [b"m"]


async def test_redeclare_with_a_different_limit_is_precondition_failed(vh: VirtualHost) -> None:
    declare(vh, "q", x_max_length=2)
    with pytest.raises(PreconditionFailed) as caught:
        declare(vh, "q", x_max_length=3)
    assert caught.value.reply_code == 406
    assert declare(vh, "q", x_max_length=2).args.max_length == 2
