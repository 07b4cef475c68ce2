"""The plugin's pure parts: sniffing, the stored message form, topic matching, retained trie."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.core.config import load_config
from herald.core.errors import ConfigError, InternalError
from herald.core.message import Content, Message
from herald.core.message import Properties as Neutral
from herald.plugins.mqtt.codec import (
    NO_PROPERTIES,
    Connect,
    Properties,
    SubscriptionOptions,
    encode_packet,
)
from herald.plugins.mqtt.config import MQTTConfig
from herald.plugins.mqtt.message_codec import MQTTMessageCodec, pack, unpack
from herald.plugins.mqtt.plugin import SNIFF_BYTES, sniff
from herald.plugins.mqtt.retained import RetainedMessage, RetainedStore
from herald.plugins.mqtt.subscriptions import (
    Subscription,
    SubscriptionSet,
    filter_covers,
    topic_matches,
)


@pytest.mark.parametrize("version", [3, 4, 5])
def test_sniff_recognises_every_connect(version: int) -> None:
    data = encode_packet(Connect("c" * 300, version), version)  # a two-byte remaining length
    assert sniff(data[:SNIFF_BYTES]) is True
    for cut in range(len(data[:SNIFF_BYTES])):
        assert sniff(data[:cut]) in (None, True)


@pytest.mark.parametrize(
    "prefix",
    [b"AMQP\x00\x00\x09\x01", b"CONNECT\n", b"\x10\x05\x00\x04MQTX", b"\x10\xff\xff\xff\xff\x7f"],
)
def test_sniff_refuses_other_protocols(prefix: bytes) -> None:
    assert sniff(prefix) is False


properties = st.builds(
    Properties,
    payload_format_indicator=st.none() | st.sampled_from([0, 1]),
    message_expiry_interval=st.none() | st.integers(0, 2**32 - 1),
    content_type=st.none() | st.text(st.characters(blacklist_characters="\x00", codec="utf-8")),
    response_topic=st.none() | st.sampled_from(["a/b", "reply"]),
    correlation_data=st.none() | st.binary(max_size=20),
    user_properties=st.lists(st.tuples(st.sampled_from(["k", "é"]), st.text("xyz")), max_size=3),
)


@given(st.integers(0, 2), st.booleans(), properties, st.binary(max_size=50))
def test_stored_form_round_trips(qos: int, retain: bool, props: Properties, payload: bytes) -> None:
    stored = unpack(pack(qos, retain, props, payload))
    assert stored == (qos, retain, props, payload)


def test_corrupt_stored_form_is_an_internal_error() -> None:
    for raw in (b"", b"\x03\x00", b"\x00\x05\x01"):
        with pytest.raises(InternalError):
            unpack(raw)


def test_neutral_conversion_both_ways() -> None:
    codec = MQTTMessageCodec()
    props = Properties(
        content_type="text/plain",
        response_topic="a/b",
        correlation_data=b"\xff\x00",  # not UTF-8: kept in a header
        user_properties=(("x", "1"), ("x", "2")),
        message_expiry_interval=5,
    )
    content = codec.decode(pack(2, False, props, b"body"))
    neutral = content.properties
    assert content.body == b"body"
    assert neutral.reply_to == "a.b"
    assert neutral.expiration == "5000"
    assert neutral.delivery_mode == 2
    assert neutral.correlation_id is None
    assert neutral.headers == {
        "x": ["1", "2"],
        "x-mqtt-publish-qos": 2,
        "x-correlation-id": b"\xff\x00",
    }
    message = Message("mqtt", None, "amq.topic", "k", 4)
    back = unpack(codec.encode(content, message))
    assert back.qos == 1  # persistent -> QoS 1
    assert back.properties.correlation_data == b"\xff\x00"
    assert back.properties.response_topic == "a/b"
    assert back.properties.user_properties == (("x", "1"), ("x", "2"))
    assert back.properties.message_expiry_interval == 5


def test_empty_neutral_content_encodes_without_properties() -> None:
    message = Message.native(b"hi")
    stored = unpack(MQTTMessageCodec().encode(Content(Neutral(), b"hi"), message))
    assert stored == (0, False, NO_PROPERTIES, b"hi")


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("a/b", "a/b", True),
        ("a/+", "a/b", True),
        ("a/+", "a/b/c", False),
        ("a/#", "a", True),
        ("a/#", "a/b/c", True),
        ("#", "$SYS/x", False),
        ("+/x", "$SYS/x", False),
        ("$SYS/#", "$SYS/x", True),
        ("+/+", "/x", True),
        ("a//b", "a//b", True),
    ],
)
def test_topic_matches(topic_filter: str, topic: str, expected: bool) -> None:
    assert topic_matches(topic_filter, topic) is expected


@pytest.mark.parametrize(
    ("outer", "inner", "expected"),
    [
        ("test/nosubscribe", "test/nosubscribe", True),
        ("test/nosubscribe", "test/+", False),
        ("a/#", "a", True),
        ("a/#", "a/b/+", True),
        ("a/#", "a/#", True),
        ("a/+", "a/b", True),
        ("a/+", "a/+", True),
        ("a/+", "a/#", False),
        ("a/+", "a/b/c", False),
        ("#", "$SYS/x", True),  # a policy, not a match: "#" refuses every filter
        ("a/b", "a/+", False),
    ],
)
def test_filter_covers(outer: str, inner: str, expected: bool) -> None:
    assert filter_covers(outer, inner) is expected


levels = st.sampled_from(["a", "b", "$s", ""])
topics = st.lists(levels, min_size=1, max_size=4).map("/".join)
filters = st.builds(
    lambda parts, tail: "/".join(parts + tail),
    st.lists(levels | st.just("+"), min_size=0, max_size=3),
    st.sampled_from([[], ["#"]]),
).filter(bool)


@given(st.lists(topics, unique=True, max_size=12), filters)
def test_retained_trie_matches_like_topic_matches(stored: list[str], topic_filter: str) -> None:
    retained = RetainedStore("/", None)
    for topic in stored:
        retained.put(RetainedMessage(topic, b"x", 0, NO_PROPERTIES))
    found = [m.topic for m in retained.match(topic_filter)]
    assert found == sorted(t for t in stored if topic_matches(topic_filter, t))


@given(filters, filters, topics)
def test_a_covered_filter_matches_nothing_its_cover_does_not(
    outer: str, inner: str, topic: str
) -> None:
    if filter_covers(outer, inner) and topic_matches(inner, topic):
        assert topic_matches(outer, topic) or topic.startswith("$")


def test_retained_empty_payload_deletes_and_expiry_drops() -> None:
    retained = RetainedStore("/", None)
    retained.put(RetainedMessage("a/b", b"1", 1, NO_PROPERTIES))
    retained.put(RetainedMessage("a/c", b"2", 1, NO_PROPERTIES, expires_at=100.0))
    assert [m.topic for m in retained.match("a/+", now=50.0)] == ["a/b", "a/c"]
    assert [m.topic for m in retained.match("a/+", now=150.0)] == ["a/b"]
    retained.put(RetainedMessage("a/b", b"", 0, NO_PROPERTIES))
    assert retained.match("#") == [] and len(retained) == 0


def test_subscription_set_merges_overlaps_and_honours_no_local() -> None:
    subs = SubscriptionSet()
    subs.add(Subscription.from_request("s/+", SubscriptionOptions(0), 1))
    subs.add(Subscription.from_request("s/#", SubscriptionOptions(2, no_local=True), 2))
    subs.add(Subscription.from_request("$share/g/s/#", SubscriptionOptions(1), None))
    match = subs.match("s/x", own_message=False)
    assert match is not None and (match.qos, match.identifiers) == (2, (1, 2))
    own = subs.match("s/x", own_message=True)
    assert own is not None and (own.qos, own.identifiers) == (0, (1,))
    assert subs.match("s/x/y", own_message=True) is None
    assert subs.match("t", own_message=False) is None


def test_subscription_matches_are_forgotten_when_subscriptions_change() -> None:
    subs = SubscriptionSet()
    assert subs.match("s/x", own_message=False) is None
    subs.add(Subscription.from_request("s/+", SubscriptionOptions(0), None))
    match = subs.match("s/x", own_message=False)
    assert match is not None and match.qos == 0
    subs.add(Subscription.from_request("s/x", SubscriptionOptions(2), 3))
    match = subs.match("s/x", own_message=False)
    assert match is not None and (match.qos, match.identifiers) == (2, (3,))
    subs.remove("s/x")
    subs.remove("s/+")
    assert subs.match("s/x", own_message=False) is None


def test_subscription_json_round_trip() -> None:
    options = SubscriptionOptions(2, True, True, 1)
    subscription = Subscription.from_request("$share/g/a/+", options, 7)
    assert Subscription.from_json(subscription.to_json()) == subscription


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("mqtt.retain_store=disk", "retain_store"),
        ("mqtt.max_inflight=0", "max_inflight"),
        ("mqtt.ws_path=mqtt", "ws_path"),
        ("mqtt.port=70000", "port"),
        ('mqtt.subscribe_denied=["a/#/b"]', "subscribe_denied"),
        ("mqtt.close_timeout=0", "close_timeout"),
    ],
)
def test_bad_config_names_the_key(setting: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_config(data={}, overrides=[setting], plugin_sections={"mqtt": MQTTConfig})


def test_config_defaults() -> None:
    config = load_config(data={}, plugin_sections={"mqtt": MQTTConfig}).section("mqtt")
    assert (config.port, config.ws_port, config.ws_path) == (1883, 15675, "/mqtt")
    assert (config.max_inflight, config.max_packet_size) == (64, 16 * 1024 * 1024)
