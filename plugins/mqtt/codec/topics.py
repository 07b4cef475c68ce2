"""MQTT topic names and filters: validation, shared subscriptions, and the AMQP mapping.

Rules (MQTT 5.0 section 4.7, 3.1.1 section 4.7): names and filters are at least one character,
at most 65,535 UTF-8 bytes, without U+0000; a topic name has no wildcard; in a filter "+" fills
a whole level and "#" is the whole last level. `$share/{group}/{filter}` is a shared
subscription (MQTT 5.0 section 4.8.2): the group is non-empty without "/", "+" or "#", and the
filter after it is a valid, non-empty filter.

AMQP mapping: MQTT publishes to a topic exchange (`amq.topic`), so a topic name becomes a
routing key and a filter a binding key: "/" -> ".", and in filters "+" -> "*", "#" stays "#"
(a topic name has no wildcards, and an AMQP routing key none either). RabbitMQ's mqtt
plugin stops there (rabbit_mqtt_util:to_amqp/1), so a "." inside an MQTT level splits the AMQP
word and does not survive the way back. With `swap_dots=True` (the default here) "." becomes
"/" as well, which makes the mapping a bijection: "v1.2/data" <-> "v1/2.data". Pass
`swap_dots=False` for RabbitMQ's exact keys. A literal "*" in an MQTT filter level becomes an
AMQP wildcard either way (RabbitMQ has the same ambiguity).
"""

from __future__ import annotations

from typing import Final

import attrs

MAX_TOPIC_BYTES: Final = 65_535
SHARE_PREFIX: Final = "$share/"
SYS_LEVEL: Final = "$SYS"

_NAME_TO_AMQP: Final = {True: str.maketrans("/.", "./"), False: str.maketrans("/", ".")}
_FILTER_TO_AMQP: Final = {True: str.maketrans("/.+", "./*"), False: str.maketrans("/+", ".*")}
_KEY_TO_MQTT: Final = {True: str.maketrans("./", "/."), False: str.maketrans(".", "/")}
_BINDING_TO_MQTT: Final = {True: str.maketrans("./*", "/.+"), False: str.maketrans(".*", "/+")}


class TopicError(ValueError):
    """A topic name or filter breaks MQTT's rules. A session answers a bad filter with SUBACK
    0x8F (Topic Filter invalid) and a refused name with 0x90 (Topic Name invalid)."""


@attrs.frozen
class TopicFilter:
    """A parsed SUBSCRIBE filter: `filter` without any `$share/{group}/` prefix."""

    filter: str
    share_group: str | None = None

    @property
    def is_shared(self) -> bool:
        return self.share_group is not None

    @property
    def has_wildcards(self) -> bool:
        return "+" in self.filter or "#" in self.filter


def _check_text(text: str, what: str) -> None:
    if not text:
        raise TopicError(f"a {what} must be at least one character")
    if "\x00" in text:
        raise TopicError(f"{what} {text!r} contains U+0000")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise TopicError(f"{what} {text!r} is not encodable UTF-8") from None
    if size > MAX_TOPIC_BYTES:
        raise TopicError(f"{what} of {size} bytes exceeds {MAX_TOPIC_BYTES}")


def validate_topic_name(name: str) -> None:
    """Raise TopicError unless `name` is a valid PUBLISH topic name."""
    _check_text(name, "topic name")
    if "+" in name or "#" in name:
        raise TopicError(f"topic name {name!r} contains a wildcard")


def validate_topic_filter(text: str) -> None:
    """Raise TopicError unless `text` is a valid plain (non-shared) topic filter."""
    _check_text(text, "topic filter")
    if "+" not in text and "#" not in text:
        return
    levels = text.split("/")
    last = len(levels) - 1
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != last):
            raise TopicError(f"'#' must be the whole last level of {text!r}")
        if "+" in level and level != "+":
            raise TopicError(f"'+' must be a whole level of {text!r}")


def is_sys_topic(name: str) -> bool:
    """Whether a topic name is under `$SYS`, the server's own topics (MQTT 5.0 section 4.7.2):
    its first level is exactly "$SYS" ("$SYS", "$SYS/a"; not "$SYSTEM/a")."""
    return name.startswith(SYS_LEVEL) and (len(name) == 4 or name[4] == "/")


def parse_topic_filter(text: str) -> TopicFilter:
    """Validate a SUBSCRIBE/UNSUBSCRIBE filter and split off a `$share/{group}/` prefix."""
    if not text.startswith(SHARE_PREFIX):
        validate_topic_filter(text)
        return TopicFilter(text)
    group, sep, rest = text[len(SHARE_PREFIX) :].partition("/")
    if not group or "+" in group or "#" in group:
        raise TopicError(f"shared subscription {text!r} needs a share name without wildcards")
    if not sep or not rest:
        raise TopicError(f"shared subscription {text!r} has no topic filter")
    validate_topic_filter(rest)
    return TopicFilter(rest, group)


def mqtt_to_amqp(topic: str, *, swap_dots: bool = True) -> str:
    """The AMQP routing key for an MQTT topic name ("a/b/c" -> "a.b.c")."""
    return topic.translate(_NAME_TO_AMQP[swap_dots])


def filter_to_binding_key(topic_filter: str, *, swap_dots: bool = True) -> str:
    """The AMQP binding key for a plain MQTT filter ("a/+/#" -> "a.*.#"); strip `$share/`
    first (`parse_topic_filter(...).filter`)."""
    return topic_filter.translate(_FILTER_TO_AMQP[swap_dots])


def amqp_to_mqtt(routing_key: str, *, swap_dots: bool = True) -> str:
    """The MQTT topic name a subscriber sees for an AMQP routing key ("a.b.c" -> "a/b/c").

    A routing key may hold "+" or "#" (AMQP keys have no wildcards), which no MQTT topic name
    may: check the result with `validate_topic_name` before delivering it."""
    return routing_key.translate(_KEY_TO_MQTT[swap_dots])


def binding_key_to_filter(binding_key: str, *, swap_dots: bool = True) -> str:
    """The MQTT filter for an AMQP binding key ("a.*.#" -> "a/+/#")."""
    return binding_key.translate(_BINDING_TO_MQTT[swap_dots])
