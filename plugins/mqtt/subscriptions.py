"""A session's subscriptions: what each asked for, and which of them a delivered topic matches.

The kernel routes by AMQP binding keys, which know neither MQTT's `$`-topic rule nor
subscription options, so the session checks each delivery here: a topic starting with `$` is
not matched by a filter starting with a wildcard (MQTT 5.0 section 4.7.2), no-local
subscriptions skip the client's own messages, and overlapping subscriptions are merged into
one delivery at their highest QoS with every subscription identifier (section 3.3.4).
Pure: no kernel, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from herald.plugins.mqtt.codec import RetainHandling, SubscriptionOptions
from herald.plugins.mqtt.codec.topics import TopicFilter, filter_to_binding_key, parse_topic_filter


def topic_matches(topic_filter: str, topic: str) -> bool:
    """Whether a plain (non-shared) MQTT filter matches a topic name."""
    if topic[:1] == "$" and topic_filter[:1] in ("+", "#"):
        return False
    if topic_filter == topic:
        return True
    levels = topic.split("/")
    count = len(levels)
    for index, level in enumerate(topic_filter.split("/")):
        if level == "#":
            return True  # "a/#" matches "a" too
        if index >= count or (level != "+" and level != levels[index]):
            return False
    return len(topic_filter.split("/")) == count


def filter_covers(outer: str, inner: str) -> bool:
    """Whether every topic the filter `inner` matches is matched by the filter `outer`
    ("a/#" covers "a/b/+" and "a"; "a/+" covers "a/b" but not "a/#")."""
    levels = inner.split("/")
    for index, level in enumerate(outer.split("/")):
        if level == "#":
            return True
        if index >= len(levels) or levels[index] == "#":
            return False
        if level != "+" and level != levels[index]:
            return False
    return len(outer.split("/")) == len(levels)


@attrs.frozen
class Subscription:
    """One SUBSCRIBE entry, as granted."""

    text: str
    """The filter as the client wrote it (with any `$share/{group}/` prefix): its identity."""
    parsed: TopicFilter
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = RetainHandling.SEND_ON_SUBSCRIBE
    identifier: int | None = None

    @classmethod
    def from_request(
        cls, text: str, options: SubscriptionOptions, identifier: int | None
    ) -> Subscription:
        """Raises TopicError for an invalid filter."""
        return cls(
            text,
            parse_topic_filter(text),
            options.qos,
            options.no_local,
            options.retain_as_published,
            options.retain_handling,
            identifier,
        )

    @property
    def shared(self) -> bool:
        return self.parsed.share_group is not None

    @property
    def binding_key(self) -> str:
        return filter_to_binding_key(self.parsed.filter)

    def matches(self, topic: str) -> bool:
        return topic_matches(self.parsed.filter, topic)

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"filter": self.text, "qos": self.qos}
        if self.no_local:
            record["no_local"] = True
        if self.retain_as_published:
            record["retain_as_published"] = True
        if self.retain_handling:
            record["retain_handling"] = int(self.retain_handling)
        if self.identifier is not None:
            record["identifier"] = self.identifier
        return record

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Subscription:
        options = SubscriptionOptions(
            record.get("qos", 0),
            record.get("no_local", False),
            record.get("retain_as_published", False),
            record.get("retain_handling", 0),
        )
        return cls.from_request(record["filter"], options, record.get("identifier"))


@attrs.frozen
class Match:
    """How to deliver one message to a session: merged over its matching subscriptions."""

    qos: int
    retain_as_published: bool
    identifiers: tuple[int, ...]


_MATCHES_MAX = 1024
_UNKNOWN: Any = object()


class SubscriptionSet:
    """A session's subscriptions by filter text; matches topics for its own queue.

    `match` results for other clients' messages are remembered per topic (every delivery of a
    topic asks again), bounded, and forgotten whenever a subscription changes.
    """

    def __init__(self, subscriptions: Mapping[str, Subscription] | None = None) -> None:
        self._all: dict[str, Subscription] = {}
        self._exact: dict[str, Subscription] = {}  # non-shared filters without wildcards
        self._wild: dict[str, Subscription] = {}  # non-shared filters with wildcards
        self._matches: dict[str, Match | None] = {}
        for subscription in (subscriptions or {}).values():
            self.add(subscription)

    def __len__(self) -> int:
        return len(self._all)

    def __iter__(self) -> Iterator[Subscription]:
        return iter(list(self._all.values()))

    def __contains__(self, text: object) -> bool:
        return text in self._all

    def get(self, text: str) -> Subscription | None:
        return self._all.get(text)

    def add(self, subscription: Subscription) -> Subscription | None:
        """Add or replace; returns the subscription it replaced."""
        old = self._all.get(subscription.text)
        self._all[subscription.text] = subscription
        self._matches.clear()
        if not subscription.shared:
            table = self._wild if subscription.parsed.has_wildcards else self._exact
            table[subscription.parsed.filter] = subscription
        return old

    def remove(self, text: str) -> Subscription | None:
        subscription = self._all.pop(text, None)
        self._matches.clear()
        if subscription is not None and not subscription.shared:
            table = self._wild if subscription.parsed.has_wildcards else self._exact
            table.pop(subscription.parsed.filter, None)
        return subscription

    def binding_users(self, binding_key: str) -> int:
        """How many non-shared subscriptions use `binding_key` ("a/+" and "a/*" share one)."""
        return sum(
            1 for s in (*self._exact.values(), *self._wild.values()) if s.binding_key == binding_key
        )

    @property
    def has_own_queue_subscriptions(self) -> bool:
        return bool(self._exact or self._wild)

    def match(self, topic: str, own_message: bool) -> Match | None:
        """How to deliver `topic` to the non-shared subscriptions, or None if none applies.

        `own_message`: the message was published by this client (no-local subscriptions skip it).
        """
        if own_message:
            return self._match(topic, True)
        matches = self._matches
        match = matches.get(topic, _UNKNOWN)
        if match is _UNKNOWN:
            if len(matches) >= _MATCHES_MAX:
                matches.clear()
            match = matches[topic] = self._match(topic, False)
        return match

    def _match(self, topic: str, own_message: bool) -> Match | None:
        found = []
        exact = self._exact.get(topic)
        if exact is not None:
            found.append(exact)
        for subscription in self._wild.values():
            if subscription.matches(topic):
                found.append(subscription)
        return merge(found, own_message)


def merge(subscriptions: list[Subscription], own_message: bool) -> Match | None:
    """One delivery for several matching subscriptions (highest QoS, all identifiers)."""
    if own_message:
        subscriptions = [s for s in subscriptions if not s.no_local]
    if not subscriptions:
        return None
    if len(subscriptions) == 1:
        only = subscriptions[0]
        ids = (only.identifier,) if only.identifier is not None else ()
        return Match(only.qos, only.retain_as_published, ids)
    return Match(
        max(s.qos for s in subscriptions),
        any(s.retain_as_published for s in subscriptions),
        tuple(sorted({s.identifier for s in subscriptions if s.identifier is not None})),
    )
