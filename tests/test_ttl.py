"""Message TTL: x-message-ttl and per-message expiration, as RabbitMQ applies them."""

from __future__ import annotations

import trio
import trio.testing

from herald.core.vhost import VirtualHost
from tests.kernel_helpers import (
    RecordingSink,
    declare,
    drain,
    publish,
    ready_bodies,
)


async def test_queue_ttl_expires_ready_messages_on_time(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q", x_message_ttl=1000)
    publish(vhost, "a", "q")
    publish(vhost, "b", "q")
    await trio.sleep(0.9)
    assert ready_bodies(queue) == [b"a", b"b"]
    await trio.sleep(0.2)
    assert ready_bodies(queue) == []
    assert queue.statistics().expired == 2


async def test_short_expiration_behind_a_long_one_expires_first(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q")
    publish(vhost, "long", "q", expiration="10000")
    publish(vhost, "short", "q", expiration="100")
    publish(vhost, "forever", "q")
    await trio.sleep(1)
    assert ready_bodies(queue) == [b"long", b"forever"]
    await trio.sleep(10)
    assert ready_bodies(queue) == [b"forever"]
    assert queue.statistics().expired == 2


async def test_lower_of_queue_ttl_and_message_expiration_wins(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q", x_message_ttl=1000)
    publish(vhost, "message-ttl-longer", "q", expiration="5000")
    publish(vhost, "message-ttl-shorter", "q", expiration="100")
    await trio.sleep(0.5)
    assert ready_bodies(queue) == [b"message-ttl-longer"]
    await trio.sleep(0.6)  # the queue's 1 s applies, not the message's 5 s
    assert ready_bodies(queue) == []


async def test_ttl_zero_delivers_to_a_waiting_consumer(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q", x_message_ttl=0)
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    publish(vhost, "now", "q")
    assert sink.bodies == [b"now"]
    await trio.sleep(1)
    assert queue.statistics().messages_unacknowledged == 1
    assert queue.statistics().expired == 0


async def test_ttl_zero_is_dropped_when_no_consumer_can_take_it(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q", x_message_ttl=0)
    publish(vhost, "nobody-listening", "q")
    sink = RecordingSink()
    queue.add_consumer("late", sink)
    assert sink.bodies == []
    assert queue.message_count == 0
    assert queue.statistics().expired == 1


async def test_ttl_zero_is_dropped_when_the_consumer_has_no_credit(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q")
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=1)
    publish(vhost, "fills-window", "q")
    publish(vhost, "ttl-zero", "q", expiration="0")
    assert sink.bodies == [b"fills-window"]
    sink.ack_all()
    assert sink.bodies == []
    assert queue.statistics().expired == 1


async def test_unacked_message_does_not_expire_while_held(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q", x_message_ttl=1000)
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    publish(vhost, "held", "q")
    await trio.sleep(5)
    assert queue.statistics().messages_unacknowledged == 1
    assert queue.statistics().expired == 0
    sink.ack_all()
    assert queue.statistics().acked == 1


async def test_requeued_message_past_its_ttl_expires_instead_of_redelivery(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q", x_message_ttl=1000)
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    publish(vhost, "stale", "q")
    await trio.sleep(2)
    (entry,) = sink.entries
    queue.reject(entry, requeue=True)
    assert sink.bodies == [b"stale"]  # not delivered a second time
    assert queue.message_count == 0
    assert queue.statistics().expired == 1


async def test_message_of_cancelled_consumer_past_its_ttl_expires(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q", x_message_ttl=1000)
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink)
    publish(vhost, "stale", "q")
    await trio.sleep(2)
    queue.remove_consumer(consumer)
    await trio.sleep(0.1)
    assert queue.message_count == 0
    assert queue.statistics().expired == 1


async def test_requeued_message_keeps_its_original_deadline(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q", x_message_ttl=1000)
    consumer = queue.add_consumer("c", RecordingSink())
    publish(vhost, "m", "q")
    await trio.sleep(0.5)
    queue.remove_consumer(consumer)
    await trio.sleep(0.4)
    assert ready_bodies(queue) == [b"m"]
    await trio.sleep(0.2)
    assert ready_bodies(queue) == []


async def test_get_skips_expired_entries(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q")
    publish(vhost, "expired", "q", expiration="100")
    publish(vhost, "fresh", "q")
    autojump_clock.jump(1)  # time passes, but the expiry timer has not run yet
    assert drain(queue) == [b"fresh"]
    assert queue.statistics().expired == 1


async def test_dispatch_skips_expired_entries(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q", x_message_ttl=100)
    publish(vhost, "expired", "q")
    autojump_clock.jump(1)
    publish(vhost, "fresh", "q")
    sink = RecordingSink()
    queue.add_consumer("c", sink)
    assert sink.bodies == [b"fresh"]
    assert queue.statistics().expired == 1


async def test_expired_count_in_statistics(
    vhost: VirtualHost, autojump_clock: trio.testing.MockClock
) -> None:
    queue = declare(vhost, "q")
    for i in range(5):
        publish(vhost, f"m{i}", "q", expiration=str(100 * (i + 1)) if i % 2 == 0 else None)
    await trio.sleep(1)
    stats = queue.statistics()
    assert (stats.expired, stats.messages_ready, stats.published) == (3, 2, 5)
    assert ready_bodies(queue) == [b"m1", b"m3"]
