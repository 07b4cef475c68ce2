"""The consuming side of a channel: consumers, delivery tags, acks, basic.get, qos, recover.

`ChannelConsumers` is the channel's `DeliverySink`: the kernel calls `deliver` synchronously
from its dispatch loop (whichever connection's publish caused it), and it encodes the
basic.deliver frames straight into the connection's output. Delivery tags count per channel;
`unacked` maps each tag of a delivery that needs an ack to its queue entry, in tag order, so
`multiple` acks take a prefix.

Prefetch follows RabbitMQ's per_consumer_qos: basic.qos with global=false sets the window of
consumers created afterwards; global=true sets one window shared by every consumer of the
channel (a `SharedLimit`, attached to each of them).

Direct reply-to (`amq.rabbitmq.reply-to`): consuming from the pseudo-queue creates a transient
exclusive auto-delete queue named `amq.rabbitmq.reply-to.<random>`, which requesters' replies
reach through the default exchange; see publisher.py for the reply_to rewrite.
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING

from herald.core.auth import PermissionKind
from herald.core.consumer import Consumer, SharedLimit
from herald.core.errors import LocalProtocolError, NotAllowed, PreconditionFailed
from herald.core.queue import Queue
from herald.plugins.amqp.codec.events import Delivery
from herald.plugins.amqp.codec.methods import (
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicQos,
    BasicQosOk,
    BasicRecover,
    BasicRecoverAsync,
    BasicRecoverOk,
    BasicReject,
)
from herald.plugins.amqp.message_codec import PROTOCOL, delivery_parts

if TYPE_CHECKING:
    from herald.core.queue_entry import QueueEntry
    from herald.plugins.amqp.channel import Channel

log = logging.getLogger(__name__)

REPLY_TO = "amq.rabbitmq.reply-to"
"""The direct reply-to pseudo-queue (RabbitMQ's name, which clients hard-code)."""

Settlement = list[tuple[int, "QueueEntry"]]


class ChannelConsumers:
    """A channel's consumers and unacknowledged deliveries."""

    protocol = PROTOCOL
    __slots__ = (
        "_held",
        "_holders",
        "by_tag",
        "channel",
        "flow_active",
        "next_tag",
        "prefetch_bytes",
        "prefetch_count",
        "reply_queue",
        "session",
        "shared",
        "unacked",
    )

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.session = channel.session
        self.by_tag: dict[str, Consumer] = {}
        self.unacked: dict[int, QueueEntry] = {}
        self.next_tag = 0
        self.prefetch_count = self.session.config.default_prefetch
        self.prefetch_bytes = 0
        self.shared = SharedLimit()
        self.flow_active = True
        self.reply_queue: Queue | None = None
        self._holders: dict[Queue, Consumer] = {}  # basic.get deliveries, per queue
        # Deliveries made by add_consumer, sent once consume-ok is out.
        self._held: list[tuple[Delivery, QueueEntry, int]] | None = None

    # -- qos and flow ------------------------------------------------------------------------
    def qos(self, method: BasicQos) -> None:
        if method.global_qos:
            self.shared.count_limit = method.prefetch_count
            self.shared.byte_limit = method.prefetch_size
            for consumer in list(self.shared.consumers):
                consumer.queue.dispatch()
        else:
            self.prefetch_count = method.prefetch_count
            self.prefetch_bytes = method.prefetch_size
        self.channel.reply(BasicQosOk())

    def set_flow(self, active: bool) -> None:
        self.flow_active = active
        self.apply_suspension(self.session.transport_full)

    def apply_suspension(self, transport_full: bool) -> None:
        """Suspend consumers while the socket is full or the client said channel.flow off."""
        paused = transport_full or not self.flow_active
        for consumer in list(self.by_tag.values()):
            if paused:
                consumer.suspend()
            else:
                consumer.resume()

    # -- consumers ---------------------------------------------------------------------------
    def consume(self, method: BasicConsume) -> None:
        session, channel = self.session, self.channel
        tag = method.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
        if tag in self.by_tag:
            raise NotAllowed(f"attempt to reuse consumer tag '{tag}'")
        if method.queue == REPLY_TO:
            queue = self._reply_queue(method)
        else:
            name = channel.queue_name(method.queue)
            channel.check(PermissionKind.READ, "queue", name)
            queue = session.vhost.get_queue(name, owner=session.connection)
        self._held = []
        try:
            consumer = queue.add_consumer(
                tag,
                self,
                owner=session.connection,
                no_ack=method.no_ack,
                exclusive=method.exclusive,
                prefetch_count=self.prefetch_count,
                prefetch_bytes=self.prefetch_bytes,
                limit=self.shared,
                arguments=method.arguments,
            )
        finally:
            held, self._held = self._held, None
        self.by_tag[tag] = consumer
        channel.reply(BasicConsumeOk(tag), method.nowait)
        for event, entry, delivery_tag in held:
            self._send(event, entry, delivery_tag, True)
        if session.transport_full or not self.flow_active:
            consumer.suspend()

    def _reply_queue(self, method: BasicConsume) -> Queue:
        if not method.no_ack:
            raise PreconditionFailed("reply consumer cannot acknowledge")
        if self.reply_queue is not None:
            raise PreconditionFailed("reply consumer already set")
        vhost = self.session.vhost
        name = f"{REPLY_TO}.{secrets.token_urlsafe(18)}"
        # amq.* names are the server's to make: the queue is exclusive to this connection and
        # goes with its consumer (auto-delete).
        queue = vhost.declare_queue(
            name,
            exclusive=True,
            auto_delete=True,
            owner=self.session.connection,
            reserved=True,
        )
        self.reply_queue = queue
        return queue

    def cancel(self, method: BasicCancel) -> None:
        consumer = self.by_tag.pop(method.consumer_tag, None)
        if consumer is not None:
            self._forget(consumer)
            # Its unacked deliveries stay on this channel, to be acked or released later.
            consumer.queue.remove_consumer(consumer, requeue=False)
        self.channel.reply(BasicCancelOk(method.consumer_tag), method.nowait)

    def _forget(self, consumer: Consumer) -> None:
        if consumer.queue is self.reply_queue:
            self.reply_queue = None

    # -- DeliverySink ------------------------------------------------------------------------
    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        tag = self.next_tag = self.next_tag + 1
        if not consumer.no_ack:
            self.unacked[tag] = entry
        message = entry.message
        session = self.session
        properties, body = delivery_parts(message, session.codecs)
        redelivered = entry.delivery_count > 0
        if self._held is not None:  # consume-ok is not out yet: count now, send after it
            method = BasicDeliver(
                consumer.tag, tag, redelivered, message.exchange, message.routing_key
            )
            event = Delivery(self.channel.id, method, properties, body)
            self._held.append((event, entry, tag))
            session.count_output(event)
            if session.transport_full or not self.flow_active:
                consumer.suspend()  # at most one delivery slips through before the pause
            return
        try:
            session.deliver(
                self.channel.id, consumer.tag, tag, redelivered, message.exchange,
                message.routing_key, properties, body,
            )  # fmt: skip
        except LocalProtocolError as exc:
            self._undeliverable(exc, entry, tag)

    def _send(self, event: Delivery, entry: QueueEntry, tag: int, counted: bool) -> None:
        try:
            self.session.send_delivery(event, counted)
        except LocalProtocolError as exc:
            self._undeliverable(exc, entry, tag)

    def _undeliverable(self, exc: LocalProtocolError, entry: QueueEntry, tag: int) -> None:
        """E.g. another protocol's 300-byte routing key: drop it, as it can never go out."""
        log.warning("cannot deliver a message to AMQP: %s", exc)
        if self.unacked.pop(tag, None) is not None:
            entry.queue.reject(entry, requeue=False)

    def consumer_cancelled(self, consumer: Consumer) -> None:
        """The queue went away: forget the consumer and tell the client if it listens."""
        if self.by_tag.get(consumer.tag) is consumer:
            del self.by_tag[consumer.tag]
        self._forget(consumer)
        if self.channel.open and self.session.capable("consumer_cancel_notify"):
            self.session.send_method(self.channel.id, BasicCancel(consumer.tag, True))

    # -- basic.get ---------------------------------------------------------------------------
    def get(self, method: BasicGet) -> None:
        session, channel = self.session, self.channel
        name = channel.queue_name(method.queue)
        channel.check(PermissionKind.READ, "queue", name)
        queue = session.vhost.get_queue(name, owner=session.connection)
        if method.no_ack:
            entry = queue.get(None)
        else:
            holder = self._holders.get(queue)
            if holder is None:
                holder = self._holders[queue] = queue.getter(self)
            entry = queue.get(holder)
        if entry is None:
            channel.reply(BasicGetEmpty())
            return
        tag = self.next_tag = self.next_tag + 1
        if not method.no_ack:
            self.unacked[tag] = entry
        message = entry.message
        properties, body = delivery_parts(message, session.codecs)
        get_ok = BasicGetOk(
            tag,
            entry.delivery_count > 0,
            message.exchange,
            message.routing_key,
            queue.message_count,
        )
        session.send_delivery(Delivery(channel.id, get_ok, properties, body))

    # -- settlement --------------------------------------------------------------------------
    def take(self, delivery_tag: int, multiple: bool) -> Settlement:
        """Remove and return the deliveries an ack / nack names (406 for an unknown tag)."""
        unacked = self.unacked
        if multiple and delivery_tag == 0:
            taken = list(unacked.items())
            unacked.clear()
            return taken
        if delivery_tag not in unacked:
            raise PreconditionFailed(f"unknown delivery tag {delivery_tag}")
        if not multiple:
            return [(delivery_tag, unacked.pop(delivery_tag))]
        taken = []
        for tag in unacked:
            if tag > delivery_tag:
                break
            taken.append((tag, unacked[tag]))
        for tag, _ in taken:
            del unacked[tag]
        return taken

    def restore(self, pairs: Settlement) -> None:
        """Put deliveries taken by a rolled-back transaction back, in tag order."""
        if pairs:
            merged = sorted([*self.unacked.items(), *pairs], key=lambda item: item[0])
            self.unacked = dict(merged)

    @staticmethod
    def settle(pairs: Settlement, ack: bool, requeue: bool = False) -> None:
        for _, entry in pairs:
            if ack:
                entry.queue.ack(entry)
            else:
                entry.queue.reject(entry, requeue=requeue)

    def ack(self, method: BasicAck) -> None:
        self._settle_or_buffer(self.take(method.delivery_tag, method.multiple), True)

    def nack(self, method: BasicNack) -> None:
        pairs = self.take(method.delivery_tag, method.multiple)
        self._settle_or_buffer(pairs, False, method.requeue)

    def reject(self, method: BasicReject) -> None:
        self._settle_or_buffer(self.take(method.delivery_tag, False), False, method.requeue)

    def _settle_or_buffer(self, pairs: Settlement, ack: bool, requeue: bool = False) -> None:
        publisher = self.channel.publisher
        if publisher.tx:
            publisher.tx_settlements.append((pairs, ack, requeue))
        else:
            self.settle(pairs, ack, requeue)

    def recover(self, method: BasicRecover | BasicRecoverAsync) -> None:
        """Requeue every unacked delivery (RabbitMQ redelivers through the queue either way)."""
        pairs = list(self.unacked.items())
        self.unacked.clear()
        self.settle(pairs, False, True)
        if type(method) is BasicRecover:
            self.channel.reply(BasicRecoverOk())

    # -- closing -----------------------------------------------------------------------------
    def release(self) -> None:
        """The channel closes: cancel consumers and requeue every unacked delivery, in order."""
        for consumer in list(self.by_tag.values()):
            consumer.queue.remove_consumer(consumer, requeue=True)
        self.by_tag.clear()
        holders = {e.consumer for e in self.unacked.values() if e.consumer is not None}
        for holder in holders:
            holder.queue.release(holder)
        for consumer in list(self.shared.consumers):
            consumer.detach_limit()
        self.unacked.clear()
        self._holders.clear()
        self.reply_queue = None
