"""Publisher confirms, transactions, durability, dead-lettering, TTL and direct reply-to."""

from __future__ import annotations

from pathlib import Path

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic, BasicProperties

from herald.storage.memory import MemoryStoreData
from tests.amqp_e2e.conftest import BrokerThread
from tests.amqp_e2e.test_messaging import collect, ready, wait_for

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def test_confirms_ack_routed_and_unroutable_publishes(channel: BlockingChannel) -> None:
    channel.confirm_delivery()
    channel.queue_declare("q", durable=True)
    channel.basic_publish("", "q", b"transient")  # raises on nack
    channel.basic_publish("", "q", b"stored", PERSISTENT)
    channel.basic_publish("", "nowhere", b"dropped")  # unroutable, not mandatory: acked
    assert ready(channel, "q") == 2


def test_confirms_nack_a_publish_refused_by_reject_publish(channel: BlockingChannel) -> None:
    channel.confirm_delivery()
    channel.queue_declare("small", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    channel.basic_publish("", "small", b"fits")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", "small", b"refused")
    assert ready(channel, "small") == 1


def test_confirmed_mandatory_unroutable_raises_unroutable(channel: BlockingChannel) -> None:
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("amq.direct", "nowhere", b"x", mandatory=True)


def test_tx_commit_and_rollback(connection: pika.BlockingConnection) -> None:
    observer = connection.channel()
    observer.queue_declare("txq")
    tx = connection.channel()
    tx.tx_select()
    tx.basic_publish("", "txq", b"kept")
    assert ready(observer, "txq") == 0  # buffered until commit
    tx.tx_commit()
    assert ready(observer, "txq") == 1
    tx.basic_publish("", "txq", b"dropped")
    tx.tx_rollback()
    assert ready(observer, "txq") == 1
    method, _, body = tx.basic_get("txq")
    assert body == b"kept"
    tx.basic_ack(method.delivery_tag)
    tx.tx_rollback()  # the ack is undone: the message is still unacked on this channel
    tx.basic_ack(method.delivery_tag)
    tx.tx_commit()
    tx.close()
    assert ready(observer, "txq") == 0


def test_tx_and_confirm_modes_exclude_each_other(connection: pika.BlockingConnection) -> None:
    channel = connection.channel()
    channel.tx_select()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        channel.confirm_delivery()
    assert caught.value.reply_code == 406


def test_persistent_messages_in_durable_queues_survive_a_restart(tmp_path: Path) -> None:
    data = MemoryStoreData()
    with BrokerThread(tmp_path / "one", data) as broker:
        conn = broker.connect()
        channel = conn.channel()
        channel.confirm_delivery()
        channel.exchange_declare("events", "topic", durable=True)
        channel.queue_declare("log", durable=True)
        channel.queue_bind("log", "events", "#")
        channel.queue_declare("scratch")
        channel.basic_publish("events", "a.b", b"persistent", PERSISTENT)
        channel.basic_publish("events", "a.b", b"transient")
        channel.basic_publish("", "scratch", b"gone", PERSISTENT)
        conn.close()
    with BrokerThread(tmp_path / "two", data) as broker:
        conn = broker.connect()
        channel = conn.channel()
        assert ready(channel, "log") == 1
        _, properties, body = channel.basic_get("log", auto_ack=True)
        assert body == b"persistent" and properties.delivery_mode == 2
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            channel.queue_declare("scratch", passive=True)
        channel = conn.channel()
        channel.basic_publish("events", "x", b"binding kept")
        assert ready(channel, "log") == 1
        conn.close()


def test_dead_lettered_message_carries_x_death(channel: BlockingChannel) -> None:
    channel.queue_declare("dead")
    channel.queue_declare(
        "work",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"},
    )
    channel.basic_publish("", "work", b"job", pika.BasicProperties(headers={"mine": 1}))
    method, _, _ = channel.basic_get("work")
    channel.basic_reject(method.delivery_tag, requeue=False)
    _, properties, body = channel.basic_get("dead", auto_ack=True)
    assert body == b"job"
    headers = properties.headers
    assert headers["mine"] == 1
    (death,) = headers["x-death"]
    assert (death["queue"], death["reason"], death["count"]) == ("work", "rejected", 1)
    assert death["routing-keys"] == ["work"] and death["exchange"] == ""
    assert headers["x-first-death-queue"] == "work"
    assert headers["x-first-death-reason"] == "rejected"


def test_expired_messages_are_dead_lettered_without_their_expiration(
    channel: BlockingChannel,
) -> None:
    channel.queue_declare("expired")
    channel.queue_declare(
        "ttl",
        arguments={
            "x-message-ttl": 0,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "expired",
        },
    )
    channel.basic_publish("", "ttl", b"late", pika.BasicProperties(expiration="0"))
    assert ready(channel, "ttl") == 0
    _, properties, body = channel.basic_get("expired", auto_ack=True)
    assert body == b"late" and properties.expiration is None
    (death,) = properties.headers["x-death"]
    assert death["reason"] == "expired" and death["original-expiration"] == "0"


def test_per_message_ttl_zero_is_delivered_to_a_waiting_consumer(
    channel: BlockingChannel,
) -> None:
    queue = channel.queue_declare("").method.queue
    received = collect(channel, queue, auto_ack=True)
    channel.basic_publish("", queue, b"now", pika.BasicProperties(expiration="0"))
    wait_for(channel, lambda: len(received) == 1)
    assert received[0][1].expiration == "0"


def test_direct_reply_to_rpc(connection: pika.BlockingConnection) -> None:
    server = connection.channel()
    server.queue_declare("rpc")

    def answer(
        ch: BlockingChannel, method: Basic.Deliver, properties: BasicProperties, body: bytes
    ) -> None:
        assert properties.reply_to.startswith("amq.rabbitmq.reply-to.")
        ch.basic_publish(
            "",
            properties.reply_to,
            body.upper(),
            pika.BasicProperties(correlation_id=properties.correlation_id),
        )
        ch.basic_ack(method.delivery_tag)

    server.basic_consume("rpc", answer)
    client = connection.channel()
    assert client.queue_declare("amq.rabbitmq.reply-to", passive=True).method.queue
    replies = collect(client, "amq.rabbitmq.reply-to", auto_ack=True)
    client.basic_publish(
        "",
        "rpc",
        b"ping",
        pika.BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id="c1"),
    )
    wait_for(client, lambda: bool(replies))
    _, properties, body = replies[0]
    assert body == b"PING" and properties.correlation_id == "c1"


def test_direct_reply_to_needs_a_reply_consumer(channel: BlockingChannel) -> None:
    channel.basic_publish("", "x", b"?", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        channel.queue_declare("after")
    assert caught.value.reply_code == 406


def test_direct_reply_to_consumer_must_be_no_ack(channel: BlockingChannel) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        channel.basic_consume("amq.rabbitmq.reply-to", lambda *a: None)
    assert caught.value.reply_code == 406
