"""Permission checks made as RabbitMQ makes them: configure, write and read per resource."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.amqp_e2e.conftest import BrokerThread


@pytest.fixture
def limited(broker: BrokerThread) -> Iterator[pika.BlockingConnection]:
    """A user who may configure and read `own.*` and write `own.*` plus amq.direct."""
    users = broker.broker.users
    broker.call(users.add_user, "limited", "secret")
    broker.call(
        users.set_permissions, "limited", "/", r"^own\.", r"^(own\..*|amq\.direct)$", r"^own\."
    )
    conn = broker.connect(credentials=pika.PlainCredentials("limited", "secret"))
    setup = conn.channel()
    setup.exchange_declare("own.x", "direct")
    setup.queue_declare("own.q")
    yield conn
    if conn.is_open:
        conn.close()


def refused(conn: pika.BlockingConnection, action: Callable[[BlockingChannel], object]) -> str:
    channel = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        action(channel)
        channel.queue_declare("own.q", passive=True)  # a round trip, for async methods
    assert caught.value.reply_code == 403
    return caught.value.reply_text


@pytest.mark.parametrize(
    "action,resource",
    [
        (lambda ch: ch.queue_declare("theirs"), "queue 'theirs'"),
        (lambda ch: ch.exchange_declare("theirs", "fanout"), "exchange 'theirs'"),
        (lambda ch: ch.queue_delete("other.q"), "queue 'other.q'"),
        (lambda ch: ch.basic_publish("amq.fanout", "k", b"x"), "exchange 'amq.fanout'"),
        (lambda ch: ch.basic_publish("", "own.q", b"x"), "exchange 'amq.default'"),
        (lambda ch: ch.queue_bind("own.q", "amq.direct", "k"), "exchange 'amq.direct'"),
        (lambda ch: ch.exchange_bind("own.x", "amq.topic", "k"), "exchange 'amq.topic'"),
        (lambda ch: ch.basic_get("amq.gen-x"), "queue 'amq.gen-x'"),
        (lambda ch: ch.queue_declare(""), "queue 'amq.gen-"),
    ],
)
def test_refused_with_403(
    limited: pika.BlockingConnection, action: Callable[[BlockingChannel], object], resource: str
) -> None:
    text = refused(limited, action)
    assert text.startswith("ACCESS_REFUSED - access to ") and resource in text


def test_allowed_where_the_patterns_match(limited: pika.BlockingConnection) -> None:
    channel = limited.channel()
    channel.queue_bind("own.q", "own.x", "k")
    channel.basic_publish("own.x", "k", b"mine")
    channel.basic_publish("amq.direct", "k", b"unrouted but allowed")
    assert channel.basic_get("own.q", auto_ack=True)[2] == b"mine"
