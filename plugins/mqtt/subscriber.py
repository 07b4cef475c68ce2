"""The kernel side of a session's subscriptions: its queue, its bindings, its consumers.

Plain subscriptions feed the session's own queue, "mqtt-subscription-<client id>", bound to
the topic exchange with each filter's binding key ("a/+/#" -> "a.*.#"). The queue is durable
when the session outlives its connection, else exclusive to the connection (deleted with it).
A shared subscription `$share/{group}/{filter}` consumes a queue of its own,
"mqtt-shared-<group>-<binding key>", which every member of the group consumes: the kernel's
round-robin among consumers is the load balancing. Shared queues are transient and deleted
with their last consumer. On a cluster master, where the `shared` queue type is available
(cluster/shared/), the group's queue is a shared queue instead, one for the whole cluster, so
members on every node share the group's messages; it is durable and stays when its last
member leaves (docs/cluster.md). One credit window (`SharedLimit`, the session's Receive Maximum)
covers every consumer of the session.

Permissions follow RabbitMQ: declaring the queue needs configure on it, binding write on the
queue and read on the exchange, consuming read on the queue.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from herald.core.auth import PermissionKind
from herald.core.consumer import SharedLimit
from herald.core.errors import AccessRefused, KernelError
from herald.plugins.mqtt.codec import ReasonCode, RetainHandling, Subscribe, Unsubscribe
from herald.plugins.mqtt.registry import shared_queue_name
from herald.plugins.mqtt.subscriptions import Subscription, filter_covers

if TYPE_CHECKING:
    from herald.core.consumer import Consumer
    from herald.core.queue import Queue
    from herald.plugins.mqtt.session import Session

log = logging.getLogger(__name__)

OWN_TAG = "mqtt"
SHARED_TAG_PREFIX = "mqtt-shared:"
CLUSTER_QUEUE_TYPE = "shared"
CLUSTER_SHARED = {"x-queue-type": CLUSTER_QUEUE_TYPE}


class Subscriber:
    """One connection's consumers for its session's subscriptions."""

    def __init__(self, session: Session, window: int) -> None:
        self.session = session
        self.context = session.context
        self.exchange = session.context.config.exchange
        self.limit = SharedLimit(count_limit=window)
        self.own: Consumer | None = None
        self.shared: dict[str, Consumer] = {}  # by subscription text
        self._retained: list[Subscription] = []

    @property
    def consumers(self) -> list[Consumer]:
        own = [self.own] if self.own is not None else []
        return own + list(self.shared.values())

    # -- connection lifecycle ----------------------------------------------------------------
    def attach(self) -> None:
        """Start consuming for a new or resumed session (after CONNACK)."""
        state = self.session.state
        assert state is not None
        vhost = self.context.vhost
        if state.subscriptions.has_own_queue_subscriptions or state.queue_name in vhost.queues:
            try:
                self._consume_own()
            except KernelError as exc:
                log.warning("MQTT client %r: own queue unavailable: %s", state.client_id, exc)
        for subscription in state.subscriptions:
            if subscription.shared:
                try:
                    self._join_shared(subscription)
                except KernelError as exc:
                    log.warning("MQTT client %r: %s", state.client_id, exc.reply_text)

    def detach(self) -> None:
        """The connection ends: stop consuming; in-flight messages return to their queues.
        A transient session's own queue goes now, so nothing more is routed to it."""
        outbound = self.session.outbound
        for consumer in self.consumers:
            outbound.forget_consumer(consumer)
            consumer.queue.remove_consumer(consumer)
        self.own = None
        self.shared.clear()
        state = self.session.state
        if state is not None and not state.persistent:
            vhost = self.context.vhost
            queue = vhost.queues.get(state.queue_name)
            if queue is not None and queue.owner is self.session.connection:
                vhost.delete_queue(queue.name, owner=queue.owner)

    def set_suspended(self, suspended: bool) -> None:
        for consumer in self.consumers:
            if suspended:
                consumer.suspend()
            else:
                consumer.resume()

    def consumer_gone(self, consumer: Consumer) -> None:
        if consumer is self.own:
            self.own = None
        for text, shared in list(self.shared.items()):
            if shared is consumer:
                del self.shared[text]

    # -- SUBSCRIBE / UNSUBSCRIBE -------------------------------------------------------------
    def subscribe(self, packet: Subscribe) -> list[int]:
        """Apply a SUBSCRIBE; returns one reason code per filter. Retained messages owed are
        sent by `send_retained`, after the caller has sent SUBACK."""
        state = self.session.state
        assert state is not None
        ids = packet.properties.subscription_identifiers
        identifier = ids[0] if ids else None
        codes: list[int] = []
        for request in packet.subscriptions:
            text = request.topic_filter  # valid: the codec closes on a malformed filter
            subscription = Subscription.from_request(text, request.options, identifier)
            if self._denied(subscription.parsed.filter):
                log.info("MQTT client %r: %r is in mqtt.subscribe_denied", state.client_id, text)
                codes.append(ReasonCode.UNSPECIFIED_ERROR)
                continue
            try:
                old = state.subscriptions.get(subscription.text)
                if subscription.shared:
                    self._join_shared(subscription)
                else:
                    self._bind(self._consume_own(), subscription.binding_key)
            except AccessRefused as exc:
                log.info("MQTT client %r: %s", state.client_id, exc.reply_text)
                codes.append(ReasonCode.NOT_AUTHORIZED)
                continue
            except KernelError as exc:
                log.warning("MQTT client %r: %s", state.client_id, exc.reply_text)
                codes.append(ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR)
                continue
            if old is not None:
                self.context.no_local_subscriptions -= old.no_local
            self.context.no_local_subscriptions += subscription.no_local
            state.subscriptions.add(subscription)
            codes.append(subscription.qos)
            handling = subscription.retain_handling
            if not subscription.shared and (
                handling == RetainHandling.SEND_ON_SUBSCRIBE
                or (handling == RetainHandling.SEND_IF_NEW_SUBSCRIPTION and old is None)
            ):
                self._retained.append(subscription)
        self.context.sessions.save(state)
        return codes

    def send_retained(self) -> None:
        """The retained messages matching the subscriptions just made (after SUBACK)."""
        wanted, self._retained = self._retained, []
        context = self.context
        if not wanted or not context.retain_available:
            return
        state = self.session.state
        assert state is not None
        seen: set[str] = set()
        messages = []
        for subscription in wanted:
            for message in context.retained.match(subscription.parsed.filter):
                if message.topic not in seen:
                    seen.add(message.topic)
                    messages.append(message)
        if messages:
            context.send_retained(state.queue_name, messages)

    def unsubscribe(self, packet: Unsubscribe) -> list[int]:
        state = self.session.state
        assert state is not None
        codes: list[int] = []
        vhost = self.context.vhost
        for text in packet.topic_filters:
            subscription = state.subscriptions.remove(text)
            if subscription is None:
                codes.append(ReasonCode.NO_SUBSCRIPTION_EXISTED)
                continue
            self.context.no_local_subscriptions -= subscription.no_local
            codes.append(ReasonCode.SUCCESS)
            if subscription.shared:
                consumer = self.shared.pop(text, None)
                if consumer is not None:
                    self.session.outbound.forget_consumer(consumer)
                    consumer.queue.remove_consumer(consumer)
                continue
            key = subscription.binding_key
            if not state.subscriptions.binding_users(key) and state.queue_name in vhost.queues:
                try:
                    vhost.unbind_queue(
                        state.queue_name, self.exchange, key, owner=self.session.connection
                    )
                except KernelError as exc:
                    log.warning("MQTT client %r: %s", state.client_id, exc.reply_text)
        self.context.sessions.save(state)
        return codes

    # -- internals ---------------------------------------------------------------------------
    def _denied(self, topic_filter: str) -> bool:
        denied = self.context.config.subscribe_denied
        return bool(denied) and any(filter_covers(d, topic_filter) for d in denied)

    def _consume_own(self) -> Queue:
        """The session's own queue, declared (with every binding) if needed, and consumed."""
        if self.own is not None and not self.own.queue.deleted:
            return self.own.queue
        session = self.session
        state = session.state
        assert state is not None
        vhost = self.context.vhost
        name = state.queue_name
        durable = state.persistent
        owner = session.connection
        queue = vhost.queues.get(name)
        if queue is not None and queue.owner is not None and (durable or queue.owner is not owner):
            # An exclusive queue left by an earlier transient connection of this client id, or
            # a session that now outlives its connection: start a queue of the right kind. A
            # durable queue stays, even for a resumed session that now ends with its connection
            # (it is deleted with the session), so nothing queued meanwhile is lost.
            vhost.delete_queue(name, owner=queue.owner)
            queue = None
        if queue is None:
            session.authorize(PermissionKind.CONFIGURE, "queue", name)
            queue = vhost.declare_queue(name, durable=durable, exclusive=not durable, owner=owner)
        for subscription in state.subscriptions:
            if not subscription.shared:
                self._bind(queue, subscription.binding_key)
        session.authorize(PermissionKind.READ, "queue", name)
        self.own = queue.add_consumer(OWN_TAG, session.outbound, owner=owner, limit=self.limit)
        if session.transport_full:
            self.own.suspend()
        return queue

    def _bind(self, queue: Queue, binding_key: str) -> None:
        session = self.session
        session.authorize(PermissionKind.WRITE, "queue", queue.name)
        session.authorize(PermissionKind.READ, "exchange", self.exchange)
        self.context.vhost.bind_queue(
            queue.name, self.exchange, binding_key, owner=session.connection
        )

    def _join_shared(self, subscription: Subscription) -> None:
        session = self.session
        tag = SHARED_TAG_PREFIX + subscription.text
        old = self.shared.get(subscription.text)
        if old is not None and not old.queue.deleted:
            session.outbound.shared[tag] = subscription  # new options, same consumer
            return
        group = subscription.parsed.share_group
        assert group is not None
        name = shared_queue_name(group, subscription.binding_key)
        vhost = self.context.vhost
        queue = vhost.queues.get(name)
        if queue is None:
            session.authorize(PermissionKind.CONFIGURE, "queue", name)
            if vhost.queue_type_available(CLUSTER_QUEUE_TYPE):
                queue = vhost.declare_queue(name, durable=True, arguments=CLUSTER_SHARED)
            else:
                queue = vhost.declare_queue(name, auto_delete=True)
        self._bind(queue, subscription.binding_key)
        session.authorize(PermissionKind.READ, "queue", name)
        session.outbound.shared[tag] = subscription  # before: the consumer may receive at once
        consumer = queue.add_consumer(
            tag, session.outbound, owner=session.connection, limit=self.limit
        )
        if session.transport_full:
            consumer.suspend()
        self.shared[subscription.text] = consumer
