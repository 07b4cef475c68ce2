"""The AMQP message codec: stored form, neutral conversion, annotations (no sockets)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.core.errors import PreconditionFailed
from herald.core.message import CodecRegistry, Content, Message, Properties
from herald.plugins.amqp.codec.fields import Timestamp
from herald.plugins.amqp.codec.methods import BasicProperties
from herald.plugins.amqp.codec.properties import decode_properties, encode_properties
from herald.plugins.amqp.message_codec import (
    AMQPMessageCodec,
    delivery_parts,
    kernel_message,
    pack,
    parse_expiration,
    split,
)

short = st.text(max_size=40)
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.binary(max_size=20)
    | short
    | st.floats(allow_nan=False),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(short, children, max_size=4),
    max_leaves=12,
)
properties = st.builds(
    Properties,
    content_type=st.none() | short,
    content_encoding=st.none() | short,
    headers=st.none() | st.dictionaries(short, values, min_size=1, max_size=5),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | short,
    reply_to=st.none() | short,
    expiration=st.none() | st.integers(0, 10**9).map(str),
    message_id=st.none() | short,
    timestamp=st.none() | st.integers(0, 2**40),
    type=st.none() | short,
    user_id=st.none() | short,
    app_id=st.none() | short,
)


def registry() -> CodecRegistry:
    codecs = CodecRegistry()
    codecs.register(AMQPMessageCodec())
    return codecs


@given(st.binary(max_size=50), st.binary(max_size=100))
def test_stored_form_splits_back(raw_properties: bytes, body: bytes) -> None:
    assert split(pack(raw_properties, body)) == (raw_properties, body)


@given(properties, st.binary(max_size=100))
def test_neutral_content_survives_encode_decode(props: Properties, body: bytes) -> None:
    codec = AMQPMessageCodec()
    assert codec.decode(codec.encode(Content(props, body))) == Content(props, body)


def test_kernel_message_takes_routing_facts_from_decoded_properties() -> None:
    props = BasicProperties(
        headers={"h": 1}, delivery_mode=2, priority=4, expiration="1500", message_id="m"
    )
    raw = encode_properties(props)
    message = kernel_message(props, raw, b"body", "ex", "rk")
    assert (message.protocol, message.exchange, message.routing_key) == ("amqp", "ex", "rk")
    assert message.headers == {"h": 1} and message.persistent and message.priority == 4
    assert message.expiration_ms == 1500 and message.message_id == "m"
    assert message.raw is not None  # as it came: the raw form is kept
    assert message.body_size == 4 and split(message.raw) == (raw, b"body")


@pytest.mark.parametrize("text", ["", "-1", "1.5", " 5", "soon", "٣"])
def test_invalid_expirations_are_406(text: str) -> None:
    with pytest.raises(PreconditionFailed, match="invalid expiration"):
        parse_expiration(text)


def test_expiration_is_milliseconds() -> None:
    assert parse_expiration("0") == 0 and parse_expiration("60000") == 60000


def test_amqp_message_is_delivered_with_the_publishers_bytes() -> None:
    raw = encode_properties(BasicProperties(content_type="text/plain", cluster_id="c"))
    message = kernel_message(decode_properties(raw, 0, len(raw)), raw, b"hi", "", "q")
    assert delivery_parts(message, registry()) == (raw, b"hi")


def test_annotations_are_merged_and_expiration_dropped() -> None:
    props = BasicProperties(headers={"mine": "yes"}, expiration="100")
    raw = encode_properties(props)
    message = kernel_message(props, raw, b"b", "", "q")
    dead = message.with_route("dlx", "q", {"x-death": [{"queue": "q", "time": 1700000000}]})
    raw_out, body = delivery_parts(dead, registry())
    got = decode_properties(raw_out, 0, len(raw_out))
    assert body == b"b" and got.expiration is None
    assert got.headers is not None and got.headers["mine"] == "yes"
    (death,) = got.headers["x-death"]
    assert death["time"] == 1700000000 and isinstance(death["time"], Timestamp)


def test_native_messages_are_converted_for_amqp_consumers() -> None:
    props = Properties(content_type="application/json", headers={"k": [1, "a"]}, priority=3)
    message = Message.native(b"{}", routing_key="q", properties=props)
    raw, body = delivery_parts(message, registry())
    got = decode_properties(raw, 0, len(raw))
    assert body == b"{}"
    assert (got.content_type, got.headers, got.priority) == ("application/json", {"k": [1, "a"]}, 3)
