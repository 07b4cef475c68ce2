"""A delivery sink that records what a consumer receives (a real sink, not a mock)."""

from __future__ import annotations

from typing import Any

from herald.core.consumer import Consumer
from herald.core.message import NATIVE_PROTOCOL, Message, Properties
from herald.core.queue import QueueEntry


class RecordingSink:
    protocol = NATIVE_PROTOCOL

    def __init__(self, *, auto_ack: bool = False) -> None:
        self.entries: list[QueueEntry] = []
        self.cancelled: list[Consumer] = []
        self.auto_ack = auto_ack

    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        self.entries.append(entry)
        if self.auto_ack and not consumer.no_ack:
            entry.queue.ack(entry)

    def consumer_cancelled(self, consumer: Consumer) -> None:
        self.cancelled.append(consumer)

    @property
    def bodies(self) -> list[bytes]:
        return [body(e) for e in self.entries]

    def ack_all(self) -> None:
        """Ack everything received so far, in order (acks may deliver more)."""
        pending, self.entries = self.entries, []
        for entry in pending:
            entry.queue.ack(entry)

    def take(self) -> list[QueueEntry]:
        entries, self.entries = self.entries, []
        return entries


def body(item: QueueEntry | Message) -> bytes:
    """The body of a native message, or of the message in a queue entry."""
    message = item.message if isinstance(item, QueueEntry) else item
    assert message.content is not None
    return message.content.body


def msg(
    text: str | bytes,
    routing_key: str = "",
    exchange: str = "",
    **properties: Any,  # Properties' fields
) -> Message:
    data = text.encode() if isinstance(text, str) else text
    return Message.native(
        data, exchange=exchange, routing_key=routing_key, properties=Properties(**properties)
    )
