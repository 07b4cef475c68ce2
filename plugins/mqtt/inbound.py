"""Messages from one client into the kernel: PUBLISH and PUBREL, and when to acknowledge them.

QoS 0 is routed and forgotten. QoS 1 is answered with PUBACK once routed and, as MQTT QoS > 0
messages are persistent, once the store has made it durable. QoS 2 is routed once, answered
with PUBREC when durable, and its packet id is remembered until PUBREL, so a resent PUBLISH
with that id is not routed again; PUBREL is answered with PUBCOMP.

Acks wait for the store together: the session hands every packet of one read to `publish` /
`pubrel`, then `flush` waits once for the highest ticket (group commit) and sends the acks in
the order the packets came, as MQTT requires (section 4.6).

When the store fails the wait (a cluster's ReplicationTimeout: the message is stored on the
master and may still be delivered), the acks are not sent and the connection ends: MQTT 5
DISCONNECT 0x83 with the reason, 3.1.1 a close; the client resends on reconnect (a duplicate,
not a loss). A NotMaster, from that wait or from routing a PUBLISH (a node that is not its
group's master refuses writes), ends it with DISCONNECT 0x9C Use another server and the
master's address as Server Reference (`Session.not_master`).

Refusals: MQTT 5 gets a reason code on the ack (0x87 not authorized, 0x10 no matching
subscribers, 0x97 quota exceeded for a queue that rejects publishes); 3.1.1 cannot be told, so
an unauthorized publish closes its connection (the spec's only alternative to acking).
A publish to `$SYS` (the server's topics, MQTT 5.0 section 4.7.2) is refused for every user:
MQTT 5 gets 0x87, a 3.1.1 one is acknowledged and dropped (Mosquitto's answer to a publish
its ACL denies), QoS 0 is dropped.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from herald.core.auth import PermissionKind
from herald.core.errors import AccessRefused, KernelError, NotMaster, ReplicationTimeout
from herald.core.vhost import RouteStatus
from herald.plugins.mqtt.codec import (
    NO_PROPERTIES,
    Packet,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
)
from herald.plugins.mqtt.codec.topics import is_sys_topic

if TYPE_CHECKING:
    from herald.plugins.mqtt.session import Session

log = logging.getLogger(__name__)

_ROUTED = RouteStatus.ROUTED  # module globals: an Enum class attribute costs 10x more
_SUCCESS = ReasonCode.SUCCESS
_STATUS_CODES = {
    RouteStatus.ROUTED: ReasonCode.SUCCESS,
    RouteStatus.UNROUTABLE: ReasonCode.NO_MATCHING_SUBSCRIBERS,
    RouteStatus.REJECTED: ReasonCode.QUOTA_EXCEEDED,
}


class Inbound:
    """PUBLISH / PUBREL from one client, and the acks owed for them."""

    __slots__ = ("_may_publish", "_ticket", "owed", "session", "store")  # one per connection

    def __init__(self, session: Session) -> None:
        self.session = session
        self.store = session.context.store
        self.owed: list[Packet] = []
        """Acks for the packets of the current read, sent by `flush`."""
        self._ticket = 0
        self._may_publish = False  # write on the exchange was granted (remembered, as authorize)

    def publish(self, packet: Publish) -> None:
        session = self.session
        state = session.state
        assert state is not None
        context = session.context
        qos = packet.qos
        packet_id = packet.packet_id
        if qos == 2 and packet_id in state.inbound_qos2:
            assert packet_id is not None  # QoS 2 has one (the codec checks)
            self._reply(PubRec(packet_id))  # a resend: routed already
            return
        if qos == 2 and len(state.inbound_qos2) >= context.config.max_inflight:
            session.fail(
                ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
                f"more than {context.config.max_inflight} QoS 2 publishes awaiting PUBREL",
            )
            return
        retain = packet.retain
        if retain and not context.retain_available:
            if session.version == 5:
                session.fail(ReasonCode.RETAIN_NOT_SUPPORTED, "retained messages are disabled")
                return
            retain = False
        topic = packet.topic
        if topic[:1] == "$" and is_sys_topic(topic):
            self._refuse_sys(packet)
            return
        if not self._may_publish:
            try:
                session.authorize(PermissionKind.WRITE, "exchange", context.config.exchange)
            except AccessRefused as exc:
                self._refuse(packet, ReasonCode.NOT_AUTHORIZED, exc.reply_text)
                return
            self._may_publish = True
        try:
            result, ticket = context.publish(
                state.client_id, topic, packet.payload, qos, retain, packet.properties
            )
        except NotMaster as exc:  # a cluster node that is not master refuses every write
            log.warning("MQTT publish to %r refused: %s", packet.topic, exc.reply_text)
            session.not_master(exc)
            return
        except KernelError as exc:
            log.warning("MQTT publish to %r failed: %s", packet.topic, exc.reply_text)
            self._refuse(packet, ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR, exc.reply_text)
            return
        session.published = True
        if packet_id is None:
            return
        if ticket is not None and ticket > self._ticket:
            self._ticket = ticket
        status = result.status
        if qos == 1 and status is _ROUTED:  # the usual case, once per PUBLISH
            self.owed.append(PubAck(packet_id, _SUCCESS, NO_PROPERTIES))
            return
        code = ReasonCode.SUCCESS if status is RouteStatus.ROUTED else _STATUS_CODES[status]
        reason = "a queue refused the message (x-overflow)" if code >= 0x80 else None
        if qos == 1:
            self._reply(PubAck(packet_id, code, self._reason(reason)))
        else:
            if code < 0x80:
                state.qos2_routed(packet_id)
            self._reply(PubRec(packet_id, code, self._reason(reason)))

    def pubrel(self, packet: PubRel) -> None:
        state = self.session.state
        assert state is not None
        if packet.packet_id in state.inbound_qos2:
            state.qos2_released(packet.packet_id)
            self._reply(PubComp(packet.packet_id))
        else:
            self._reply(PubComp(packet.packet_id, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND))

    async def flush(self) -> None:
        """Send the acks owed, once what they confirm is durable."""
        if not self.owed:
            return
        ticket, self._ticket = self._ticket, 0
        if ticket and ticket > self.store.durable_ticket:
            try:
                await self.store.wait_durable(ticket)
            except NotMaster as exc:
                log.warning("MQTT publishes not acknowledged: %s", exc.reply_text)
                self.session.not_master(exc)
                return
            except KernelError as exc:
                if isinstance(exc, ReplicationTimeout):
                    log.warning("MQTT publishes not acknowledged: %s", exc.reply_text)
                else:
                    log.error("store failed to make MQTT publishes durable: %s", exc.reply_text)
                self.owed.clear()
                self.session.fail(ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR, exc.reply_text)
                return
        pending, self.owed = self.owed, []
        for packet in pending:
            self.session.send(packet)

    # -- internals ---------------------------------------------------------------------------
    def _reply(self, packet: Packet) -> None:
        self.owed.append(packet)

    def _reason(self, text: str | None) -> Properties:
        if text is None or not self.session.problem_information:
            return NO_PROPERTIES
        return Properties(reason_string=text)

    def _refuse_sys(self, packet: Publish) -> None:
        session = self.session
        text = f"{packet.topic!r} is a $SYS topic: only the server publishes there"
        log.info("MQTT publish from %s refused: %s", session.connection.peer, text)
        packet_id = packet.packet_id
        if packet_id is None:
            return
        if session.version == 5:
            code, reason = ReasonCode.NOT_AUTHORIZED, self._reason(text)
        else:  # 3.1.1 has no refusing ack: acknowledged, and dropped
            code, reason = ReasonCode.SUCCESS, NO_PROPERTIES
        if packet.qos == 1:
            self._reply(PubAck(packet_id, code, reason))
            return
        if code < 0x80:
            state = session.state
            assert state is not None
            state.qos2_routed(packet_id)  # as if routed: its PUBREL gets PUBCOMP
        self._reply(PubRec(packet_id, code, reason))

    def _refuse(self, packet: Publish, code: int, text: str) -> None:
        session = self.session
        if session.version < 5:
            session.fail(code, text)  # 3.1.1 has no way to refuse a publish but hanging up
        elif packet.packet_id is not None:  # QoS 1 or 2 (QoS 0 has nothing to answer with)
            ack = PubAck if packet.qos == 1 else PubRec
            self._reply(ack(packet.packet_id, code, self._reason(text)))
