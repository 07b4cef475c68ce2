"""Messages from the kernel to one client: the session's `DeliverySink`.

Each delivery is checked against the session's subscriptions (`$`-topics, no-local, merged
options), downgraded to the subscription's QoS and sent. QoS 0 deliveries are acked to the
kernel at once; QoS 1 and 2 ones get a packet id and stay unacked in the kernel until PUBACK,
or PUBREC for QoS 2 (the message has then reached the client; only the id stays in use until
PUBCOMP). The kernel's credit window is the session's in-flight limit (Receive Maximum); a
QoS 2 delivery keeps its slot of it until PUBCOMP, not PUBREC ([MQTT-3.3.4-9]: the quota comes
back on PUBACK, PUBCOMP or a refusing PUBREC), so the next PUBLISH waits for the PUBCOMP.

An ack of the wrong kind for an id in flight (PUBACK for a QoS 2 delivery, PUBREC or PUBCOMP
for a QoS 1 one, PUBCOMP before PUBREC) is a protocol error that closes the connection, as in
Mosquitto; an ack for an id not in use is tolerated (PUBACK, PUBCOMP ignored; PUBREC answered
with PUBREL, MQTT 5: 0x92 Packet Identifier not found), as in Mosquitto, which only logs it.

When the connection goes, the kernel requeues what was in flight; the ids are remembered by
queue position, so after a reconnect the same message goes out again with its original id
and the DUP flag (MQTT 3.1.1 section 4.4), and PUBRELs still owed are sent again.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any

import attrs

from herald.core.errors import KernelError, LocalProtocolError
from herald.plugins.mqtt.codec import (
    NO_PROPERTIES,
    Publish,
    PubRel,
    ReasonCode,
)
from herald.plugins.mqtt.context import PUBLISHER_KEY, RETAINED_KEY, TOPIC_KEY
from herald.plugins.mqtt.message_codec import PROTOCOL, delivered_topic, unpack
from herald.plugins.mqtt.registry import NO_IDS, discard_id, with_id
from herald.plugins.mqtt.subscriptions import Match, Subscription, merge

if TYPE_CHECKING:
    from collections.abc import Set

    from herald.core.consumer import Consumer
    from herald.core.queue import QueueEntry
    from herald.plugins.mqtt.registry import SessionState
    from herald.plugins.mqtt.session import Session

log = logging.getLogger(__name__)


class Outbound:
    """Deliveries to one connection, and the client's PUBACK / PUBREC / PUBCOMP."""

    __slots__ = (  # one per connection (PERFORMANCE.md: 10,000 idle ones)
        "_next_id",
        "codecs",
        "context",
        "exactly_once",
        "held",
        "inflight",
        "session",
        "shared",
    )

    protocol = PROTOCOL

    def __init__(self, session: Session) -> None:
        self.session = session
        self.codecs = session.context.codecs
        self.context = session.context
        self.inflight: dict[int, QueueEntry] = {}
        """QoS 1 deliveries waiting for PUBACK and QoS 2 ones waiting for PUBREC, by id."""
        self.exactly_once: Set[int] = NO_IDS
        """The ids in `inflight` of QoS 2 deliveries (the others are QoS 1)."""
        self.held: Set[int] = NO_IDS
        """QoS 2 ids PUBREC'd on this connection, not yet PUBCOMP'd: each holds a slot of the
        credit window, though its message is settled in the kernel."""
        self.shared: dict[str, Subscription] = {}
        """The subscription behind each shared-queue consumer, by consumer tag (set before the
        consumer exists, as it may receive at once); own-queue deliveries match them all."""
        self._next_id = 1

    # -- DeliverySink ------------------------------------------------------------------------
    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        session = self.session
        if not session.can_send:
            return  # closing: the entry goes back to its queue with the consumer
        state = session.state
        assert state is not None  # set before CONNACK, which can_send waits for
        message = entry.message
        annotations = message.annotations
        pending_id = None
        if entry.delivery_count:
            pending_id = state.pending_ids.pop((entry.queue.name, entry.offset), None)
        retained = False
        own = False
        if annotations is None:
            topic = delivered_topic(message.routing_key)
        elif TOPIC_KEY in annotations:
            topic = annotations[TOPIC_KEY]
            retained = bool(annotations.get(RETAINED_KEY))
        else:
            topic = delivered_topic(message.routing_key)
            own = annotations.get(PUBLISHER_KEY) == state.client_id
        match = None
        if topic is not None:
            if self.shared:
                match = self._match(consumer, state, topic, own)
            else:
                match = state.subscriptions.match(topic, own)
        if match is None or topic is None:  # (a match has a topic; this says so to mypy)
            self._settle(entry)  # not for this session ($-topic, no-local, unmappable key)
            return
        routing = self.context.routing
        if routing is not None and routing.message is message:
            stored = routing.stored  # delivered while it is published: parsed once for all
        else:
            routing = None
            try:
                stored = unpack(message.raw_for(PROTOCOL, self.codecs))
            except KernelError as exc:
                log.error("dropping a message that cannot be sent over MQTT: %s", exc.reply_text)
                entry.queue.reject(entry, requeue=False)
                return
        qos = stored.qos if stored.qos < match.qos else match.qos
        retain = retained or (match.retain_as_published and stored.retain)
        properties = NO_PROPERTIES
        if session.version == 5:
            properties = self._properties(
                stored.properties, match, message.expiration_ms, message.timestamp
            )
        packet_id = None
        if qos:
            packet_id = self._next_id
            if (
                pending_id is None
                and packet_id not in self.inflight
                and not state.awaiting_pubcomp
                and not state.pending_ids
            ):
                self._next_id = packet_id % 65535 + 1  # `_packet_id`'s usual case, inlined
            else:
                packet_id = self._packet_id(state, pending_id)
            dup = entry.delivery_count > 0
            packet = Publish(topic, stored.payload, qos, retain, dup, packet_id, properties)
        elif retain or properties is not NO_PROPERTIES or annotations is not None:
            packet = Publish(topic, stored.payload, 0, retain, False, None, properties)
        elif routing is None:
            packet = Publish(topic, stored.payload)
        else:  # the same packet for every plain QoS 0 subscriber
            packet = routing.plain
            if packet is None:
                packet = routing.plain = Publish(topic, stored.payload)
        try:
            session.send(packet, len(stored.payload) + len(topic))
        except LocalProtocolError as exc:
            # Larger than the client's Maximum Packet Size: MQTT 5 says drop it as if sent.
            log.info("not sent to MQTT client %r: %s", state.client_id, exc.text)
            self._settle(entry)
            return
        if packet_id is None:
            self._settle(entry)
        else:
            self.inflight[packet_id] = entry
            if qos == 2:
                self.exactly_once = with_id(self.exactly_once, packet_id)

    def consumer_cancelled(self, consumer: Consumer) -> None:
        """The queue was deleted under the session (management API): forget its consumer."""
        self.shared.pop(consumer.tag, None)
        subscriber = self.session.subscriber
        if subscriber is not None:
            subscriber.consumer_gone(consumer)

    # -- acknowledgements from the client ----------------------------------------------------
    def puback(self, packet_id: int) -> None:
        if self.exactly_once and packet_id in self.exactly_once:
            self._misfit("PUBACK", packet_id, "a QoS 2 delivery")
            return
        entry = self.inflight.pop(packet_id, None)
        if entry is not None:
            try:  # `_settle`, inlined: once per QoS 1 delivery
                entry.queue.ack(entry)
            except KernelError as exc:
                log.debug("ack of %r ignored: %s", entry, exc)
            return
        state = self.session.state
        if state is not None and packet_id in state.awaiting_pubcomp:
            self._misfit("PUBACK", packet_id, "a QoS 2 delivery waiting for PUBCOMP")

    def pubrec(self, packet_id: int, reason_code: int) -> None:
        state = self.session.state
        assert state is not None
        entry = self.inflight.get(packet_id)
        if entry is not None:
            if packet_id not in self.exactly_once:
                self._misfit("PUBREC", packet_id, "a QoS 1 delivery")
                return
            del self.inflight[packet_id]
            discard_id(self.exactly_once, packet_id)
            if reason_code >= 0x80:
                self._settle(entry)  # the client refused it: the exchange and its slot end here
                return
            subscriber = self.session.subscriber
            if subscriber is not None:
                # The slot stays taken until PUBCOMP: counted once more before the ack gives
                # the entry's back, so that ack does not send the next message.
                subscriber.limit.count += 1
                self.held = with_id(self.held, packet_id)
            self._settle(entry)
            state.pubrel_sent(packet_id)
            self.session.send(PubRel(packet_id))
        elif packet_id in state.awaiting_pubcomp:
            self.session.send(PubRel(packet_id))  # our PUBREL crossed a resent PUBREC
        elif reason_code < 0x80:
            self.session.send(PubRel(packet_id, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND))

    def pubcomp(self, packet_id: int) -> None:
        if packet_id in self.inflight:
            qos2 = packet_id in self.exactly_once
            what = "a QoS 2 delivery still waiting for PUBREC" if qos2 else "a QoS 1 delivery"
            self._misfit("PUBCOMP", packet_id, what)
            return
        state = self.session.state
        if state is not None:
            state.pubcomp_received(packet_id)
        if self.held and packet_id in self.held:
            discard_id(self.held, packet_id)
            subscriber = self.session.subscriber
            if subscriber is not None:
                subscriber.limit.release(0)  # the slot is free: sends the next message, if any

    # -- session lifecycle -------------------------------------------------------------------
    def resend_pubrels(self) -> None:
        """After a reconnect: the PUBRELs the client has not answered yet."""
        state = self.session.state
        assert state is not None
        for packet_id in sorted(state.awaiting_pubcomp):
            self.session.send(PubRel(packet_id))

    def release(self) -> None:
        """The connection ends: remember the ids of own-queue deliveries still in flight."""
        state = self.session.state
        if state is not None and state.persistent:
            own = state.queue_name
            for packet_id, entry in self.inflight.items():
                if entry.queue.name == own:
                    state.pending_ids[(own, entry.offset)] = packet_id
        self.inflight.clear()
        self.exactly_once = self.held = NO_IDS

    def forget_consumer(self, consumer: Consumer) -> None:
        """A consumer is going away: its in-flight entries return to the queue without us."""
        for packet_id in [p for p, e in self.inflight.items() if e.consumer is consumer]:
            del self.inflight[packet_id]
            discard_id(self.exactly_once, packet_id)
        self.shared.pop(consumer.tag, None)

    # -- internals ---------------------------------------------------------------------------
    def _match(
        self, consumer: Consumer, state: SessionState, topic: str, own: bool
    ) -> Match | None:
        subscription = self.shared.get(consumer.tag)
        if subscription is None:
            return state.subscriptions.match(topic, own)
        return merge([subscription], own) if subscription.matches(topic) else None

    def _properties(self, props: Any, match: Match, expiration_ms: int | None, born: float) -> Any:
        changes: dict[str, Any] = {}
        if match.identifiers:
            changes["subscription_identifiers"] = match.identifiers
        if expiration_ms is not None:
            left = expiration_ms / 1000 - (time.time() - born)
            changes["message_expiry_interval"] = max(math.ceil(left), 1)
        elif props.message_expiry_interval is not None:
            changes["message_expiry_interval"] = None  # dead-lettered: no expiry any more
        return attrs.evolve(props, **changes) if changes else props

    def _packet_id(self, state: SessionState, preferred: int | None) -> int:
        inflight = self.inflight
        pubcomp = state.awaiting_pubcomp
        if preferred is not None and preferred not in inflight and preferred not in pubcomp:
            return preferred
        packet_id = self._next_id
        if packet_id not in inflight and not pubcomp and not state.pending_ids:
            self._next_id = packet_id % 65535 + 1  # the usual case: the next id is free
            return packet_id
        reserved = set(state.pending_ids.values()) if state.pending_ids else ()
        for _ in range(65535):
            packet_id = self._next_id
            self._next_id = packet_id % 65535 + 1
            if packet_id not in inflight and packet_id not in pubcomp and packet_id not in reserved:
                return packet_id
        raise KernelError("no free MQTT packet identifier")  # the window is far smaller

    def _misfit(self, kind: str, packet_id: int, what: str) -> None:
        self.session.fail(ReasonCode.PROTOCOL_ERROR, f"{kind} for packet id {packet_id}, {what}")

    def _settle(self, entry: QueueEntry) -> None:
        try:
            entry.queue.ack(entry)
        except KernelError as exc:  # e.g. requeued by a consumer change meanwhile
            log.debug("ack of %r ignored: %s", entry, exc)
