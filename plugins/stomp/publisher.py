"""SEND: from a frame to a published kernel message.

The destination says where the message goes (destinations.py); a `/queue/` destination
declares its queue first. The frame's headers, less those that describe the frame itself, are
the message's stored headers (message_codec.py) and come back in the MESSAGE frames it causes.

`reply-to: /temp-queue/t` is replaced, as in RabbitMQ, by `/reply-queue/<queue>` where
<queue> is an exclusive, server-named queue of this connection, created on first use of t and
consumed at once by an implicit subscription whose id (and MESSAGE `subscription` header) is
`/temp-queue/t`. A STOMP responder SENDs its answer to that `/reply-queue/` destination; an
AMQP responder sees the bare queue name as reply_to and publishes to it through the default
exchange.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from herald.core.auth import PermissionKind
from herald.plugins.stomp.destinations import Kind, declaration, parse_destination
from herald.plugins.stomp.errors import FrameError
from herald.plugins.stomp.message_codec import FRAME_HEADERS, kernel_message
from herald.plugins.stomp.queues import ensure_queue, reply_queue

if TYPE_CHECKING:
    from herald.core.vhost import PublishResult
    from herald.plugins.stomp.codec import Frame
    from herald.plugins.stomp.session import Session

_TEMP_QUEUE = Kind.TEMP_QUEUE.value
_REPLY_QUEUE = Kind.REPLY_QUEUE.value
# Enum members read from their classes cost a lookup each, per SEND.
_TEMP_QUEUE_KIND = Kind.TEMP_QUEUE
_QUEUE_KIND = Kind.QUEUE
_WRITE = PermissionKind.WRITE


class Publisher:
    """A connection's SENDs and its `/temp-queue/` reply queues."""

    __slots__ = ("reply_queues", "session")  # one per connection

    def __init__(self, session: Session) -> None:
        self.session = session
        self.reply_queues: dict[str, str] = {}
        """Temp-queue ids to the names of their reply queues."""

    def send(self, frame: Frame) -> PublishResult:
        session = self.session
        destination = parse_destination(frame.get("destination"), "SEND")
        kind = destination.kind
        if kind is _TEMP_QUEUE_KIND:
            raise FrameError(
                "Invalid destination",
                f"'{destination}': a {_TEMP_QUEUE} destination is only valid in a reply-to header",
            )
        if kind is _QUEUE_KIND:
            ensure_queue(
                session, destination.name, declaration(destination, frame.headers, subscribe=False)
            )
        headers = tuple([pair for pair in frame.headers if pair[0] not in FRAME_HEADERS])
        if headers:
            reply_to = frame.get("reply-to")
            if reply_to is not None and reply_to.startswith(_TEMP_QUEUE):
                rewritten = self._reply_to(reply_to)
                headers = tuple((n, rewritten if n == "reply-to" else v) for n, v in headers)
        exchange = destination.exchange
        session.authorize(_WRITE, "exchange", exchange)
        message = kernel_message(headers, frame.body, exchange, destination.key)
        session.published = True
        return session.vhost.publish(message)

    def _reply_to(self, reply_to: str) -> str:
        temp_id = parse_destination(reply_to).name
        name = self.reply_queues.get(temp_id)
        if name is None:
            queue = reply_queue(self.session)
            self.session.subscriptions.subscribe_reply(reply_to, queue)
            name = self.reply_queues[temp_id] = queue.name
        return _REPLY_QUEUE + name
