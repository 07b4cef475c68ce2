"""Message TTL: x-message-ttl and per-message expiration, as RabbitMQ applies them."""

from __future__ import annotations

import trio
import trio.testing

from herald.core.vhost import VirtualHost
from tests.kernel_helpers import (  # noqa: F401
    RecordingSink,
    broker_fixture,
    declare,
    drain,
    publish,
    ready_bodies,
    vhost_fixture,
)


async def test_queue_ttl_expires_ready_messages_on_time(
    vh: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vh, "q", x_message_ttl=1000)
    publish(vh, "a", "q")
    publish(vh, "b", "q")
    await trio.sleep(0.9)
    assert ready_bodies(queue) == [b"a", b"b"]
    await trio.sleep(0.2)
    assert ready_bodies(queue) == []
    assert queue.statistics().expired == 2


async def test_short_expiration_behind_a_long_one_expires_first(
    vh: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vh, "q")
    publish(vh, "long", "q", expiration="10000")
    publish(vh, "short", "q", expiration="100")
    publish(vh, "forever", "q")
    await trio.sleep(1)
    assert ready_bodies(queue) == [b"long", b"forever"]
    await trio.sleep(10)
    assert ready_bodies(queue) == [b"forever"]
    assert queue.statistics().expired == 2


async def test_lower_of_queue_ttl_and_message_expiration_wins(
    vh: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vh, "q", x_message_ttl=1000)
    publish(vh, "message-ttl-longer", "q", expiration="5000")
    publish(vh, "message-ttl-shorter", "q", expiration="100")
    await trio.sleep(0.5)
    assert ready_bodies(queue) == [b"message-ttl-longer"]
    await trio.sleep(0.6)  # the queue's 1 s applies, not the message's 5 s
    assert ready_bodies(queue) == []


async def test_ttl_zero_delivers_to_a_waiting_consumer(
    vh: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vh, "q", x_message_ttl=0)
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    publish(vh, "now", "q")
    assert sink.bodies == [b"now"]
    await trio.sleep(1)
    assert queue.statistics().messages_unacknowledged == 1
    assert queue.statistics().expired == 0


async def test_ttl_zero_is_dropped_when_no_consumer_can_take_it(
    vh: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vh, "q", x_message_ttl=0)
    publish(vh, "nobody-listening", "q")
    sink = RecordingSink()
    queue.add_consumer("late", sink)
    assert sink.bodies == []
    assert queue.message_count == 0
    assert queue.statistics().expired == 1


async def test_ttl_zero_is_dropped_when_the_consumer_has_no_credit(
    vh: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vh, "q")
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=1)
    publish(vh, "fills-window", "q")
    publish(vh, "ttl-zero", "q", expiration="0")
    assert sink.bodies == [b"fills-window"]
    sink.ack_all()
    assert sink.bodies == []
    assert queue.statistics().expired == 1


async def test_unacked_message_does_not_expire_while_held(
    vh: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vh, "q", x_message_ttl=1000)
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    publish(vh, "held", "q")
    await trio.sleep(5)
    assert queue.statistics().messages_unacknowledged == 1
    assert queue.statistics().expired == 0
    sink.ack_all()
    assert queue.statistics().acked == 1


async def test_requeued_message_past_its_ttl_expires_instead_of_redelivery(
    vh: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vh, "q", x_message_ttl=1000)
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    publish(vh, "stale", "q")
    await trio.sleep(2)
    (entry,) = sink.entries
    queue.reject(entry, requeue=True)
    assert sink.bodies == [b"stale"]  # not delivered a second time
    assert queue.message_count == 0
    assert queue.statistics().expired == 1


async def test_message_of_cancelled_consumer_past_its_ttl_expires(
    vh: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vh, "q", x_message_ttl=1000)
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink)
    publish(vh, "stale", "q")
    await trio.sleep(2)
    queue.remove_consumer(consumer)
    await trio.sleep(0.1)
    assert queue.message_count == 0
    assert queue.statistics().expired == 1


async def test_requeued_message_keeps_its_original_deadline(
    vh: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vh, "q", x_message_ttl=1000)
    consumer = queue.add_consumer("c", RecordingSink())
    publish(vh, "m", "q")
    await trio.sleep(0.5)
    queue.remove_consumer(consumer)
    await trio.sleep(0.4)
    assert ready_bodies(queue) == [b"m"]
    await trio.sleep(0.2)
    assert ready_bodies(queue) == []


async def test_get_skips_expired_entries(
    vh: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vh, "q")
    publish(vh, "expired", "q", expiration="100")
    publish(vh, "fresh", "q")
    autojump_clock.jump(1)  # time passes, but the expiry timer has not run yet
    assert drain(queue) == [b"fresh"]
    assert queue.statistics().expired == 1


async def test_dispatch_skips_expired_entries(
    vh: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vh, "q", x_message_ttl=100)
    publish(vh, "expired", "q")
    autojump_clock.jump(1)
    publish(vh, "fresh", "q")
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    assert sink.bodies == [b"fresh"]
    assert queue.statistics().expired == 1


async def test_expired_count_in_statistics(
    vh: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vh, "q")
    for i in range(5):
        publish(vh, f"m{i}", "q", expiration=str(100 * (i + 1)) if i % 2 == 0 else None)
    await trio.sleep(1)
    stats = queue.statistics()
    assert (stats.expired, stats.messages_ready, stats.published) == (3, 2, 5)
    assert ready_bodies(queue) == [b"m1", b"m3"]
