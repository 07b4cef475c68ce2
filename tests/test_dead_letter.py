"""Dead-lettering: reasons, routing, x-death history and cycle detection, as in RabbitMQ."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from herald.core.broker import Broker
from herald.core.message import Message
from herald.core.queue import Queue
from herald.core.vhost import RouteStatus, VirtualHost
from tests.kernel_helpers import (
    RecordingSink,
    body,
    declare,
    drain,
    publish,
    ready_bodies,
    take,
)


def dead_letter_setup(vhost: VirtualHost, **work_args: Any) -> tuple[Queue, Queue]:
    """Queue "work" dead-letters to fanout exchange "dlx", which feeds queue "dlq"."""
    vhost.declare_exchange("dlx", "fanout")
    dlq = vhost.declare_queue("dlq")
    vhost.bind_queue("dlq", "dlx")
    work = declare(vhost, "work", x_dead_letter_exchange="dlx", **work_args)
    return work, dlq


def only_message(queue: Queue) -> Message:
    (entry,) = queue.browse()
    return entry.message


def deaths(message: Message) -> list[dict[str, Any]]:
    assert message.annotations is not None
    return message.annotations["x-death"]


def summary(message: Message) -> list[tuple[str, str, int]]:
    """(queue, reason, count) of each x-death record, most recent first."""
    return [(d["queue"], d["reason"], d["count"]) for d in deaths(message)]


# -- reasons ------------------------------------------------------------------------------


async def test_expired_message_is_dead_lettered(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    work, dlq = dead_letter_setup(vhost, x_message_ttl=100)
    publish(vhost, "m", "work")
    await trio.sleep(1)
    assert ready_bodies(work) == []
    assert ready_bodies(dlq) == [b"m"]
    death = deaths(only_message(dlq))[0]
    assert death["count"] == 1
    assert death["reason"] == "expired"
    assert death["queue"] == "work"
    assert death["exchange"] == ""
    assert death["routing-keys"] == ["work"]
    assert work.statistics().dead_lettered == 1


async def test_rejected_without_requeue_is_dead_lettered(vhost: VirtualHost) -> None:
    work, dlq = dead_letter_setup(vhost)
    publish(vhost, "m", "work")
    sink = RecordingSink()
    work.add_consumer("c", sink)
    work.reject(sink.entries[0], requeue=False)
    assert ready_bodies(dlq) == [b"m"]
    assert summary(only_message(dlq)) == [("work", "rejected", 1)]
    assert work.statistics().messages_unacknowledged == 0


async def test_rejected_with_requeue_is_not_dead_lettered(vhost: VirtualHost) -> None:
    work, dlq = dead_letter_setup(vhost)
    publish(vhost, "m", "work")
    work.reject(take(work), requeue=True)
    assert ready_bodies(work) == [b"m"]
    assert ready_bodies(dlq) == []


async def test_acked_message_is_not_dead_lettered(vhost: VirtualHost) -> None:
    work, dlq = dead_letter_setup(vhost, x_message_ttl=100)
    sink = RecordingSink()
    work.add_consumer("c", sink)
    publish(vhost, "m", "work")
    sink.ack_all()
    assert ready_bodies(dlq) == []


async def test_drop_head_overflow_dead_letters_the_oldest(vhost: VirtualHost) -> None:
    work, dlq = dead_letter_setup(vhost, x_max_length=2)
    for text in ("1", "2", "3"):
        publish(vhost, text, "work")
    assert ready_bodies(work) == [b"2", b"3"]
    assert ready_bodies(dlq) == [b"1"]
    assert summary(only_message(dlq)) == [("work", "maxlen", 1)]


async def test_reject_publish_dlx_dead_letters_the_refused_message(vhost: VirtualHost) -> None:
    work, dlq = dead_letter_setup(vhost, x_max_length=1, x_overflow="reject-publish-dlx")
    assert publish(vhost, "kept", "work").status is RouteStatus.ROUTED
    assert publish(vhost, "refused", "work").status is RouteStatus.REJECTED
    assert ready_bodies(work) == [b"kept"]
    assert ready_bodies(dlq) == [b"refused"]
    assert summary(only_message(dlq)) == [("work", "maxlen", 1)]


async def test_reject_publish_without_dlx_variant_does_not_dead_letter(
    vhost: VirtualHost,
) -> None:
    work, dlq = dead_letter_setup(vhost, x_max_length=1, x_overflow="reject-publish")
    publish(vhost, "kept", "work")
    assert publish(vhost, "refused", "work").status is RouteStatus.REJECTED
    assert ready_bodies(work) == [b"kept"]
    assert ready_bodies(dlq) == []


# -- routing ------------------------------------------------------------------------------


async def test_dead_letter_routing_key_replaces_the_original(vhost: VirtualHost) -> None:
    vhost.declare_exchange("dlx", "direct")
    dlq = vhost.declare_queue("dlq")
    vhost.bind_queue("dlq", "dlx", "dead")
    work = declare(vhost, "work", x_dead_letter_exchange="dlx", x_dead_letter_routing_key="dead")
    publish(vhost, "m", "work")
    work.reject(take(work), requeue=False)
    dead = only_message(dlq)
    assert dead.exchange == "dlx"
    assert dead.routing_key == "dead"
    assert deaths(dead)[0]["routing-keys"] == ["work"]


async def test_original_routing_key_is_used_without_a_dead_letter_key(
    vhost: VirtualHost,
) -> None:
    vhost.declare_exchange("in", "direct")
    vhost.declare_exchange("dlx", "direct")
    work = declare(vhost, "work", x_dead_letter_exchange="dlx")
    vhost.bind_queue("work", "in", "orders.new")
    dlq = vhost.declare_queue("dlq")
    vhost.bind_queue("dlq", "dlx", "orders.new")
    other = vhost.declare_queue("other")
    vhost.bind_queue("other", "dlx", "work")
    publish(vhost, "m", "orders.new", exchange="in")
    work.reject(take(work), requeue=False)
    assert ready_bodies(dlq) == [b"m"]
    assert ready_bodies(other) == []
    dead = only_message(dlq)
    assert (dead.exchange, dead.routing_key) == ("dlx", "orders.new")
    assert deaths(dead)[0]["exchange"] == "in"


async def test_default_exchange_as_dlx_routes_to_the_queue_named_by_the_key(
    vhost: VirtualHost,
) -> None:
    dlq = vhost.declare_queue("parking")
    work = declare(vhost, "work", x_dead_letter_exchange="", x_dead_letter_routing_key="parking")
    publish(vhost, "m", "work")
    work.reject(take(work), requeue=False)
    assert ready_bodies(dlq) == [b"m"]
    assert ready_bodies(work) == []


async def test_missing_dlx_drops_silently(vhost: VirtualHost) -> None:
    work = declare(vhost, "work", x_dead_letter_exchange="no-such-exchange")
    publish(vhost, "m", "work")
    work.reject(take(work), requeue=False)
    assert ready_bodies(work) == []
    assert work.statistics().messages_unacknowledged == 0


async def test_dlx_with_no_matching_binding_drops_silently(vhost: VirtualHost) -> None:
    vhost.declare_exchange("dlx", "direct")
    work = declare(vhost, "work", x_dead_letter_exchange="dlx")
    publish(vhost, "m", "work")
    work.reject(take(work), requeue=False)
    assert ready_bodies(work) == []


# -- x-death history -----------------------------------------------------------------------


async def test_original_expiration_is_recorded_and_removed(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    _, dlq = dead_letter_setup(vhost)
    publish(vhost, "m", "work", expiration="100")
    await trio.sleep(1)
    dead = only_message(dlq)
    assert dead.expiration_ms is None
    assert deaths(dead)[0]["original-expiration"] == "100"
    assert deaths(dead)[0]["reason"] == "expired"
    await trio.sleep(60)  # the dead-lettered copy has no TTL of its own
    assert ready_bodies(dlq) == [b"m"]


async def test_dead_lettered_message_properties_carry_no_expiration(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    _, dlq = dead_letter_setup(vhost)
    publish(vhost, "m", "work", expiration="100")
    await trio.sleep(1)
    dead = only_message(dlq)
    assert dead.content is not None
    assert dead.content.properties.expiration is None


async def test_stored_bytes_of_a_dead_lettered_message_carry_no_expiration(
    kernel: Broker, vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    """The original was stored (its bytes hold the TTL); the dead-lettered copy's must not."""
    vhost.declare_queue("dlq", durable=True)
    vhost.declare_queue(
        "work",
        durable=True,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"},
    )
    publish(vhost, "m", "work", expiration="100", delivery_mode=2)
    await trio.sleep(1)
    dead = only_message(vhost.get_queue("dlq"))
    content = kernel.codecs.decode(dead.protocol, dead.stored_bytes(kernel.codecs))
    assert (content.properties.expiration, content.body) == (None, b"m")


async def test_queue_ttl_death_has_no_original_expiration(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    _, dlq = dead_letter_setup(vhost, x_message_ttl=100)
    publish(vhost, "m", "work")
    await trio.sleep(1)
    assert "original-expiration" not in deaths(only_message(dlq))[0]


async def test_retry_with_delay_counts_and_orders_deaths(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    """work rejects to retry; retry holds for 1 s, then expires back to work (no cycle)."""
    work = declare(vhost, "work", x_dead_letter_exchange="", x_dead_letter_routing_key="retry")
    retry = declare(
        vhost,
        "retry",
        x_message_ttl=1000,
        x_dead_letter_exchange="",
        x_dead_letter_routing_key="work",
    )
    sink = RecordingSink()
    work.add_consumer("c", sink)
    publish(vhost, "job", "work")

    work.reject(sink.entries.pop(), requeue=False)
    assert ready_bodies(retry) == [b"job"]
    await trio.sleep(0.9)
    assert sink.entries == []  # still waiting out the delay
    await trio.sleep(0.2)
    (first_retry,) = sink.entries
    assert summary(first_retry.message) == [("retry", "expired", 1), ("work", "rejected", 1)]

    work.reject(sink.entries.pop(), requeue=False)
    (in_retry,) = retry.browse()
    assert summary(in_retry.message) == [("work", "rejected", 2), ("retry", "expired", 1)]
    await trio.sleep(1.1)
    (second_retry,) = sink.entries
    assert body(second_retry) == b"job"
    annotations = second_retry.message.annotations
    assert annotations is not None
    assert summary(second_retry.message) == [("retry", "expired", 2), ("work", "rejected", 2)]
    assert annotations["x-first-death-queue"] == "work"
    assert annotations["x-first-death-reason"] == "rejected"
    assert annotations["x-first-death-exchange"] == ""
    assert annotations["x-last-death-queue"] == "retry"
    assert annotations["x-last-death-reason"] == "expired"
    assert annotations["x-last-death-exchange"] == ""


async def test_x_death_keeps_first_exchange_and_key_of_each_record(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    vhost.declare_exchange("in", "direct")
    vhost.declare_exchange("dlx", "direct")
    work = declare(vhost, "work", x_dead_letter_exchange="dlx", x_dead_letter_routing_key="later")
    vhost.bind_queue("work", "in", "k")
    final = vhost.declare_queue("final")
    vhost.bind_queue("final", "dlx", "later")
    publish(vhost, "m", "k", exchange="in")
    work.reject(take(work), requeue=False)
    record = deaths(only_message(final))[0]
    assert (record["exchange"], record["routing-keys"]) == ("in", ["k"])
    annotations = only_message(final).annotations
    assert annotations is not None
    assert annotations["x-last-death-exchange"] == "in"


# -- cycles --------------------------------------------------------------------------------


async def test_expired_back_into_the_same_queue_is_dropped(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    loop = declare(
        vhost,
        "loop",
        x_message_ttl=100,
        x_dead_letter_exchange="",
        x_dead_letter_routing_key="loop",
    )
    publish(vhost, "m", "loop")
    await trio.sleep(1)
    assert ready_bodies(loop) == []
    assert loop.statistics().expired == 1


async def test_rejected_back_into_the_same_queue_is_allowed(vhost: VirtualHost) -> None:
    loop = declare(vhost, "loop", x_dead_letter_exchange="", x_dead_letter_routing_key="loop")
    publish(vhost, "a", "loop")
    publish(vhost, "b", "loop")
    loop.reject(take(loop), requeue=False)
    assert ready_bodies(loop) == [b"b", b"a"]  # re-published at the tail
    assert summary(loop.browse()[1].message) == [("loop", "rejected", 1)]


async def test_expiry_cycle_between_two_queues_is_dropped(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    a = declare(
        vhost, "a", x_message_ttl=100, x_dead_letter_exchange="", x_dead_letter_routing_key="b"
    )
    b = declare(
        vhost, "b", x_message_ttl=100, x_dead_letter_exchange="", x_dead_letter_routing_key="a"
    )
    publish(vhost, "m", "a")
    await trio.sleep(0.15)
    assert ready_bodies(b) == [b"m"]
    await trio.sleep(10)
    assert ready_bodies(a) == ready_bodies(b) == []
    assert (a.statistics().expired, b.statistics().expired) == (1, 1)


async def test_expiry_cycle_is_dropped_even_after_an_earlier_rejection(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    """RabbitMQ looks for a rejection only inside the cycle, not in the whole history."""
    inbox = declare(vhost, "inbox", x_dead_letter_exchange="", x_dead_letter_routing_key="a")
    a = declare(
        vhost, "a", x_message_ttl=100, x_dead_letter_exchange="", x_dead_letter_routing_key="b"
    )
    b = declare(
        vhost, "b", x_message_ttl=100, x_dead_letter_exchange="", x_dead_letter_routing_key="a"
    )
    publish(vhost, "m", "inbox")
    inbox.reject(take(inbox), requeue=False)
    await trio.sleep(10)
    assert ready_bodies(a) == ready_bodies(b) == []
    assert (a.statistics().expired, b.statistics().expired) == (1, 1)


# -- durability -----------------------------------------------------------------------------


async def test_persistent_dead_letter_to_a_durable_dlq_is_stored(
    kernel: Broker, vhost: VirtualHost
) -> None:
    dlq = vhost.declare_queue("dlq", durable=True)
    work = vhost.declare_queue(
        "work",
        durable=True,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"},
    )
    publish(vhost, "m", "work", delivery_mode=2)
    assert kernel.store.statistics().messages == 1
    work.reject(take(work), requeue=False)
    assert ready_bodies(dlq) == [b"m"]
    (entry,) = dlq.browse()
    assert entry.stored
    assert kernel.store.statistics().messages == 1  # the original left, the copy came in
    sink = RecordingSink()
    dlq.add_consumer("c", sink)
    sink.ack_all()
    assert kernel.store.statistics().messages == 0


async def test_dead_letter_to_a_transient_dlq_is_not_stored(
    kernel: Broker, vhost: VirtualHost
) -> None:
    vhost.declare_queue("dlq")
    work = vhost.declare_queue(
        "work",
        durable=True,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"},
    )
    publish(vhost, "m", "work", delivery_mode=2)
    work.reject(take(work), requeue=False)
    assert drain(vhost.get_queue("dlq")) == [b"m"]
    assert kernel.store.statistics().messages == 0


async def test_overflow_back_into_a_full_queue_after_a_rejection_is_dropped(
    vhost: VirtualHost,
) -> None:
    """Rejected into itself, then refused by its own limit: RabbitMQ drops it (a cycle)."""
    queue = declare(
        vhost,
        "q",
        x_max_length=1,
        x_overflow="reject-publish-dlx",
        x_dead_letter_exchange="",
        x_dead_letter_routing_key="q",
    )
    publish(vhost, "held", "q")
    entry = take(queue)
    publish(vhost, "waiting", "q")
    queue.reject(entry, requeue=False)
    assert ready_bodies(queue) == [b"waiting"]


async def test_drop_head_of_a_message_rejected_into_itself_does_not_cycle_back(
    vhost: VirtualHost,
) -> None:
    queue = declare(
        vhost, "q", x_max_length=1, x_dead_letter_exchange="", x_dead_letter_routing_key="q"
    )
    publish(vhost, "old", "q")
    queue.reject(take(queue), requeue=False)
    assert ready_bodies(queue) == [b"old"]
    publish(vhost, "new", "q")
    assert ready_bodies(queue) == [b"new"]


async def test_dead_lettered_counter_counts_only_routed_messages(
    kernel: Broker, vhost: VirtualHost
) -> None:
    vhost.declare_queue("dlq")
    missing = vhost.declare_queue("a", arguments={"x-dead-letter-exchange": "no-such-exchange"})
    routed = vhost.declare_queue(
        "b", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    )
    for queue in (missing, routed):
        publish(vhost, "m", queue.name)
        sink = RecordingSink()
        queue.add_consumer("c", sink)
        queue.reject(sink.entries[0], requeue=False)
    assert missing.statistics().dead_lettered == 0
    assert routed.statistics().dead_lettered == 1
