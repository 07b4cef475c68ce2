"""One AMQP channel: method dispatch, declarations, and the channel's life and death.

A channel turns each method it receives into one kernel call and one reply. Consuming
(`consumers.py`) and publishing (`publisher.py`) live in their own classes; this module owns
exchange and queue declarations, the queue-name shortcuts of the spec, the permission checks
RabbitMQ makes (through the connection's `Permissions`, core/session_open.py), and closing:
on a channel error it releases everything at once (unacked messages go back to their queues),
sends channel.close and then ignores every frame but channel.close / close-ok, as RabbitMQ
does. Methods are dispatched through one table for every channel (`_HANDLERS`).
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from herald.core.auth import PermissionKind
from herald.core.errors import NotFound, RemoteProtocolError
from herald.plugins.amqp.codec.methods import (
    BasicAck,
    BasicCancel,
    BasicConsume,
    BasicGet,
    BasicNack,
    BasicQos,
    BasicRecover,
    BasicRecoverAsync,
    BasicReject,
    ChannelClose,
    ChannelCloseOk,
    ChannelFlow,
    ChannelFlowOk,
    ConfirmSelect,
    ExchangeBind,
    ExchangeBindOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    ExchangeUnbind,
    ExchangeUnbindOk,
    Method,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueuePurge,
    QueuePurgeOk,
    QueueUnbind,
    QueueUnbindOk,
    TxRollback,
    TxSelect,
)
from herald.plugins.amqp.consumers import REPLY_TO, ChannelConsumers
from herald.plugins.amqp.publisher import ChannelPublisher

if TYPE_CHECKING:
    from herald.core.session_open import Permissions
    from herald.plugins.amqp.codec.events import Message as PublishEvent
    from herald.plugins.amqp.session import Session

CONFIGURE, WRITE, READ = PermissionKind.CONFIGURE, PermissionKind.WRITE, PermissionKind.READ


class ChannelState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # we sent channel.close: waiting for close-ok, ignoring the rest


class Channel:
    """A channel of one connection."""

    __slots__ = ("consumers", "id", "last_queue", "permissions", "publisher", "session", "state")

    def __init__(self, session: Session, channel_id: int) -> None:
        permissions = session.permissions
        assert permissions is not None  # channels open after connection.open
        self.session = session
        self.permissions: Permissions = permissions
        self.id = channel_id
        self.state = ChannelState.OPEN
        self.last_queue: str | None = None  # the spec's "current queue" for "" shortcuts
        self.consumers = ChannelConsumers(self)
        self.publisher = ChannelPublisher(self)

    def __repr__(self) -> str:
        return f"<Channel {self.id} {self.state.value}>"

    @property
    def open(self) -> bool:
        return self.state is ChannelState.OPEN

    # -- dispatch ----------------------------------------------------------------------------
    def handle(self, method: Method) -> None:
        """Run one method; kernel errors propagate to the session, which closes accordingly."""
        handler = _HANDLERS.get(type(method))
        if handler is None:  # tx.commit never gets here: the session awaits it
            raise RemoteProtocolError(f"{method.NAME} is not valid on a channel", 503)
        handler(self, method)

    def publish(self, event: PublishEvent) -> None:
        self.publisher.publish(event)

    def reply(self, method: Method, nowait: bool = False) -> None:
        if not nowait:
            self.session.send_method(self.id, method)

    # -- names and permissions ---------------------------------------------------------------
    def queue_name(self, name: str) -> str:
        """The spec's shortcut: "" names the queue last declared on this channel."""
        if name:
            return name
        if self.last_queue is None:
            raise NotFound("no previously declared queue")
        return self.last_queue

    def check(self, permission: PermissionKind, kind: str, name: str) -> None:
        """AccessRefused (403) unless the connection's user may (answers are cached)."""
        self.permissions.authorize(permission, kind, name)

    # -- exchanges ---------------------------------------------------------------------------
    def _exchange_declare(self, method: ExchangeDeclare) -> None:
        vhost = self.session.vhost
        if method.passive:
            vhost.declare_exchange(method.exchange, passive=True)
        else:
            self.check(CONFIGURE, "exchange", method.exchange)
            alternate = method.arguments.get("alternate-exchange")
            if isinstance(alternate, str) and alternate:
                self.check(READ, "exchange", method.exchange)
                self.check(WRITE, "exchange", alternate)
            vhost.declare_exchange(
                method.exchange,
                method.type,
                durable=method.durable,
                auto_delete=method.auto_delete,
                internal=method.internal,
                arguments=method.arguments,
            )
        self.reply(ExchangeDeclareOk(), method.nowait)

    def _exchange_delete(self, method: ExchangeDelete) -> None:
        self.check(CONFIGURE, "exchange", method.exchange)
        self.session.vhost.delete_exchange(method.exchange, if_unused=method.if_unused)
        self.reply(ExchangeDeleteOk(), method.nowait)

    def _exchange_bind(self, method: ExchangeBind) -> None:
        self.check(WRITE, "exchange", method.destination)
        self.check(READ, "exchange", method.source)
        self.session.vhost.bind_exchange(
            method.destination, method.source, method.routing_key, method.arguments
        )
        self.reply(ExchangeBindOk(), method.nowait)

    def _exchange_unbind(self, method: ExchangeUnbind) -> None:
        self.check(WRITE, "exchange", method.destination)
        self.check(READ, "exchange", method.source)
        self.session.vhost.unbind_exchange(
            method.destination, method.source, method.routing_key, method.arguments
        )
        self.reply(ExchangeUnbindOk(), method.nowait)

    # -- queues ------------------------------------------------------------------------------
    def _queue_declare(self, method: QueueDeclare) -> None:
        session = self.session
        vhost, owner = session.vhost, session.connection
        name = method.queue
        if method.passive:
            if name == REPLY_TO:  # RabbitMQ lets clients check that direct reply-to exists
                self.reply(QueueDeclareOk(REPLY_TO, 0, 0), method.nowait)
                return
            queue = vhost.declare_queue(self.queue_name(name), passive=True, owner=owner)
        else:
            if name:
                self.check(CONFIGURE, "queue", name)
            queue = vhost.declare_queue(
                name,
                durable=method.durable,
                exclusive=method.exclusive,
                auto_delete=method.auto_delete,
                arguments=method.arguments,
                owner=owner,
            )
            if not name:  # server-named: the permission is checked on the name it got
                try:
                    self.check(CONFIGURE, "queue", queue.name)
                except Exception:
                    vhost.delete_queue(queue.name, owner=owner)
                    raise
        self.last_queue = queue.name
        stats = queue.message_count, len(queue.consumers)
        self.reply(QueueDeclareOk(queue.name, *stats), method.nowait)

    def _queue_bind(self, method: QueueBind) -> None:
        name = self.queue_name(method.queue)
        routing_key = method.routing_key if method.queue or method.routing_key else name
        self.check(WRITE, "queue", name)
        self.check(READ, "exchange", method.exchange)
        self.session.vhost.bind_queue(
            name, method.exchange, routing_key, method.arguments, owner=self.session.connection
        )
        self.reply(QueueBindOk(), method.nowait)

    def _queue_unbind(self, method: QueueUnbind) -> None:
        name = self.queue_name(method.queue)
        routing_key = method.routing_key if method.queue or method.routing_key else name
        self.check(WRITE, "queue", name)
        self.check(READ, "exchange", method.exchange)
        self.session.vhost.unbind_queue(
            name, method.exchange, routing_key, method.arguments, owner=self.session.connection
        )
        self.reply(QueueUnbindOk())

    def _queue_purge(self, method: QueuePurge) -> None:
        name = self.queue_name(method.queue)
        self.check(READ, "queue", name)
        count = self.session.vhost.purge_queue(name, owner=self.session.connection)
        self.reply(QueuePurgeOk(count), method.nowait)

    def _queue_delete(self, method: QueueDelete) -> None:
        name = self.queue_name(method.queue)
        self.check(CONFIGURE, "queue", name)
        count = self.session.vhost.delete_queue(
            name,
            if_unused=method.if_unused,
            if_empty=method.if_empty,
            owner=self.session.connection,
        )
        self.reply(QueueDeleteOk(count), method.nowait)

    # -- flow and closing --------------------------------------------------------------------
    def _flow(self, method: ChannelFlow) -> None:
        """The client pauses (active=False) or resumes deliveries on this channel."""
        self.consumers.set_flow(method.active)
        self.reply(ChannelFlowOk(method.active))

    def release(self) -> None:
        """Give everything back to the kernel: consumers, unacked messages, pending publishes."""
        self.consumers.release()
        self.publisher.release()

    def fail(self, reply_code: int, reply_text: str, method: type[Method] | None) -> None:
        """A channel error: release at once, send channel.close, wait for close-ok."""
        self.state = ChannelState.CLOSING
        self.release()
        class_id, method_id = (method.CLASS_ID, method.METHOD_ID) if method else (0, 0)
        self.session.send_method(self.id, ChannelClose(reply_code, reply_text, class_id, method_id))

    def closed_by_client(self) -> None:
        """channel.close from the client: release, answer close-ok."""
        self.state = ChannelState.CLOSING
        self.release()
        self.session.send_method(self.id, ChannelCloseOk())


_Handler = Callable[[Channel, Any], None]


def _of(part: Callable[[Channel], Any], handler: Callable[[Any, Any], None]) -> _Handler:
    """A handler of the channel's consumers or publisher, called with the channel."""

    def call(channel: Channel, method: Any) -> None:
        handler(part(channel), method)

    return call


_consumers = operator.attrgetter("consumers")
_publisher = operator.attrgetter("publisher")
_HANDLERS: dict[type[Method], _Handler] = {
    # One table for every channel, not a dict of bound methods in each.
    ExchangeDeclare: Channel._exchange_declare,
    ExchangeDelete: Channel._exchange_delete,
    ExchangeBind: Channel._exchange_bind,
    ExchangeUnbind: Channel._exchange_unbind,
    QueueDeclare: Channel._queue_declare,
    QueueBind: Channel._queue_bind,
    QueueUnbind: Channel._queue_unbind,
    QueuePurge: Channel._queue_purge,
    QueueDelete: Channel._queue_delete,
    ChannelFlow: Channel._flow,
    BasicQos: _of(_consumers, ChannelConsumers.qos),
    BasicConsume: _of(_consumers, ChannelConsumers.consume),
    BasicCancel: _of(_consumers, ChannelConsumers.cancel),
    BasicGet: _of(_consumers, ChannelConsumers.get),
    BasicAck: _of(_consumers, ChannelConsumers.ack),
    BasicNack: _of(_consumers, ChannelConsumers.nack),
    BasicReject: _of(_consumers, ChannelConsumers.reject),
    BasicRecover: _of(_consumers, ChannelConsumers.recover),
    BasicRecoverAsync: _of(_consumers, ChannelConsumers.recover),
    ConfirmSelect: _of(_publisher, ChannelPublisher.confirm_select),
    TxSelect: _of(_publisher, ChannelPublisher.tx_select),
    TxRollback: _of(_publisher, ChannelPublisher.tx_rollback),
}
