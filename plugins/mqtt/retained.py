"""Retained messages: the last retained PUBLISH of each topic, found by filter on SUBSCRIBE.

Kept in memory as a trie of topic levels, so a new subscription visits only the branches its
filter can match (not every retained topic), and, with `retain_store = "metadata"`, in the
store's metadata (kind "mqtt.retained", one record per topic: payload as base64, QoS, the
message's MQTT 5 properties, and its expiry as a wall-clock time), so they survive a restart.
An empty retained payload deletes the topic's message; an expired one is dropped when found.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from herald.plugins.mqtt.codec import Properties
from herald.plugins.mqtt.message_codec import properties_from_json, properties_to_json

if TYPE_CHECKING:
    from herald.core.store import Store

log = logging.getLogger(__name__)

KIND: Final = "mqtt.retained"


@attrs.frozen
class RetainedMessage:
    topic: str
    payload: bytes
    qos: int
    properties: Properties
    expires_at: float | None = None
    """Wall-clock time (time.time()) after which the message is gone; None: never."""

    def remaining_ms(self, now: float) -> int | None:
        if self.expires_at is None:
            return None
        return max(int((self.expires_at - now) * 1000), 0)

    def to_json(self, vhost: str) -> dict[str, Any]:
        return {
            "vhost": vhost,
            "topic": self.topic,
            "payload": base64.b64encode(self.payload).decode("ascii"),
            "qos": self.qos,
            "properties": properties_to_json(self.properties),
            "expires_at": self.expires_at,
        }

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> RetainedMessage:
        return cls(
            record["topic"],
            base64.b64decode(record["payload"]),
            record["qos"],
            properties_from_json(record.get("properties") or {}),
            record.get("expires_at"),
        )


@attrs.define(slots=True, eq=False)
class _Node:
    children: dict[str, _Node] = attrs.field(factory=dict)
    message: RetainedMessage | None = None


class RetainedStore:
    """The retained messages of one virtual host."""

    def __init__(self, vhost: str, store: Store | None) -> None:
        self.vhost = vhost
        self._store = store  # None: keep in memory only
        self._root = _Node()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def load(self, metadata: Mapping[str, Mapping[str, Any]]) -> None:
        """Read back the retained messages of this vhost (broker start)."""
        for key, record in metadata.get(KIND, {}).items():
            if record.get("vhost") != self.vhost:
                continue
            try:
                self._insert(RetainedMessage.from_json(record))
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("ignoring unreadable retained message %r: %s", key, exc)

    def get(self, topic: str) -> RetainedMessage | None:
        node: _Node | None = self._root
        for level in topic.split("/"):
            node = node.children.get(level) if node is not None else None
        return node.message if node is not None else None

    def put(self, message: RetainedMessage) -> int | None:
        """Retain `message` (an empty payload deletes); returns the store ticket, if any."""
        if not message.payload:
            self._delete(message.topic)
            return self._persist(message.topic, None)
        self._insert(message)
        return self._persist(message.topic, message.to_json(self.vhost))

    def match(self, topic_filter: str, now: float | None = None) -> list[RetainedMessage]:
        """The retained messages a plain filter matches, in topic order; drops expired ones."""
        now = time.time() if now is None else now
        found = []
        expired = []
        levels = topic_filter.split("/")
        for message in self._walk(self._root, levels, 0):
            if message.expires_at is not None and message.expires_at <= now:
                expired.append(message.topic)
            else:
                found.append(message)
        for topic in expired:
            self._delete(topic)
            self._persist(topic, None)
        found.sort(key=lambda m: m.topic)
        return found

    # -- internals ---------------------------------------------------------------------------
    def _walk(self, node: _Node, levels: list[str], depth: int) -> Iterator[RetainedMessage]:
        if depth == len(levels):
            if node.message is not None:
                yield node.message
            return
        level = levels[depth]
        if level == "#":
            # "#" matches the parent level too, and never a `$` topic from the top level.
            if node.message is not None and depth > 0:
                yield node.message
            yield from self._everything(node, top=depth == 0)
            return
        if level == "+":
            for name, child in node.children.items():
                if depth == 0 and name[:1] == "$":
                    continue
                yield from self._walk(child, levels, depth + 1)
            return
        below = node.children.get(level)
        if below is not None:
            yield from self._walk(below, levels, depth + 1)

    def _everything(self, node: _Node, *, top: bool) -> Iterator[RetainedMessage]:
        for name, child in node.children.items():
            if top and name[:1] == "$":
                continue
            if child.message is not None:
                yield child.message
            yield from self._everything(child, top=False)

    def _insert(self, message: RetainedMessage) -> None:
        node = self._root
        for level in message.topic.split("/"):
            node = node.children.setdefault(level, _Node())
        if node.message is None:
            self._count += 1
        node.message = message

    def _delete(self, topic: str) -> None:
        path = [self._root]
        for level in topic.split("/"):
            child = path[-1].children.get(level)
            if child is None:
                return
            path.append(child)
        if path[-1].message is None:
            return
        path[-1].message = None
        self._count -= 1
        levels = topic.split("/")
        for depth in range(len(levels), 0, -1):  # prune empty branches
            node = path[depth]
            if node.message is not None or node.children:
                break
            del path[depth - 1].children[levels[depth - 1]]

    def _persist(self, topic: str, record: dict[str, Any] | None) -> int | None:
        if self._store is None:
            return None
        key = json.dumps([self.vhost, topic], ensure_ascii=False)
        return self._store.put_metadata(KIND, key, record)
