"""Destination parsing, formatting and queue declarations from headers (pure functions)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.plugins.stomp.destinations import (
    Declaration,
    Destination,
    Kind,
    declaration,
    escape,
    format_destination,
    is_durable_subscription,
    parse_destination,
    subscription_queue_name,
    unescape,
)
from herald.plugins.stomp.errors import FrameError

PARSED = [
    ("/queue/orders", Destination(Kind.QUEUE, "orders"), "", "orders"),
    ("orders", Destination(Kind.QUEUE, "orders"), "", "orders"),
    ("/queue/a%2Fb", Destination(Kind.QUEUE, "a/b"), "", "a/b"),
    (
        "/topic/stocks.*.nyse",
        Destination(Kind.TOPIC, "stocks.*.nyse"),
        "amq.topic",
        "stocks.*.nyse",
    ),
    ("/exchange/amq.direct/k", Destination(Kind.EXCHANGE, "amq.direct", "k"), "amq.direct", "k"),
    ("/exchange/logs", Destination(Kind.EXCHANGE, "logs"), "logs", ""),
    ("/amq/queue/existing", Destination(Kind.AMQ_QUEUE, "existing"), "", "existing"),
    ("/temp-queue/replies", Destination(Kind.TEMP_QUEUE, "replies"), "", "replies"),
    ("/reply-queue/amq.gen-x/y", Destination(Kind.REPLY_QUEUE, "amq.gen-x/y"), "", "amq.gen-x/y"),
]


@pytest.mark.parametrize(("text", "expected", "exchange", "key"), PARSED)
def test_destinations_map_to_exchange_and_routing_key(
    text: str, expected: Destination, exchange: str, key: str
) -> None:
    parsed = parse_destination(text)
    assert parsed == expected
    assert (parsed.exchange, parsed.key) == (exchange, key)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "Missing destination"),
        ("", "Invalid destination"),
        ("/queue/", "Invalid destination"),
        ("/queue/a/b", "Invalid destination"),
        ("/topic/a/b", "Invalid destination"),
        ("/exchange//k", "Invalid destination"),
        ("/exchange/e/k/extra", "Invalid destination"),
        ("/reply-queue/", "Invalid destination"),
        ("/bogus/x", "Unknown destination"),
    ],
)
def test_bad_destinations_are_refused_with_a_reason(text: str | None, message: str) -> None:
    with pytest.raises(FrameError) as caught:
        parse_destination(text, "SUBSCRIBE")
    assert caught.value.message == message
    assert caught.value.detail


@pytest.mark.parametrize(
    ("exchange", "key", "text"),
    [
        ("", "q", "/queue/q"),
        ("amq.topic", "a.b", "/topic/a.b"),
        ("amq.direct", "k", "/exchange/amq.direct/k"),
        ("amq.fanout", "", "/exchange/amq.fanout"),
        ("", "a/b%", "/queue/a%2Fb%25"),
    ],
)
def test_message_destinations_are_formatted_like_rabbitmq(
    exchange: str, key: str, text: str
) -> None:
    assert format_destination(exchange, key) == text
    parsed = parse_destination(text)
    assert (parsed.exchange, parsed.key) == (exchange, key)


@given(st.text())
def test_escape_round_trips(name: str) -> None:
    assert unescape(escape(name)) == name
    assert "/" not in escape(name)


@given(st.text(min_size=1).filter(lambda s: s != "%"))
def test_a_formatted_queue_destination_parses_back(name: str) -> None:
    assert parse_destination(format_destination("", name)) == Destination(Kind.QUEUE, name)


def test_queue_destinations_declare_durable_queues_by_default() -> None:
    queue = parse_destination("/queue/q")
    assert declaration(queue, (), subscribe=False) == Declaration(
        durable=True, auto_delete=False, exclusive=False
    )


def test_topic_subscriptions_get_private_queues_unless_durable() -> None:
    topic = parse_destination("/topic/t")
    assert declaration(topic, (), subscribe=True) == Declaration(
        durable=False, auto_delete=True, exclusive=True
    )
    durable = declaration(topic, [("durable", "true")], subscribe=True)
    assert (durable.durable, durable.auto_delete, durable.exclusive) == (True, False, False)
    assert durable.explicit
    persistent = declaration(topic, [("persistent", "true")], subscribe=True)
    assert persistent.durable


def test_persistent_on_send_is_about_the_message_not_the_queue() -> None:
    queue = parse_destination("/queue/q")
    decl = declaration(queue, [("persistent", "false")], subscribe=False)
    assert decl.durable and not decl.explicit


def test_queue_arguments_come_from_x_headers_with_their_types() -> None:
    headers = [
        ("x-message-ttl", "5000"),
        ("x-max-length", "10"),
        ("x-dead-letter-exchange", "dlx"),
        ("x-single-active-consumer", "true"),
        ("x-custom", "ignored"),
        ("x-message-ttl", "1"),  # repeated: the first wins
        ("durable", "false"),
        ("auto-delete", "true"),
    ]
    decl = declaration(parse_destination("/queue/q"), headers, subscribe=False)
    assert decl.arguments == {
        "x-message-ttl": 5000,
        "x-max-length": 10,
        "x-dead-letter-exchange": "dlx",
        "x-single-active-consumer": True,
    }
    assert (decl.durable, decl.auto_delete) == (False, True)


@pytest.mark.parametrize(
    "headers",
    [[("x-max-length", "ten")], [("durable", "maybe")], [("x-single-active-consumer", "1")]],
)
def test_malformed_declaration_headers_are_refused(headers: list[tuple[str, str]]) -> None:
    with pytest.raises(FrameError) as caught:
        declaration(parse_destination("/queue/q"), headers, subscribe=False)
    assert caught.value.message == "Invalid header"


def test_durable_subscription_queue_names_are_stable_and_distinct() -> None:
    name = subscription_queue_name("/topic/a", "sub-1")
    assert name == subscription_queue_name("/topic/a", "sub-1")
    assert name.startswith("stomp-subscription-")
    assert name != subscription_queue_name("/topic/b", "sub-1")
    assert name != subscription_queue_name("/topic/a", "sub-2")


def test_durable_subscription_headers() -> None:
    assert is_durable_subscription([("durable", "true")])
    assert is_durable_subscription([("persistent", "True")])
    assert not is_durable_subscription([("durable", "false"), ("id", "x")])
