"""Topic names and filters (MQTT section 4.7), shared subscriptions (5.0 section 4.8.2), and the
MQTT <-> AMQP topic mapping."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.plugins.mqtt.codec.topics import (
    TopicError,
    TopicFilter,
    amqp_to_mqtt,
    binding_key_to_filter,
    filter_to_binding_key,
    mqtt_to_amqp,
    parse_topic_filter,
    validate_topic_filter,
    validate_topic_name,
)


@pytest.mark.parametrize("name", ["a", "a/b/c", "/", "a//b", "/a/", "$SYS/x", "ä/€", " ", "a.b"])
def test_valid_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize("name", ["", "a/+", "+", "#", "a/#", "a+b", "a\x00b", "x" * 65536])
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(TopicError):
        validate_topic_name(name)


@pytest.mark.parametrize(
    "text", ["a", "#", "+", "a/#", "a/+", "+/+", "+/#", "/+", "a//+/#", "/#", "$SYS/#", "a/b"]
)
def test_valid_topic_filters(text: str) -> None:
    validate_topic_filter(text)
    assert parse_topic_filter(text) == TopicFilter(text)


@pytest.mark.parametrize(
    "text", ["", "a#", "#/a", "a/#/b", "a/b#", "a+", "+a", "a/+b/c", "##", "a\x00", "++"]
)
def test_invalid_topic_filters(text: str) -> None:
    with pytest.raises(TopicError):
        validate_topic_filter(text)
    with pytest.raises(TopicError):
        parse_topic_filter(text)


@pytest.mark.parametrize(
    ("text", "group", "topic_filter"),
    [
        ("$share/g/a/b", "g", "a/b"),
        ("$share/group-1/#", "group-1", "#"),
        ("$share/g/+/x", "g", "+/x"),
        ("$share/g//a", "g", "/a"),
    ],
)
def test_shared_subscriptions(text: str, group: str, topic_filter: str) -> None:
    parsed = parse_topic_filter(text)
    assert parsed == TopicFilter(topic_filter, group)
    assert parsed.is_shared


@pytest.mark.parametrize(
    "text",
    ["$share/", "$share/g", "$share/g/", "$share//a", "$share/g+/a", "$share/#/a", "$share/g/a#"],
)
def test_invalid_shared_subscriptions(text: str) -> None:
    with pytest.raises(TopicError):
        parse_topic_filter(text)


def test_share_prefix_is_case_sensitive() -> None:
    assert parse_topic_filter("$SHARE/g/a") == TopicFilter("$SHARE/g/a")


def test_has_wildcards() -> None:
    assert parse_topic_filter("a/+").has_wildcards
    assert not parse_topic_filter("$share/g/a").has_wildcards


@pytest.mark.parametrize(
    ("topic", "key", "rabbit_key"),
    [
        ("a/b/c", "a.b.c", "a.b.c"),
        ("a", "a", "a"),
        ("/a/", ".a.", ".a."),
        ("a//b", "a..b", "a..b"),
        ("v1.2/data", "v1/2.data", "v1.2.data"),
        ("spBv1.0/g/NDATA/n", "spBv1/0.g.NDATA.n", "spBv1.0.g.NDATA.n"),
    ],
)
def test_topic_to_routing_key(topic: str, key: str, rabbit_key: str) -> None:
    assert mqtt_to_amqp(topic) == key
    assert mqtt_to_amqp(topic, swap_dots=False) == rabbit_key
    assert amqp_to_mqtt(key) == topic


@pytest.mark.parametrize(
    ("topic_filter", "binding_key"),
    [("a/+/c", "a.*.c"), ("#", "#"), ("a/#", "a.#"), ("+/+", "*.*"), ("v1.2/+", "v1/2.*")],
)
def test_filter_to_binding_key(topic_filter: str, binding_key: str) -> None:
    assert filter_to_binding_key(topic_filter) == binding_key
    assert binding_key_to_filter(binding_key) == topic_filter


def test_rabbitmq_mapping_loses_dots_on_the_way_back() -> None:
    assert amqp_to_mqtt(mqtt_to_amqp("v1.2/x", swap_dots=False), swap_dots=False) == "v1/2/x"


def test_routing_keys_keep_stars_literal() -> None:
    """A routing key has no wildcards: "*" in it is a plain character of a topic name."""
    assert amqp_to_mqtt("a.*") == "a/*"
    assert mqtt_to_amqp("a/*") == "a.*"


NAMES = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00+#"), min_size=1)


@given(NAMES)
def test_name_mapping_is_a_bijection(topic: str) -> None:
    assert amqp_to_mqtt(mqtt_to_amqp(topic)) == topic


@given(st.lists(st.sampled_from(["a", "b.c", "", "+", "x y"]), min_size=1).map("/".join))
def test_filter_mapping_round_trips(topic_filter: str) -> None:
    assert binding_key_to_filter(filter_to_binding_key(topic_filter)) == topic_filter
