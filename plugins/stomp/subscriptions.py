"""A connection's subscriptions: SUBSCRIBE, UNSUBSCRIBE, MESSAGE frames, ACK and NACK.

`Subscriptions` is the connection's `DeliverySink`: the kernel calls `deliver` synchronously
from its dispatch loop (whichever connection's publish caused it), and it encodes the MESSAGE
frame straight into the connection's output. Each subscription is one kernel consumer whose
tag is the subscription id.

Acknowledgement modes (STOMP 1.2, as RabbitMQ implements them):
- `auto`: the server settles a message when it sends it (a no-ack consumer);
- `client`: an ACK or NACK settles the message it names and every earlier unsettled message
  of the same subscription (cumulative);
- `client-individual`: one message at a time.
`prefetch-count` caps the unsettled messages of a subscription (0: no cap). NACK requeues
unless it carries `requeue:false` (then the message is dead-lettered or dropped), RabbitMQ's
default. Messages left unsettled by an UNSUBSCRIBE can still be settled; everything unsettled
when the connection ends goes back to its queue, marked redelivered.

Message ids: `message-id` (and in 1.2 the `ack` header, which has the same value) is
`<session id>@@<delivery number>`, unique per delivery; 1.0 and 1.1 clients acknowledge with
`message-id`, 1.2 clients with `id`.

A SUBSCRIBE that asks for a receipt gets it before any MESSAGE of the subscription, as a
client reading frames in order expects (the queue may already hold messages: a durable
subscription's, a work queue's). Until the session sends that RECEIPT, which may wait behind
earlier receipts, the subscription is held: its consumer is suspended, and the one delivery
the queue can make before it sees that (inside `add_consumer`) is encoded and kept, then sent
right after the RECEIPT (`release_held`).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import attrs

from herald.core.auth import PermissionKind
from herald.core.errors import LocalProtocolError
from herald.plugins.stomp.codec import Frame
from herald.plugins.stomp.destinations import (
    Destination,
    Kind,
    declaration,
    format_destination,
    is_durable_subscription,
    parse_boolean,
    parse_destination,
)
from herald.plugins.stomp.errors import FrameError
from herald.plugins.stomp.message_codec import (
    PROTOCOL,
    SERVER_HEADERS,
    delivery_parts,
    stored_block,
)
from herald.plugins.stomp.message_frames import (
    destination_line,
    message_frame,
    subscription_prefix,
)
from herald.plugins.stomp.queues import ensure_queue, existing_queue, subscription_queue

if TYPE_CHECKING:
    from herald.core.consumer import Consumer
    from herald.core.queue import Queue
    from herald.core.queue_entry import QueueEntry
    from herald.plugins.stomp.session import Session

log = logging.getLogger(__name__)

TEMP_QUEUE_PREFIX = Kind.TEMP_QUEUE.value
_MESSAGE_OVERHEAD = 128  # the server's headers of one MESSAGE frame, roughly


class AckMode(enum.Enum):
    AUTO = "auto"
    CLIENT = "client"
    CLIENT_INDIVIDUAL = "client-individual"


_AUTO: Final = AckMode.AUTO  # an Enum member read from its class costs a lookup per message
_CLIENT: Final = AckMode.CLIENT


@attrs.define(slots=True, eq=False)
class Subscription:
    id: str
    header: str | None
    """The `subscription` header of its MESSAGEs (None: a 1.0 SUBSCRIBE without an id)."""
    destination: Destination
    ack: AckMode
    queue: Queue
    durable: bool = False
    consumer: Consumer | None = None
    unacked: dict[str, QueueEntry] = attrs.field(factory=dict)
    """Unsettled deliveries by message id, in delivery order."""
    prefix: bytes | None = None
    """Its MESSAGE frames' command and `subscription` lines (None: no fast path)."""
    held: list[Callable[[], None]] | None = None
    """While its SUBSCRIBE's RECEIPT is not out: the sends of MESSAGE frames delivered
    meanwhile (None: not held)."""


class Subscriptions:
    """One connection's subscriptions and unsettled deliveries (its `DeliverySink`)."""

    __slots__ = ("_next", "by_id", "pending", "session")  # one per connection

    protocol = PROTOCOL

    def __init__(self, session: Session) -> None:
        self.session = session
        self.by_id: dict[str, Subscription] = {}
        self.pending: dict[str, Subscription] = {}
        """Unsettled message ids, to the subscription that delivered them."""
        self._next = 0

    def describe(self) -> list[Mapping[str, Any]]:
        """The subscriptions as the management API shows them (`Connection.channels`)."""
        return [
            {
                "number": number,
                "id": sub.id,
                "destination": sub.destination.kind.value
                + sub.destination.name
                + (f"/{sub.destination.routing_key}" if sub.destination.routing_key else ""),
                "ack": sub.ack.value,
                "queue": sub.queue.name,
                "durable": sub.durable,
                "unacked": len(sub.unacked),
            }
            for number, sub in enumerate(self.by_id.values(), 1)
        ]

    # -- SUBSCRIBE / UNSUBSCRIBE -------------------------------------------------------------
    def subscribe(self, frame: Frame) -> Callable[[], None] | None:
        """Start the subscription `frame` asks for. With a `receipt` header the subscription
        is held until that RECEIPT is out: the result is what to call once it is."""
        session = self.session
        destination = parse_destination(frame.get("destination"), "SUBSCRIBE")
        if destination.kind in (Kind.TEMP_QUEUE, Kind.REPLY_QUEUE):
            raise FrameError(
                "Invalid destination",
                f"cannot SUBSCRIBE to '{destination}': replies to a {TEMP_QUEUE_PREFIX} "
                "reply-to arrive without a subscription",
            )
        sub_id, header = self._subscription_id(frame, "SUBSCRIBE")
        if sub_id.startswith(TEMP_QUEUE_PREFIX):
            raise FrameError(
                "Invalid id", f"a subscription id may not start with {TEMP_QUEUE_PREFIX}"
            )
        if sub_id in self.by_id:
            raise FrameError(
                "Duplicated subscription identifier",
                f"a subscription identified by '{sub_id}' already exists on this connection",
            )
        durable = destination.binds and is_durable_subscription(frame.headers)
        if durable and frame.get("id") is None:
            raise FrameError("Missing header", "header 'id' is required for durable subscriptions")
        ack = self._ack_mode(frame.get("ack", "auto"))
        prefetch = self._integer(frame, "prefetch-count", session.config.default_prefetch)
        decl = declaration(destination, frame.headers, subscribe=True)
        if destination.kind is Kind.QUEUE:
            queue = ensure_queue(session, destination.name, decl)
        elif destination.kind is Kind.AMQ_QUEUE:
            queue = existing_queue(session, destination.name)
        else:
            queue = subscription_queue(
                session, destination, decl, sub_id, frame.get("x-queue-name")
            )
        session.authorize(PermissionKind.READ, "queue", queue.name)
        arguments = {}
        if frame.get("x-priority") is not None:
            arguments["x-priority"] = self._integer(frame, "x-priority", 0, minimum=None)
        sub = Subscription(sub_id, header, destination, ack, queue, durable)
        if frame.get("receipt") is not None:
            sub.held = []
        self._start(sub, prefetch, arguments)
        return None if sub.held is None else partial(self.release_held, sub)

    def subscribe_reply(self, sub_id: str, queue: Queue) -> None:
        """The implicit subscription of a `/temp-queue/` reply queue (auto acknowledgement)."""
        destination = Destination(Kind.QUEUE, queue.name)
        self._start(Subscription(sub_id, sub_id, destination, AckMode.AUTO, queue), 0, {})

    def _start(self, sub: Subscription, prefetch: int, arguments: dict[str, int]) -> None:
        session = self.session
        sub.prefix = subscription_prefix(sub.header, session.version)
        self.by_id[sub.id] = sub  # deliveries can start inside add_consumer
        try:
            sub.consumer = sub.queue.add_consumer(
                sub.id,
                self,
                owner=session.connection,
                no_ack=sub.ack is AckMode.AUTO,
                prefetch_count=prefetch,
                arguments=arguments or None,
            )
        except BaseException:
            del self.by_id[sub.id]
            raise
        if session.transport_full or sub.held is not None:
            sub.consumer.suspend()

    def release_held(self, sub: Subscription) -> None:
        """`sub`'s SUBSCRIBE receipt is out: send what was delivered meanwhile, and let the
        queue push again (unless the socket is full, or the subscription is gone)."""
        held, sub.held = sub.held, None
        if held is None:
            return  # the connection ended first: `release` settled everything
        for send in held:
            send()
        consumer = sub.consumer
        if (
            consumer is not None
            and self.by_id.get(sub.id) is sub
            and not self.session.transport_full
        ):
            consumer.resume()

    def unsubscribe(self, frame: Frame) -> None:
        sub_id, _ = self._subscription_id(frame, "UNSUBSCRIBE")
        sub = self.by_id.pop(sub_id, None)
        if sub is None:
            raise FrameError(
                "No subscription found",
                f"UNSUBSCRIBE must name an existing subscription; '{sub_id}' is not one",
            )
        if sub.consumer is not None:
            # Its unsettled deliveries stay with the client, to be settled or released later.
            sub.queue.remove_consumer(sub.consumer, requeue=False)
        if sub.durable and is_durable_subscription(frame.headers):
            # As RabbitMQ: a durable subscription's queue goes only when the client says so.
            self.session.authorize(PermissionKind.CONFIGURE, "queue", sub.queue.name)
            self.session.vhost.delete_queue(sub.queue.name, owner=self.session.connection)

    def _subscription_id(self, frame: Frame, command: str) -> tuple[str, str | None]:
        """(id, subscription header): a 1.0 client may name a subscription by destination."""
        sub_id = frame.get("id")
        if sub_id is not None:
            return sub_id, sub_id
        if self.session.version == "1.0":
            destination = frame.get("destination")
            if destination is not None:
                return destination, None
            raise FrameError(
                "Missing destination or id",
                f"{command} must include a 'destination' or 'id' header",
            )
        raise FrameError("Missing header", f"{command} must include an 'id' header")

    @staticmethod
    def _ack_mode(value: str) -> AckMode:
        try:
            return AckMode(value.strip())
        except ValueError:
            raise FrameError(
                "Invalid header", f"ack must be auto, client or client-individual, got '{value}'"
            ) from None

    @staticmethod
    def _integer(frame: Frame, name: str, default: int, minimum: int | None = 0) -> int:
        value = frame.get(name)
        if value is None:
            return default
        try:
            number = int(value.strip())
        except ValueError:
            number = None
        if number is None or (minimum is not None and number < minimum):
            raise FrameError("Invalid header", f"header '{name}' must be an integer, got '{value}'")
        return number

    # -- DeliverySink ------------------------------------------------------------------------
    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        session = self.session
        sub = self.by_id.get(consumer.tag)
        if sub is None or not session.can_send:
            return  # closing: an acknowledged-mode entry stays unsettled and is released
        self._next += 1
        message_id = f"{session.session_id}@@{self._next}"
        message = entry.message
        version = session.codec.version
        acked = sub.ack is not _AUTO
        if acked:
            sub.unacked[message_id] = entry
            self.pending[message_id] = sub
        prefix = sub.prefix
        if prefix is not None:
            parts = stored_block(message, version)
            destination = destination_line(message.exchange, message.routing_key, version)
            if parts is not None and destination is not None:
                block, body = parts
                data = message_frame(
                    prefix,
                    destination,
                    message_id,
                    entry.delivery_count > 0,
                    acked and version == "1.2",
                    block,
                    body,
                )
                size = len(body) + _MESSAGE_OVERHEAD
                if sub.held is None:
                    session.send_encoded_message(data, size)
                else:
                    _hold(sub.held, consumer, partial(session.send_encoded_message, data, size))
                return
        headers = []
        if sub.header is not None:
            headers.append(("subscription", sub.header))
        headers.append(("destination", format_destination(message.exchange, message.routing_key)))
        headers.append(("message-id", message_id))
        if entry.delivery_count:
            headers.append(("redelivered", "true"))
        if acked and version == "1.2":
            headers.append(("ack", message_id))
        stored, body = delivery_parts(message, session.codecs)
        headers.extend(pair for pair in stored if pair[0] not in SERVER_HEADERS)
        frame = Frame("MESSAGE", tuple(headers), body)
        size = len(body) + _MESSAGE_OVERHEAD
        if sub.held is None:
            self._send_frame(sub, frame, size)
        else:
            _hold(sub.held, consumer, partial(self._send_frame, sub, frame, size))

    def _send_frame(self, sub: Subscription, frame: Frame, size: int) -> None:
        session = self.session
        try:
            session.send_message(frame, size)
        except LocalProtocolError:
            # A header this version cannot carry (a line break in STOMP 1.0): leave it out.
            kept = tuple((n, v) for n, v in frame.headers if _plain(n, v))
            try:
                session.send_message(Frame("MESSAGE", kept, frame.body), size)
            except LocalProtocolError as exc:  # an exception here would break the dispatch loop
                log.warning("cannot send a message to STOMP subscription %r: %s", sub.id, exc)

    def consumer_cancelled(self, consumer: Consumer) -> None:
        """The queue went away (deleted by someone else): the client must hear of it."""
        sub = self.by_id.pop(consumer.tag, None)
        if sub is not None and self.session.can_send:
            self.session.fail(
                "Server cancelled subscription",
                f"queue '{sub.queue.name}' was deleted; no more messages will be delivered "
                f"for subscription '{sub.id}' ({sub.destination})",
            )

    # -- ACK / NACK --------------------------------------------------------------------------
    def settle(self, frame: Frame) -> None:
        """ACK or NACK a message (and in `client` mode every earlier one)."""
        command = frame.command
        id_header = "id" if self.session.codec.version == "1.2" else "message-id"
        message_id = frame.get(id_header)
        if message_id is None:
            raise FrameError("Missing header", f"{command} must include the '{id_header}' header")
        sub = self.pending.get(message_id)
        if sub is None:
            raise FrameError(
                "Message not found",
                f"{command}: '{message_id}' names no unacknowledged message of this connection",
            )
        text = frame.get("requeue")
        requeue = True if text is None else parse_boolean("requeue", text)
        if sub.ack is not _CLIENT:  # one message
            entry = sub.unacked.pop(message_id)
            del self.pending[message_id]
            if command == "ACK":
                entry.queue.ack(entry)
            else:
                entry.queue.reject(entry, requeue=requeue)
            return
        taken = []  # client mode: this message and every earlier one of its subscription
        for pending_id in sub.unacked:
            taken.append(pending_id)
            if pending_id == message_id:
                break
        for pending_id in taken:
            entry = sub.unacked.pop(pending_id)
            del self.pending[pending_id]
            if command == "ACK":
                entry.queue.ack(entry)
            else:
                entry.queue.reject(entry, requeue=requeue)

    # -- flow and the end ----------------------------------------------------------------------
    def apply_suspension(self, transport_full: bool) -> None:
        """Pause every subscription while the socket is full; resume when it drained (but
        those held until their SUBSCRIBE's receipt is out)."""
        for sub in list(self.by_id.values()):
            if sub.consumer is None or sub.held is not None:
                continue
            if transport_full:
                sub.consumer.suspend()
            else:
                sub.consumer.resume()

    def release(self) -> None:
        """The connection ends: cancel every subscription, requeue what is unsettled."""
        subs, self.by_id = list(self.by_id.values()), {}
        for sub in subs:
            sub.held = None  # never sent: the deliveries are settled (auto) or requeued below
            if sub.consumer is not None:
                sub.queue.remove_consumer(sub.consumer, requeue=True)
        holders = {}
        for sub in self.pending.values():
            for entry in sub.unacked.values():
                if entry.consumer is not None:
                    holders[id(entry.consumer)] = entry.consumer
            sub.unacked.clear()
        self.pending.clear()
        for holder in holders.values():
            holder.queue.release(holder)


def _hold(held: list[Callable[[], None]], consumer: Consumer, send: Callable[[], None]) -> None:
    """Keep a MESSAGE of a held subscription (in its `held`) for `release_held`; the queue
    stops pushing to it, so at most the one delivery it made inside `add_consumer` is kept."""
    held.append(send)
    consumer.suspend()


def _plain(name: str, value: str) -> bool:
    return ":" not in name and not any(c in name or c in value for c in "\r\n")
