"""Declaration answers RabbitMQ clients check: reply codes and texts of exchange / queue.declare."""

from __future__ import annotations

from typing import Any

import pika
import pika.exceptions
import pytest

LOCKED = (
    "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'q' in vhost '/'. It could"
    " be originally declared on another connection or the exclusive property value does not"
    " match that of the original declaration."
)


def _refused(connection: pika.BlockingConnection, declare: Any) -> Any:
    """The channel error `declare(channel)` gets; the connection stays open."""
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        declare(channel)
    assert connection.is_open
    return caught.value


def test_passive_declare_of_the_default_exchange_is_403(
    connection: pika.BlockingConnection,
) -> None:
    error = _refused(connection, lambda ch: ch.exchange_declare("", passive=True))
    assert error.reply_code == 403
    assert error.reply_text == "ACCESS_REFUSED - operation not permitted on the default exchange"


def test_passive_declare_of_a_predeclared_exchange_still_succeeds(
    connection: pika.BlockingConnection,
) -> None:
    connection.channel().exchange_declare("amq.direct", passive=True)


@pytest.mark.parametrize(
    "first,again",
    [
        ({"exclusive": True}, {"exclusive": False}),
        ({"exclusive": False}, {"exclusive": True}),
        ({"exclusive": True}, {"exclusive": False, "durable": True}),  # exclusivity first
    ],
)
def test_redeclaring_a_queue_with_another_exclusive_is_405(
    connection: pika.BlockingConnection, first: dict[str, bool], again: dict[str, bool]
) -> None:
    connection.channel().queue_declare("q", **first)
    error = _refused(connection, lambda ch: ch.queue_declare("q", **again))
    assert error.reply_code == 405
    assert error.reply_text == LOCKED
    assert connection.channel().queue_declare("q", **first).method.queue == "q"


@pytest.mark.parametrize(
    "again",
    [
        {"durable": True},
        {"auto_delete": True},
        {"arguments": {"x-max-length": 10}},
        {"exclusive": True, "durable": True},
    ],
)
def test_redeclaring_a_queue_with_other_properties_is_406(
    connection: pika.BlockingConnection, again: dict[str, Any]
) -> None:
    first = {"exclusive": True} if again.get("exclusive") else {}
    connection.channel().queue_declare("q", **first)
    error = _refused(connection, lambda ch: ch.queue_declare("q", **again))
    assert error.reply_code == 406
    assert error.reply_text.startswith("PRECONDITION_FAILED - inequivalent arg for queue 'q'")
