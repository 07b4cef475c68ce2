"""Routing, consuming, acknowledgements and message content, end to end with pika."""

from __future__ import annotations

import datetime
import decimal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.amqp_e2e.conftest import CLIENT_TIMEOUT, BrokerThread

Delivery = tuple[Any, pika.BasicProperties, bytes]


def wait_for(channel: BlockingChannel, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + CLIENT_TIMEOUT
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        channel.connection.process_data_events(time_limit=0.05)


def collect(channel: BlockingChannel, queue: str, **kwargs: Any) -> list[Delivery]:
    """Start a consumer whose deliveries are appended to the returned list."""
    received: list[Delivery] = []
    channel.basic_consume(queue, lambda ch, m, p, b: received.append((m, p, b)), **kwargs)
    return received


def ready(channel: BlockingChannel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.message_count


def test_direct_round_trip(channel: BlockingChannel) -> None:
    channel.exchange_declare("orders", "direct")
    channel.queue_declare("paid")
    channel.queue_bind("paid", "orders", "order.paid")
    received = collect(channel, "paid", auto_ack=True)
    channel.basic_publish("orders", "order.paid", b"#1")
    channel.basic_publish("orders", "order.other", b"lost")
    wait_for(channel, lambda: len(received) == 1)
    method, _, body = received[0]
    assert body == b"#1"
    assert (method.exchange, method.routing_key, method.redelivered) == (
        "orders",
        "order.paid",
        False,
    )
    assert method.delivery_tag == 1


def test_fanout_reaches_every_bound_queue(channel: BlockingChannel) -> None:
    channel.exchange_declare("news", "fanout")
    for name in ("a", "b"):
        channel.queue_declare(name)
        channel.queue_bind(name, "news")
    channel.basic_publish("news", "ignored", b"hello")
    assert [ready(channel, q) for q in ("a", "b")] == [1, 1]


@pytest.mark.parametrize(
    "pattern,key,routed",
    [("a.*", "a.b", True), ("a.*", "a.b.c", False), ("a.#", "a.b.c", True), ("#", "", True)],
)
def test_topic_patterns(channel: BlockingChannel, pattern: str, key: str, routed: bool) -> None:
    queue = channel.queue_declare("").method.queue
    channel.queue_bind(queue, "amq.topic", pattern)
    channel.basic_publish("amq.topic", key, b"x")
    assert ready(channel, queue) == int(routed)


@pytest.mark.parametrize(
    "match,headers,routed",
    [
        ("all", {"kind": "pdf", "size": 3}, True),
        ("all", {"kind": "pdf"}, False),
        ("any", {"kind": "pdf"}, True),
        ("any", {"other": 1}, False),
    ],
)
def test_headers_exchange(
    channel: BlockingChannel, match: str, headers: dict[str, Any], routed: bool
) -> None:
    queue = channel.queue_declare("").method.queue
    channel.queue_bind(queue, "amq.headers", arguments={"x-match": match, "kind": "pdf", "size": 3})
    channel.basic_publish("amq.headers", "", b"x", pika.BasicProperties(headers=headers))
    assert ready(channel, queue) == int(routed)


def test_exchange_to_exchange_binding(channel: BlockingChannel) -> None:
    channel.exchange_declare("front", "topic")
    channel.exchange_declare("back", "direct")
    channel.exchange_bind("back", "front", "k.*")
    queue = channel.queue_declare("").method.queue
    channel.queue_bind(queue, "back", "k.1")
    channel.basic_publish("front", "k.1", b"x")
    assert ready(channel, queue) == 1


def test_unbinding_what_is_gone_succeeds(channel: BlockingChannel) -> None:
    """RabbitMQ answers unbind-ok when the queue, the exchange or the binding is missing
    (aio-pika's RPC unbinds its reply queue after the queue auto-deleted)."""
    channel.exchange_declare("unbind-x", exchange_type="headers")
    channel.queue_declare("unbind-q")
    channel.queue_bind("unbind-q", "unbind-x", arguments={"x-match": "any", "k": 1})
    channel.queue_unbind("unbind-q", "unbind-x", arguments={"other": 1})  # no such binding
    channel.queue_delete("unbind-q")
    channel.queue_unbind("unbind-q", "unbind-x", arguments={"x-match": "any", "k": 1})
    channel.queue_unbind("no-queue", "no-exchange")
    channel.exchange_unbind("no-destination", "no-source", "k")
    assert channel.is_open


def test_basic_get_and_get_empty(channel: BlockingChannel) -> None:
    channel.queue_declare("q")
    for body in (b"1", b"2"):
        channel.basic_publish("", "q", body)
    method, _, body = channel.basic_get("q")
    assert body == b"1" and method.message_count == 1 and not method.redelivered
    channel.basic_ack(method.delivery_tag)
    assert channel.basic_get("q", auto_ack=True)[2] == b"2"
    assert channel.basic_get("q") == (None, None, None)


def test_queue_name_shortcuts(channel: BlockingChannel) -> None:
    """An empty name means the queue last declared on the channel; binding it that way uses
    its name as the routing key."""
    name = channel.queue_declare("").method.queue
    channel.queue_bind("", "amq.direct")
    channel.basic_publish("amq.direct", name, b"x")
    assert channel.queue_purge("").method.message_count == 1


def test_per_consumer_prefetch_is_respected(channel: BlockingChannel) -> None:
    channel.queue_declare("work")
    for i in range(10):
        channel.basic_publish("", "work", str(i).encode())
    channel.basic_qos(prefetch_count=3)
    received = collect(channel, "work")
    wait_for(channel, lambda: len(received) == 3)
    assert ready(channel, "work") == 7  # the queue holds the rest back: no credit
    channel.basic_ack(received[0][0].delivery_tag)
    wait_for(channel, lambda: len(received) == 4)
    assert ready(channel, "work") == 6


def test_global_prefetch_is_shared_by_the_channels_consumers(channel: BlockingChannel) -> None:
    for name in ("g1", "g2"):
        channel.queue_declare(name)
        for _ in range(5):
            channel.basic_publish("", name, b"x")
    channel.basic_qos(prefetch_count=4, global_qos=True)
    received = collect(channel, "g1")
    other = collect(channel, "g2")
    wait_for(channel, lambda: len(received) + len(other) == 4)
    assert ready(channel, "g1") + ready(channel, "g2") == 6


def test_nack_requeue_redelivers_and_reject_drops(channel: BlockingChannel) -> None:
    channel.queue_declare("q")
    channel.basic_publish("", "q", b"m")
    method, _, _ = channel.basic_get("q")
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, _, body = channel.basic_get("q")
    assert body == b"m" and method.redelivered
    channel.basic_reject(method.delivery_tag, requeue=False)
    assert ready(channel, "q") == 0


def test_multiple_ack_settles_a_prefix(broker: BrokerThread, channel: BlockingChannel) -> None:
    channel.queue_declare("q")
    for i in range(5):
        channel.basic_publish("", "q", str(i).encode())
    received = collect(channel, "q")
    wait_for(channel, lambda: len(received) == 5)
    channel.basic_ack(received[2][0].delivery_tag, multiple=True)
    channel.basic_nack(0, multiple=True, requeue=True)  # tag 0 + multiple: everything left
    channel.basic_cancel(received[0][0].consumer_tag)
    wait_for(channel, lambda: ready(channel, "q") == 2)
    method, _, body = channel.basic_get("q", auto_ack=True)
    assert body == b"3" and method.redelivered


def test_unknown_delivery_tag_is_406(channel: BlockingChannel) -> None:
    channel.basic_ack(99)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        channel.queue_declare("after")
    assert caught.value.reply_code == 406
    assert "unknown delivery tag 99" in caught.value.reply_text


def test_closing_a_channel_requeues_its_unacked_messages_in_order(
    connection: pika.BlockingConnection,
) -> None:
    first = connection.channel()
    first.queue_declare("q")
    for i in range(3):
        first.basic_publish("", "q", str(i).encode())
    received = collect(first, "q")
    wait_for(first, lambda: len(received) == 3)
    first.close()
    second = connection.channel()
    bodies = [second.basic_get("q", auto_ack=True) for _ in range(3)]
    assert [b for _, _, b in bodies] == [b"0", b"1", b"2"]
    assert all(m.redelivered for m, _, _ in bodies)


def test_recover_requeues_unacked(channel: BlockingChannel) -> None:
    channel.queue_declare("q")
    channel.basic_publish("", "q", b"m")
    channel.basic_get("q")
    channel.basic_recover(requeue=True)
    method, _, _ = channel.basic_get("q", auto_ack=True)
    assert method.redelivered


def test_queue_delete_cancels_consumers_and_tells_them(
    connection: pika.BlockingConnection,
) -> None:
    channel = connection.channel()
    channel.queue_declare("doomed")
    cancelled: list[str] = []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = channel.basic_consume("doomed", lambda *a: None)
    other = connection.channel()
    assert other.queue_delete("doomed").method.message_count == 0
    wait_for(channel, lambda: cancelled == [tag])


def test_exclusive_consumer_refuses_others_403(channel: BlockingChannel) -> None:
    channel.queue_declare("solo")
    channel.basic_consume("solo", lambda *a: None, exclusive=True)
    other = channel.connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        other.basic_consume("solo", lambda *a: None)
    assert caught.value.reply_code == 403


def test_consumer_tag_reuse_closes_the_connection_530(channel: BlockingChannel) -> None:
    channel.queue_declare("q")
    channel.basic_consume("q", lambda *a: None, consumer_tag="mine")
    with pytest.raises(pika.exceptions.DuplicateConsumerTag):
        channel.basic_consume("q", lambda *a: None, consumer_tag="mine")


def test_mandatory_unroutable_message_is_returned(channel: BlockingChannel) -> None:
    returned: list[tuple[Any, bytes]] = []
    channel.add_on_return_callback(lambda ch, m, p, b: returned.append((m, b)))
    channel.basic_publish("amq.direct", "nowhere", b"back", mandatory=True)
    wait_for(channel, lambda: bool(returned))
    method, body = returned[0]
    assert (method.reply_code, method.reply_text) == (312, "NO_ROUTE")
    assert method.routing_key == "nowhere"
    assert body == b"back"


def test_all_properties_round_trip(channel: BlockingChannel) -> None:
    headers = {
        "str": "text",
        "int": 7,
        "long": 2**40,
        "neg": -3,
        "bool": True,
        "none": None,
        "bytes": b"\x00\xff",
        "decimal": decimal.Decimal("3.14"),
        "list": [1, "two", [3], {"four": 4}],
        "nested": {"deeper": {"deepest": "yes"}},
        "when": datetime.datetime(2024, 5, 6, 7, 8, 9),
    }
    properties = pika.BasicProperties(
        content_type="application/json",
        content_encoding="gzip",
        headers=headers,
        delivery_mode=2,
        priority=5,
        correlation_id="corr",
        reply_to="replies",
        expiration="60000",
        message_id="id-1",
        timestamp=1_700_000_000,
        type="kind",
        user_id="guest",
        app_id="tests",
        cluster_id="cluster",
    )
    queue = channel.queue_declare("").method.queue
    channel.basic_publish("", queue, b"{}", properties)
    _, got, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"{}"
    for name in (
        "content_type",
        "content_encoding",
        "delivery_mode",
        "priority",
        "correlation_id",
        "reply_to",
        "expiration",
        "message_id",
        "timestamp",
        "type",
        "user_id",
        "app_id",
        "cluster_id",
    ):
        assert getattr(got, name) == getattr(properties, name), name
    when = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)  # pika decodes as UTC
    expected = dict(headers, bytes=b"\x00\xff", when=when)
    assert got.headers == expected


@pytest.mark.parametrize(
    "properties,text",
    [
        (pika.BasicProperties(expiration="soon"), "invalid expiration"),
        (pika.BasicProperties(expiration="-1"), "invalid expiration"),
        (pika.BasicProperties(user_id="someone"), "user_id property"),
    ],
)
def test_invalid_publish_properties_are_406(
    channel: BlockingChannel, properties: pika.BasicProperties, text: str
) -> None:
    channel.basic_publish("", "anything", b"x", properties)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        channel.queue_declare("after")
    assert caught.value.reply_code == 406 and text in caught.value.reply_text


def test_out_of_range_expiration_is_406_on_the_commitlog_store(tmp_path: Path) -> None:
    """A TTL above 2^32-1 ms is refused as RabbitMQ refuses it (406 on the channel), never
    handed to the store (whose record cannot hold 2^63 or more: it answered 541, connection lost);
    the largest TTL and priority are stored, delivered, and survive a restart."""
    persistent = {"delivery_mode": 2}
    with BrokerThread(tmp_path / "data", commitlog=True) as broker:
        conn = broker.connect()
        try:
            for expiration in ("4294967296", "99999999999999999999"):
                channel = conn.channel()
                props = pika.BasicProperties(expiration=expiration, **persistent)
                channel.basic_publish("", "ttl", b"x", props)
                with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
                    channel.queue_declare("after")
                assert caught.value.reply_code == 406
                assert "invalid expiration" in caught.value.reply_text
            channel = conn.channel()
            channel.queue_declare("ttl", durable=True)
            props = pika.BasicProperties(expiration="4294967295", priority=255, **persistent)
            channel.confirm_delivery()
            channel.basic_publish("", "ttl", b"kept", props)
        finally:
            conn.close()
    with BrokerThread(tmp_path / "data", commitlog=True) as broker:
        conn = broker.connect()
        try:
            _, got, body = conn.channel().basic_get("ttl", auto_ack=True)
            assert (body, got.expiration, got.priority) == (b"kept", "4294967295", 255)
        finally:
            conn.close()


def test_publish_to_missing_exchange_is_404(channel: BlockingChannel) -> None:
    channel.basic_publish("missing", "k", b"x")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        channel.queue_declare("after")
    assert caught.value.reply_code == 404


def test_messages_published_through_the_kernel_reach_pika(
    broker: BrokerThread, channel: BlockingChannel
) -> None:
    from herald.core.message import Message, Properties

    channel.queue_declare("native")
    properties = Properties(content_type="text/plain", headers={"from": "python"}, priority=2)
    message = Message.native(b"hi", routing_key="native", properties=properties)
    broker.call(broker.broker.default_vhost.publish, message)
    _, got, body = channel.basic_get("native", auto_ack=True)
    assert body == b"hi"
    assert (got.content_type, got.headers, got.priority) == ("text/plain", {"from": "python"}, 2)


def test_a_message_amqp_cannot_carry_is_dropped_not_fatal(
    broker: BrokerThread, channel: BlockingChannel
) -> None:
    """A routing key over 255 bytes (possible from other protocols) cannot be delivered."""
    from herald.core.message import Message

    queue = channel.queue_declare("").method.queue
    channel.queue_bind(queue, "amq.topic", "#")
    received = collect(channel, queue, auto_ack=False)
    vhost = broker.broker.default_vhost
    broker.call(vhost.publish, Message.native(b"long", exchange="amq.topic", routing_key="k" * 300))
    channel.basic_publish("amq.topic", "short", b"fine")
    wait_for(channel, lambda: len(received) == 1)
    assert received[0][2] == b"fine" and received[0][0].delivery_tag == 2
    channel.basic_ack(received[0][0].delivery_tag)
    assert ready(channel, queue) == 0


def test_closing_a_connection_requeues_its_unacked_messages(broker: BrokerThread) -> None:
    first = broker.connect()
    channel = first.channel()
    channel.queue_declare("kept")
    channel.basic_publish("", "kept", b"m")
    received = collect(channel, "kept")
    wait_for(channel, lambda: len(received) == 1)
    first.close()
    second = broker.connect()
    try:
        method, _, body = second.channel().basic_get("kept", auto_ack=True)
        assert body == b"m" and method.redelivered
    finally:
        second.close()
