"""Message sizes with pika: multi-frame bodies, the 16 MiB default limit, and what is over it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.amqp_e2e.conftest import CLIENT_TIMEOUT, BrokerThread

LIMIT = 16 * 1024 * 1024  # amqp.max_message_size's default, RabbitMQ 4's max_message_size
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _big_body(size: int) -> bytes:
    return bytes(range(256)) * (size // 256) + b"\x2a" * (size % 256)


def _consume_one(channel: BlockingChannel, queue: str) -> bytes:
    for method, _props, body in channel.consume(queue, inactivity_timeout=CLIENT_TIMEOUT):
        assert method is not None, "no delivery"
        channel.basic_ack(method.delivery_tag)
        channel.cancel()
        return body
    raise AssertionError("unreachable")


def _publish_refused(
    channel: BlockingChannel, queue: str, body: bytes
) -> pika.exceptions.ChannelClosedByBroker:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        # The refusal may arrive while pika is still writing the body; else the declare's
        # round trip gets it.
        channel.basic_publish("", queue, body)
        channel.queue_declare(queue, passive=True)
    return caught.value


def test_large_message_is_split_across_frames(channel: BlockingChannel) -> None:
    body = bytes(range(256)) * 4096  # 1 MiB, eight 128 KiB frames
    queue = channel.queue_declare("").method.queue
    channel.basic_publish("", queue, body)
    assert channel.basic_get(queue, auto_ack=True)[2] == body


def test_a_16_mib_persistent_message_is_confirmed_and_consumed(channel: BlockingChannel) -> None:
    body = _big_body(LIMIT)
    channel.queue_declare("big", durable=True)
    channel.confirm_delivery()
    channel.basic_publish("", "big", body, PERSISTENT)  # raises unless acked
    got = _consume_one(channel, "big")
    assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest()


def test_a_16_mib_persistent_message_survives_a_restart_of_the_commit_log(
    tmp_path: Path,
) -> None:
    # The commit log's default segment (256 MiB) holds a 16 MiB record; conftest's 1 MiB would not.
    settings = ["commitlog.segment_size=268435456"]
    body = _big_body(LIMIT)
    with BrokerThread(tmp_path / "data", settings=settings, commitlog=True) as broker:
        conn = broker.connect()
        try:
            channel = conn.channel()
            channel.queue_declare("big", durable=True)
            channel.confirm_delivery()
            channel.basic_publish("", "big", body, PERSISTENT)  # confirmed: durable
        finally:
            conn.close()
    with BrokerThread(tmp_path / "data", settings=settings, commitlog=True) as broker:
        conn = broker.connect()
        try:
            got = _consume_one(conn.channel(), "big")
        finally:
            conn.close()
    assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest()


def test_a_message_over_the_default_limit_is_406_naming_the_limit_and_its_key(
    connection: pika.BlockingConnection,
) -> None:
    channel = connection.channel()
    queue = channel.queue_declare("").method.queue
    error = _publish_refused(channel, queue, _big_body(LIMIT + 1))
    assert error.reply_code == 406
    assert error.reply_text == (
        f"PRECONDITION_FAILED - message size {LIMIT + 1} is larger than configured max size"
        f" {LIMIT} (amqp.max_message_size)"
    )
    assert connection.channel().queue_declare("ok").method.queue == "ok"


def test_max_message_size_sets_the_limit(tmp_path: Path) -> None:
    with BrokerThread(tmp_path, settings=["amqp.max_message_size=1000"]) as broker:
        conn = broker.connect()
        try:
            channel = conn.channel()
            queue = channel.queue_declare("").method.queue
            channel.basic_publish("", queue, b"x" * 1000)  # the limit itself is allowed
            error = _publish_refused(channel, queue, b"x" * 1001)
            assert error.reply_code == 406
            assert "message size 1001 is larger than configured max size 1000" in error.reply_text
            assert "(amqp.max_message_size)" in error.reply_text
            channel = conn.channel()
            assert channel.queue_declare(queue, passive=True).method.message_count == 1
        finally:
            conn.close()
