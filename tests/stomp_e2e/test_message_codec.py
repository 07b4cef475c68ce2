"""The stored form of STOMP messages and its conversion to and from neutral content."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.core.errors import InternalError
from herald.core.message import CodecRegistry, Content, Message, Properties
from herald.plugins.stomp.errors import FrameError
from herald.plugins.stomp.message_codec import (
    StompMessageCodec,
    delivery_parts,
    kernel_message,
    pack,
    split,
)

header_text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
header_pairs = st.lists(st.tuples(header_text.filter(bool), header_text), max_size=8)


@given(header_pairs, st.binary())
def test_stored_form_round_trips_headers_and_binary_bodies(
    headers: list[tuple[str, str]], body: bytes
) -> None:
    assert split(pack(headers, body)) == (tuple(headers), body)


def test_stored_form_is_a_length_prefixed_escaped_header_block() -> None:
    raw = pack([("a:b", "line\nbreak\\"), ("c", "")], b"\x00body")
    block = b"a\\cb:line\\nbreak\\\\\nc:\n"
    assert raw == len(block).to_bytes(4, "big") + block + b"\x00body"


@pytest.mark.parametrize(
    "raw",
    [
        b"",  # no length
        b"\x00\x00\x00\x09abc",  # a block longer than the record
        b"\x00\x00\x00\x05a:\\t\n",  # an escape STOMP 1.2 does not define
        b"\x00\x00\x00\x02a\n",  # no colon
        b"\x00\x00\x00\x03a:b",  # no final line feed
        b"\x00\x00\x00\x03\xff:\n",  # not UTF-8
    ],
)
def test_corrupt_stored_messages_raise_internal_error(raw: bytes) -> None:
    with pytest.raises(InternalError):
        split(raw)


def test_kernel_message_takes_its_routing_facts_from_the_headers() -> None:
    headers = (
        ("persistent", "true"),
        ("priority", "7"),
        ("expiration", "5000"),
        ("message-id", "mine-1"),
        ("content-type", "text/plain"),
        ("x-app", "a"),
        ("x-app", "second"),
    )
    message = kernel_message(headers, b"hi", "amq.topic", "a.b")
    assert (message.exchange, message.routing_key, message.body_size) == ("amq.topic", "a.b", 2)
    assert message.persistent and message.priority == 7 and message.expiration_ms == 5000
    assert message.message_id == "mine-1"
    assert message.headers == {"message-id": "mine-1", "x-app": "a"}
    assert message.raw is not None
    assert split(message.raw) == (headers, b"hi")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("priority", "high"),
        ("priority", "-1"),
        ("priority", "256"),
        ("priority", "9" * 30),
        ("expiration", "-1"),
        ("expiration", "1s"),
        ("expiration", "4294967296"),
        ("expiration", "9" * 30),
        ("expiration", "\u0661"),
    ],
)
def test_kernel_message_refuses_malformed_property_headers(name: str, value: str) -> None:
    with pytest.raises(FrameError) as caught:
        kernel_message(((name, value),), b"", "", "q")
    assert caught.value.message == "Invalid header"


def test_property_headers_at_their_bounds_are_accepted() -> None:
    message = kernel_message((("priority", "255"), ("expiration", "4294967295")), b"", "", "q")
    assert (message.priority, message.expiration_ms) == (255, 2**32 - 1)
    assert kernel_message((("priority", "0"), ("expiration", "0")), b"", "", "q").priority == 0


def test_decode_maps_headers_to_properties_like_rabbitmq() -> None:
    raw = pack(
        [
            ("content-type", "application/json"),
            ("persistent", "true"),
            ("priority", "3"),
            ("correlation-id", "c-1"),
            ("reply-to", "/reply-queue/amq.gen-abc"),
            ("expiration", "100"),
            ("amqp-message-id", "m-1"),
            ("timestamp", "1700000000"),
            ("x-trace", "t"),
        ],
        b"{}",
    )
    properties, body = StompMessageCodec().decode(raw)
    assert body == b"{}"
    assert properties == Properties(
        content_type="application/json",
        headers={"x-trace": "t"},
        delivery_mode=2,
        priority=3,
        correlation_id="c-1",
        reply_to="amq.gen-abc",
        expiration="100",
        message_id="m-1",
        timestamp=1700000000,
    )


def test_encode_writes_foreign_properties_as_headers() -> None:
    properties = Properties(
        content_type="text/plain",
        headers={"n": 5, "flag": True, "raw": b"bytes", "table": {"a": [1, 2]}},
        delivery_mode=2,
        priority=4,
        reply_to="amq.gen-q",
        message_id="id-9",
    )
    message = Message.native(b"body", routing_key="q", properties=properties)
    headers, body = split(StompMessageCodec().encode(Content(properties, b"body"), message))
    assert body == b"body"
    assert dict(headers) == {
        "content-type": "text/plain",
        "persistent": "true",
        "priority": "4",
        "reply-to": "/reply-queue/amq.gen-q",
        "amqp-message-id": "id-9",
        "n": "5",
        "flag": "true",
        "raw": "bytes",
        "table": '{"a":[1,2]}',
    }


def test_dead_lettered_stomp_messages_carry_annotations_and_lose_their_expiration() -> None:
    message = kernel_message((("expiration", "10"), ("x-app", "1")), b"b", "", "q")
    dead = message.with_route("", "dlq", {"x-first-death-queue": "q", "x-death": [{"count": 1}]})
    headers, body = delivery_parts(dead, CodecRegistry())
    assert body == b"b"
    assert dict(headers) == {"x-app": "1", "x-first-death-queue": "q", "x-death": '[{"count":1}]'}
