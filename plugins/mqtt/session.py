"""One MQTT connection's protocol state machine, over the sans-IO codec.

The session decides everything the protocol leaves to the server after CONNECT: the keep
alive and handshake deadlines, DISCONNECT and wills, being taken over, what to do when the
client breaks the protocol, and packets too large for the client. Who a CONNECT logs in as
(password, certificate, anonymous) is `login.py`, the rest of CONNECT (client id, clean start
and session expiry, takeover, CONNACK) `connect.py`; publishing is `inbound.py`, delivering
`outbound.py`, subscribing `subscriber.py`.
It does no I/O: the adapter every protocol shares (core/adapter.py, set up by server.py) feeds
it bytes (`receive`), writes what it produced (the output side, `SessionIO` in
core/session_io.py), and calls `check_timers` at `deadline()` (every connection's deadlines
are one heap on the kernel's timer task: core/connection_deadlines.py).

A codec `RemoteProtocolError` ends only this connection: the codec's `error_reply()` (a
refusing CONNACK, or an MQTT 5 DISCONNECT with the reason code) is written, then the socket
is closed, and the will is published as for any connection that ends without DISCONNECT.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import TYPE_CHECKING, cast

import attrs
import trio

from herald.core.errors import LocalProtocolError, NotMaster, RemoteProtocolError
from herald.core.session_io import SessionIO
from herald.core.session_open import CheckedLazily, Permissions
from herald.plugins.mqtt import channels, connect
from herald.plugins.mqtt.codec import (
    NEED_DATA,
    NO_PROPERTIES,
    Auth,
    Connect,
    ConnectionClosed,
    Disconnect,
    MQTTConnection,
    Packet,
    PingReq,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)
from herald.plugins.mqtt.inbound import Inbound
from herald.plugins.mqtt.outbound import Outbound
from herald.plugins.mqtt.subscriber import Subscriber

if TYPE_CHECKING:
    from herald.core.auth import User
    from herald.core.connections import Connection
    from herald.plugins.mqtt.codec import Will
    from herald.plugins.mqtt.context import MQTTContext
    from herald.plugins.mqtt.registry import SessionState

log = logging.getLogger(__name__)

_PUBLISH_OVERHEAD = 16  # fixed header, packet id, property lengths of one PUBLISH, roughly


class Session(CheckedLazily, SessionIO):
    """The MQTT side of one client connection; `SessionIO` is its output side (the adapter's
    half: output buffer, writer wake-ups, write-buffer backpressure, deadline scheduling)."""

    # Slots: one Session per connection, 10,000 idle ones in the RSS target (PERFORMANCE.md);
    # these 22 and SessionIO's 11. A string split keeps the names in 4 lines.
    __slots__ = tuple(
        "_connect_received _permissions _torn_down _will_discarded broker can_send "  # noqa: SIM905
        "config connection context inbound keepalive last_received opened_at outbound "
        "peer_host problem_information published state subscriber user version will".split()
    )

    codec: MQTTConnection  # SessionIO's slot, typed

    describe = channels.describe  # a method: `Connection.channels` holds it bound

    def __init__(self, context: MQTTContext, connection: Connection, peer_host: str | None) -> None:
        super().__init__(context.config.write_buffer)
        self.context = context
        self.config = context.config
        self.broker = context.broker
        self.connection = connection  # also the owner of the session's exclusive queue
        self.peer_host = peer_host
        self.codec = MQTTConnection(max_packet_size=self.config.max_packet_size)
        self.version = 4
        self.user: User | None = None
        self.state: SessionState | None = None
        self.will: Will | None = None
        self.keepalive = 0
        self.problem_information = True
        self.inbound = Inbound(self)
        self.outbound = Outbound(self)
        self.subscriber: Subscriber | None = None
        self.published = False  # only publishers are paused by resource alarms
        self.can_send = False
        """CONNACK accepted the client and the session is not done: deliveries may go out.
        A plain attribute (set by `connect.accept`, cleared by `finish`): read once per
        delivery."""
        self.opened_at = self.last_received = trio.current_time()
        self._connect_received = False
        self._will_discarded = False
        self._torn_down = False
        # Made on first use, as an idle connection does not need it (PERFORMANCE.md):
        self._permissions: Permissions | None = None  # by `authorize`

    # -- for the adapter ---------------------------------------------------------------------
    async def receive(self, data: bytes) -> None:
        """Handle bytes from the client: every whole packet they complete. b"" is the end of
        its stream: between packets a lost connection (the will is published), inside one a
        malformed packet (answered, and the will published too)."""
        self.last_received = trio.current_time()
        codec = self.codec
        codec.receive_data(data)
        yielded = False
        try:
            while not self.done:
                packet = codec.next_event()
                if packet is NEED_DATA:
                    break
                kind = type(packet)
                if kind is Publish:
                    if not yielded:
                        # Let connections whose bytes arrived in the same wakeup go first, so
                        # a SUBSCRIBE sent just before this PUBLISH on another connection
                        # applies to it, as on a broker that reads its sockets in order (Trio
                        # runs ready tasks in random order).
                        yielded = True
                        await trio.lowlevel.cancel_shielded_checkpoint()
                        if self.done:
                            break
                    self.inbound.publish(packet)  # type: ignore[arg-type]  # kind is type(packet), which mypy does not narrow on; a cast is a call per packet
                elif kind is PubAck:  # as `_handle` would, one call less per delivery
                    self.outbound.puback(packet.packet_id)  # type: ignore[union-attr]  # kind is type(packet), which mypy does not narrow on; a cast is a call per packet
                elif kind is Connect:
                    self._connect_received = True
                    await connect.accept(self, cast(Connect, packet))
                elif kind is ConnectionClosed:  # the client hung up without DISCONNECT
                    self.connection_lost("client closed the connection")
                    break
                else:
                    self._handle(packet)  # type: ignore[arg-type]  # a Packet: NEED_DATA and ConnectionClosed are handled above, which mypy does not see
        except RemoteProtocolError as exc:
            self._codec_failed(exc)
        if self.inbound.owed:
            await self.inbound.flush()
        self.wake()

    @property
    def reading_paused(self) -> bool:
        """Whether the adapter should stop reading: a publisher while a resource alarm is on."""
        return self.published and self.broker.alarms.blocked and not self.done

    def deadline(self) -> float:
        """When `check_timers` must run next (Trio clock)."""
        if self.done:
            return math.inf
        if self.state is None:
            if self._connect_received:
                return math.inf  # ours to answer: authentication may queue for scrypt
            return self.opened_at + self.config.handshake_timeout
        if self.keepalive:
            return self.last_received + 1.5 * self.keepalive
        return math.inf

    def check_timers(self, now: float) -> None:
        if self.reading_paused:
            self.last_received = now  # not reading: the client's packets wait in the socket
            return
        if now < self.deadline():
            return
        if self.state is None:
            self.finish(f"no CONNECT within {self.config.handshake_timeout}s")
        else:
            self.fail(
                ReasonCode.KEEP_ALIVE_TIMEOUT,
                f"nothing received for {1.5 * self.keepalive:g}s (keep alive {self.keepalive}s)",
            )

    def close_from_broker(self, reason: str) -> None:
        """The broker's closer (shutdown, management): MQTT 5 clients are told why."""
        code = (
            ReasonCode.SERVER_SHUTTING_DOWN
            if "shutting down" in reason
            else ReasonCode.ADMINISTRATIVE_ACTION
        )
        self.fail(code, reason)

    def connection_lost(self, reason: str) -> None:
        """The transport ended (EOF, reset) without DISCONNECT."""
        self.finish(reason)

    def finish(self, reason: str) -> None:
        if not self.done:
            self.done = True
            self.can_send = False
            self.close_reason = reason
        self.teardown()
        self.wake()

    def teardown(self) -> None:
        """The connection ended: requeue what was in flight, keep or end the session, and
        publish the will unless DISCONNECT discarded it."""
        if self._torn_down:
            return
        self._torn_down = True
        state = self.state
        if state is None:
            return
        self.outbound.release()
        if self.subscriber is not None:
            self.subscriber.detach()
        if state.live is not self:
            return
        if self.will is not None and not self._will_discarded:
            delay = 0
            if self.version == 5:
                delay = min(self.will.properties.will_delay_interval or 0, state.expiry)
            self.context.schedule_will(state, self.will, delay)
        self.context.sessions.closed(state)

    # -- for inbound / outbound / subscriber -------------------------------------------------
    def send(self, packet: Packet, size: int = 0) -> None:
        """Queue a packet; deliveries (`size` > 0) pause past the write buffer. Raises
        LocalProtocolError only for a PUBLISH larger than the client's maximum packet size;
        any other packet that is too large goes without its properties (`_send_smaller`)."""
        if self.done:
            return
        try:
            self.codec.send(packet)
        except LocalProtocolError as exc:
            if exc.code != ReasonCode.PACKET_TOO_LARGE:
                log.warning("MQTT: not sent to %s: %s", self.connection.peer, exc.text)
                return
            if type(packet) is Publish:
                raise
            if not self._send_smaller(packet, exc.text):
                return
        if size:
            self.queued(size + _PUBLISH_OVERHEAD)
        self.wake()

    @property
    def permissions_vhost(self) -> str:
        """The vhost `authorize` checks in (CheckedLazily)."""
        return self.context.vhost_name

    def transport_full_changed(self, full: bool) -> None:
        """The write buffer filled (or drained): suspend (or resume) the deliveries."""
        if self.subscriber is not None:
            self.subscriber.set_suspended(full)

    def _send_smaller(self, packet: Packet, text: str) -> bool:
        """A reply, refusal or DISCONNECT larger than the client's Maximum Packet Size: sent
        again without its properties, which are then only a reason string and user properties,
        and MQTT 5 says to leave those out ([MQTT-3.2.2-19] and its twins). If it still does
        not fit, the connection closes without it: False."""
        if getattr(packet, "properties", NO_PROPERTIES) is not NO_PROPERTIES:
            with contextlib.suppress(LocalProtocolError):
                self.codec.send(attrs.evolve(packet, properties=NO_PROPERTIES))  # type: ignore[call-arg]  # packet has properties (checked above); mypy knows Packet's fields only
                return True
        log.info("MQTT connection from %s closed: %s", self.connection.peer, text)
        self.finish(text)
        return False

    def fail(self, code: int, text: str, server_reference: str | None = None) -> None:
        """End the connection for a reason of ours; MQTT 5 clients get DISCONNECT first (with
        `server_reference`, the Server Reference property: where to connect instead)."""
        if self.done:
            return
        log.info("MQTT connection from %s closed: %s", self.connection.peer, text)
        if self.version == 5 and self.can_send:
            if text or server_reference:
                props = Properties(
                    reason_string=text[:200] if text else None, server_reference=server_reference
                )
            else:
                props = NO_PROPERTIES
            self.send(Disconnect(code, props))
        self.finish(text)

    def not_master(self, exc: NotMaster) -> None:
        """This node is not (or no longer) its group's master: MQTT 5 gets DISCONNECT 0x9C Use
        another server, with the master's address as Server Reference when known (0x9D Server
        moved is for a permanent move); 3.1.1 is closed. Acks still owed are not sent: their
        messages may or may not survive, and a QoS 1/2 message is resent on reconnect."""
        self.inbound.owed.clear()
        tls = self.connection.tls is not None
        text = exc.text_for("mqtt", tls)
        self.fail(ReasonCode.USE_ANOTHER_SERVER, text, exc.master_for("mqtt", tls))

    # -- dispatch ----------------------------------------------------------------------------
    def _handle(self, packet: Packet) -> None:
        """Every packet but PUBLISH and CONNECT (`receive` handles those itself)."""
        kind = type(packet)
        if kind is PubAck:
            self.outbound.puback(packet.packet_id)  # type: ignore[attr-defined]  # kind is type(packet), which mypy does not narrow on; a cast is a call per packet
        elif kind is PubRec:
            self.outbound.pubrec(packet.packet_id, packet.reason_code)  # type: ignore[attr-defined]  # kind is type(packet), which mypy does not narrow on; a cast is a call per packet
        elif kind is PubRel:
            self.inbound.pubrel(packet)  # type: ignore[arg-type]  # kind is type(packet), which mypy does not narrow on; a cast is a call per packet
        elif kind is PubComp:
            self.outbound.pubcomp(packet.packet_id)  # type: ignore[attr-defined]  # kind is type(packet), which mypy does not narrow on; a cast is a call per packet
        elif kind is Subscribe:
            self._subscribe(cast(Subscribe, packet))
        elif kind is Unsubscribe:
            self._unsubscribe(cast(Unsubscribe, packet))
        elif kind is Disconnect:
            self._disconnect(cast(Disconnect, packet))
        elif kind is Auth:
            self.fail(ReasonCode.PROTOCOL_ERROR, "enhanced authentication is not supported")
        elif kind is not PingReq:  # the codec answers PINGREQ itself
            self.fail(ReasonCode.PROTOCOL_ERROR, f"unexpected {kind.__name__}")

    def _subscribe(self, packet: Subscribe) -> None:
        assert self.subscriber is not None
        codes = self.subscriber.subscribe(packet)
        self.send(SubAck(packet.packet_id, codes))
        self.subscriber.send_retained()

    def _unsubscribe(self, packet: Unsubscribe) -> None:
        assert self.subscriber is not None
        codes = self.subscriber.unsubscribe(packet)
        self.send(UnsubAck(packet.packet_id, codes if self.version == 5 else ()))

    def _disconnect(self, packet: Disconnect) -> None:
        state = self.state
        if self.version == 5:
            # Raising it from 0 is a protocol error the codec answers ([MQTT-3.14.2-2]).
            expiry = packet.properties.session_expiry_interval
            if expiry is not None and state is not None:
                state.expiry = min(expiry, self.config.session_expiry_max)
            if packet.reason_code != ReasonCode.DISCONNECT_WITH_WILL_MESSAGE:
                self._will_discarded = True
        else:
            self._will_discarded = True
        self.finish("client disconnected")

    def _codec_failed(self, exc: RemoteProtocolError) -> None:
        log.info("MQTT protocol error from %s: %s", self.connection.peer, exc.text)
        reply = self.codec.error_reply()
        if reply is not None:
            with contextlib.suppress(LocalProtocolError):  # nothing more can be said
                self.codec.send(reply)
        self.finish(exc.text)

    # -- takeover ----------------------------------------------------------------------------
    def taken_over(self, *, continued: bool) -> None:
        """Another connection CONNECTed with this client id; `continued`: it goes on with
        this session, so the session never ended and its will is not published."""
        if continued:
            self._will_discarded = True
        if self.version == 5 and self.can_send:
            self.send(Disconnect(ReasonCode.SESSION_TAKEN_OVER))
        self.finish("session taken over by a new connection with the same client id")
