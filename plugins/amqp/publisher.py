"""The publishing side of a channel: basic.publish, mandatory returns, confirms, transactions.

Confirms (confirm.select) keep RabbitMQ's order: each publish gets the next sequence number and
a pending record (sequence, store ticket or None, ack or nack). `flush_confirms` sends, from the
front, every record whose ticket is durable: consecutive acks as one `multiple` ack, nacks one
by one. So confirms leave in publish order, a persistent message routed to a durable queue is
confirmed only once the store says it is safe, and a burst of publishes costs one ack frame.
A publish refused by a queue (x-overflow reject-publish) is nacked; an unroutable one is
returned first (if mandatory) and then acked, as in RabbitMQ.

Transactions (tx.select) buffer publishes and acks until tx.commit, which routes them in order,
settles the acks, waits until the stored ones are durable and answers commit-ok.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, cast

import attrs

from herald.core.auth import PermissionKind
from herald.core.errors import PreconditionFailed, RemoteProtocolError
from herald.core.vhost import RouteStatus
from herald.plugins.amqp.codec.events import Delivery
from herald.plugins.amqp.codec.methods import (
    BasicAck,
    BasicNack,
    BasicPublish,
    BasicReturn,
    ConfirmSelect,
    ConfirmSelectOk,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
    TxSelect,
    TxSelectOk,
)
from herald.plugins.amqp.codec.properties import encode_properties
from herald.plugins.amqp.consumers import REPLY_TO, Settlement
from herald.plugins.amqp.message_codec import kernel_message

if TYPE_CHECKING:
    from herald.core.message import Message
    from herald.plugins.amqp.channel import Channel
    from herald.plugins.amqp.codec.events import Message as PublishEvent

_ROUTED, _UNROUTABLE, _REJECTED = RouteStatus.ROUTED, RouteStatus.UNROUTABLE, RouteStatus.REJECTED
NO_ROUTE = 312


@attrs.frozen
class _Buffered:
    """A publish held by a transaction until commit."""

    message: Message
    mandatory: bool
    raw_properties: bytes
    body: bytes


class ChannelPublisher:
    """A channel's publishes, confirms and transaction."""

    __slots__ = (
        "channel",
        "next_seq",
        "pending",
        "session",
        "tx",
        "tx_publishes",
        "tx_settlements",
    )

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.session = channel.session
        self.next_seq = 0
        # Confirm mode's records, (sequence, store ticket or None, ack); None until
        # confirm.select (most channels never ask, and an empty deque is 600 bytes).
        self.pending: collections.deque[tuple[int, int | None, bool]] | None = None
        self.tx = False
        self.tx_publishes: list[_Buffered] = []
        self.tx_settlements: list[tuple[Settlement, bool, bool]] = []

    # -- basic.publish -----------------------------------------------------------------------
    def publish(self, event: PublishEvent) -> None:
        method = cast(BasicPublish, event.method)  # a Message's method is basic.publish
        session = self.session
        if method.immediate:  # dropped from RabbitMQ 3.0 on, with this answer
            raise RemoteProtocolError("immediate=true", 540)
        exchange = method.exchange
        self.channel.check(PermissionKind.WRITE, "exchange", exchange)
        props, raw_properties, body = event.properties, event.raw_properties, event.body
        user_id = props.user_id
        if user_id is not None and user_id != session.user_name:
            raise PreconditionFailed(
                f"user_id property set to '{user_id}' but authenticated user was"
                f" '{session.user_name}'"
            )
        if props.reply_to == REPLY_TO:
            reply_queue = self.channel.consumers.reply_queue
            if reply_queue is None:
                raise PreconditionFailed("fast reply consumer does not exist")
            props = attrs.evolve(props, reply_to=reply_queue.name)
            raw_properties = encode_properties(props)
        message = kernel_message(props, raw_properties, body, exchange, method.routing_key)
        session.published = True
        if self.tx:
            self.tx_publishes.append(_Buffered(message, method.mandatory, raw_properties, body))
            return
        self._route(message, method.mandatory, raw_properties, body)

    def _route(
        self, message: Message, mandatory: bool, raw_properties: bytes, body: bytes
    ) -> int | None:
        session = self.session
        result = session.vhost.publish(message, mandatory=mandatory)
        status = result.status
        if status is _UNROUTABLE and mandatory:
            method = BasicReturn(NO_ROUTE, "NO_ROUTE", message.exchange, message.routing_key)
            session.send_delivery(Delivery(self.channel.id, method, raw_properties, body))
        ticket = result.ticket
        pending = self.pending
        if pending is not None:  # confirm mode
            self.next_seq += 1
            if status is _REJECTED:
                pending.append((self.next_seq, None, False))
            else:
                pending.append((self.next_seq, ticket, True))
                if ticket is not None:
                    session.confirms.after(ticket)
        return ticket

    # -- confirms ----------------------------------------------------------------------------
    @property
    def confirm(self) -> bool:
        """Whether the channel is in confirm mode (confirm.select)."""
        return self.pending is not None

    def confirm_select(self, method: ConfirmSelect) -> None:
        if self.tx:
            raise PreconditionFailed("cannot switch from tx to confirm mode")
        if self.pending is None:
            self.pending = collections.deque()
        self.channel.reply(ConfirmSelectOk(), method.nowait)

    def flush_confirms(self, durable_ticket: int) -> None:
        """Send every confirm whose publish is settled, in order, acks batched."""
        pending = self.pending
        if not pending:
            return
        send, channel_id = self.session.send_method, self.channel.id
        first = last = None  # the run of acks not yet sent
        while pending:
            seq, ticket, ok = pending[0]
            if ticket is not None and ticket > durable_ticket:
                break
            pending.popleft()
            if ok:
                if first is None:
                    first = seq
                last = seq
                continue
            if last is not None:
                send(channel_id, BasicAck(last, last != first))
                first = last = None
            send(channel_id, BasicNack(seq, False, False))
        if last is not None:
            send(channel_id, BasicAck(last, last != first))

    def fail_confirms(self, ticket: int) -> None:
        """The store could not make `ticket` durable: nack every publish waiting on it."""
        if self.pending is None:
            return
        self.pending = collections.deque(
            (seq, None, False) if t is not None and t <= ticket else (seq, t, ok)
            for seq, t, ok in self.pending
        )

    # -- transactions ------------------------------------------------------------------------
    def tx_select(self, method: TxSelect) -> None:
        if self.confirm:
            raise PreconditionFailed("cannot switch from confirm to tx mode")
        self.tx = True
        self.channel.reply(TxSelectOk())

    def _check_tx(self) -> None:
        if not self.tx:
            raise PreconditionFailed("channel is not transactional")

    async def tx_commit(self) -> None:
        """Route the buffered publishes, settle the buffered acks, wait for durability."""
        self._check_tx()
        publishes, self.tx_publishes = self.tx_publishes, []
        settlements, self.tx_settlements = self.tx_settlements, []
        ticket = None
        for item in publishes:
            stored = self._route(item.message, item.mandatory, item.raw_properties, item.body)
            if stored is not None:
                ticket = stored
        consumers = self.channel.consumers
        for pairs, ack, requeue in settlements:
            consumers.settle(pairs, ack, requeue)
        if ticket is not None:
            await self.session.store.wait_durable(ticket)
        if self.channel.open:
            self.channel.reply(TxCommitOk())

    def tx_rollback(self, method: TxRollback) -> None:
        self._check_tx()
        self.tx_publishes = []
        self._restore_settlements()
        self.channel.reply(TxRollbackOk())

    def _restore_settlements(self) -> None:
        settlements, self.tx_settlements = self.tx_settlements, []
        self.channel.consumers.restore([pair for pairs, _, _ in settlements for pair in pairs])

    def release(self) -> None:
        """The channel closes: uncommitted work is dropped, its acks return to unacked."""
        self.tx_publishes = []
        self._restore_settlements()
        if self.pending is not None:
            self.pending.clear()
