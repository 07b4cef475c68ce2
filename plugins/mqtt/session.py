"""One MQTT connection's protocol state machine, over the sans-IO codec.

The session decides everything the protocol leaves to the server: CONNECT (authentication,
client id, clean start and session expiry, takeover of a client id already connected), the
keep alive and handshake deadlines, DISCONNECT and wills, and what to do when the client
breaks the protocol. Publishing is `inbound.py`, delivering `outbound.py`, subscribing
`subscriber.py`, who a CONNECT logs in as (password, certificate, anonymous) `login.py`.
It does no I/O: the Trio adapter (server.py) feeds it bytes (`receive`), writes what it
produced (`data_to_send`, signalled by `wait_output`), and calls `check_timers` at
`deadline()` (one task for all sessions: deadlines.py).

A codec `RemoteProtocolError` ends only this connection: the codec's `error_reply()` (a
refusing CONNACK, or an MQTT 5 DISCONNECT with the reason code) is written, then the socket
is closed, and the will is published as for any connection that ends without DISCONNECT.
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
from typing import TYPE_CHECKING, Any

import trio

from herald.core.auth import PermissionKind
from herald.core.errors import (
    AccessRefused,
    KernelError,
    LocalProtocolError,
    NotAllowed,
    RemoteProtocolError,
)
from herald.plugins.mqtt import channels, login
from herald.plugins.mqtt.codec import (
    NEED_DATA,
    NO_PROPERTIES,
    Auth,
    ConnAck,
    Connect,
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
from herald.plugins.mqtt.codec.reasons import CONNACK_V3_RETURN_CODE
from herald.plugins.mqtt.config import SESSION_NEVER_EXPIRES
from herald.plugins.mqtt.inbound import Inbound
from herald.plugins.mqtt.outbound import Outbound
from herald.plugins.mqtt.subscriber import Subscriber

if TYPE_CHECKING:
    from collections.abc import Callable

    from herald.core.auth import User
    from herald.core.connections import Connection
    from herald.plugins.mqtt.codec import Will
    from herald.plugins.mqtt.context import MQTTContext
    from herald.plugins.mqtt.registry import SessionState

log = logging.getLogger(__name__)

_PUBLISH_OVERHEAD = 16  # fixed header, packet id, property lengths of one PUBLISH, roughly


class Session:
    """The MQTT side of one client connection."""

    # Slots: one Session per connection, 10,000 idle ones in the RSS target (PERFORMANCE.md);
    # a string split keeps the 34 names in 5 lines.
    __slots__ = tuple(
        "_authz _connect_received _in_flight _output _present _queued _signalled _torn_down "  # noqa: SIM905
        "_will_discarded broker can_send close_reason codec config connection context "
        "done inbound keepalive last_received opened_at outbound peer_host "
        "problem_information published spawn_writer state subscriber timer_at "
        "transport_full user version will writer_running".split()
    )

    describe = channels.describe  # a method: `Connection.channels` holds it bound

    def __init__(self, context: MQTTContext, connection: Connection, peer_host: str | None) -> None:
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
        self.transport_full = False
        self.done = False  # nothing more to read; the adapter flushes and closes
        self.can_send = False
        """CONNACK accepted the client and the session is not done: deliveries may go out.
        A plain attribute (set in `_connect`, cleared by `finish`): read once per delivery."""
        self.close_reason = "client closed the connection"
        self.opened_at = self.last_received = trio.current_time()
        self._present = False  # CONNACK's "session present"
        self._connect_received = False
        self._will_discarded = False
        self._torn_down = False
        # Made on first use, as an idle connection needs neither (PERFORMANCE.md):
        self._authz: set[tuple[str, str, str]] | None = None  # by `authorize`
        self._output: trio.Event | None = None  # while `wait_output` waits
        self._signalled = False  # output since the last `wait_output`
        self._queued = self._in_flight = 0
        self.timer_at: float | None = None  # the deadline of this session's entry in Deadlines
        self.spawn_writer: Callable[[], None] | None = None  # set by the adapter (server.py)
        self.writer_running = False

    # -- for the adapter ---------------------------------------------------------------------
    async def receive(self, data: bytes) -> None:
        """Handle bytes from the client: every whole packet they complete."""
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
                    self.inbound.publish(packet)  # type: ignore[arg-type]
                elif kind is PubAck:  # as `_handle` would, one call less per delivery
                    self.outbound.puback(packet.packet_id)  # type: ignore[attr-defined]
                elif kind is Connect:
                    self._connect_received = True
                    await self._connect(packet)  # type: ignore[arg-type]
                else:
                    self._handle(packet)  # type: ignore[arg-type]
        except RemoteProtocolError as exc:
            self._codec_failed(exc)
        if self.inbound.owed:
            await self.inbound.flush()
        self._wake()

    def data_to_send(self) -> bytes:
        data = self.codec.data_to_send()
        self._in_flight = len(data)
        self._queued = 0
        return data

    def written(self) -> None:
        """The adapter wrote the last `data_to_send`: resume deliveries if the backlog drained."""
        self._in_flight = 0
        if self.transport_full and self._queued < self.config.write_buffer // 2:
            self._set_transport_full(False)

    def output_pending(self) -> bool:
        """Whether output was signalled since the last `wait_output`."""
        return self._signalled

    async def wait_output(self) -> None:
        """Return once there is something to write, or the session is done."""
        if self._signalled:
            await trio.lowlevel.checkpoint()
        else:
            self._output = trio.Event()
            try:
                await self._output.wait()
            finally:
                self._output = None
        self._signalled = False

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
        self._wake()

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
        LocalProtocolError only for a PUBLISH larger than the client's maximum packet size."""
        if self.done:
            return
        try:
            self.codec.send(packet)
        except LocalProtocolError as exc:
            if exc.code == ReasonCode.PACKET_TOO_LARGE:
                raise
            log.warning("MQTT: not sent to %s: %s", self.connection.peer, exc.text)
            return
        if size:
            self._queued += size + _PUBLISH_OVERHEAD
            if (
                not self.transport_full
                and self._queued + self._in_flight > self.config.write_buffer
            ):
                self._set_transport_full(True)
        self._wake()

    def authorize(self, permission: Any, kind: str, name: str) -> None:
        """broker.authorize, remembered for the connection (AccessRefused if not allowed)."""
        key = (str(permission), kind, name)
        authz = self._authz
        if authz is not None and key in authz:
            return
        assert self.user is not None
        self.broker.authorize(self.user, self.context.vhost_name, permission, kind, name)
        if authz is None or len(authz) >= 256:
            self._authz = authz = set()
        authz.add(key)

    def fail(self, code: int, text: str) -> None:
        """End the connection for a reason of ours; MQTT 5 clients get DISCONNECT first."""
        if self.done:
            return
        log.info("MQTT connection from %s closed: %s", self.connection.peer, text)
        if self.version == 5 and self.can_send:
            props = Properties(reason_string=text[:200]) if text else NO_PROPERTIES
            self.send(Disconnect(code, props))
        self.finish(text)

    # -- dispatch ----------------------------------------------------------------------------
    def _handle(self, packet: Packet) -> None:
        """Every packet but PUBLISH and CONNECT (`receive` handles those itself)."""
        kind = type(packet)
        if kind is PubAck:
            self.outbound.puback(packet.packet_id)  # type: ignore[attr-defined]
        elif kind is PubRec:
            self.outbound.pubrec(packet.packet_id, packet.reason_code)  # type: ignore[attr-defined]
        elif kind is PubRel:
            self.inbound.pubrel(packet)  # type: ignore[arg-type]
        elif kind is PubComp:
            self.outbound.pubcomp(packet.packet_id)  # type: ignore[attr-defined]
        elif kind is Subscribe:
            self._subscribe(packet)  # type: ignore[arg-type]
        elif kind is Unsubscribe:
            self._unsubscribe(packet)  # type: ignore[arg-type]
        elif kind is Disconnect:
            self._disconnect(packet)  # type: ignore[arg-type]
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
            expiry = packet.properties.session_expiry_interval
            if expiry is not None and state is not None:
                if state.expiry == 0 and expiry:
                    log.info("MQTT client %r: session expiry 0 cannot grow", state.client_id)
                else:
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

    # -- CONNECT -----------------------------------------------------------------------------
    async def _connect(self, packet: Connect) -> None:
        self.version = packet.protocol_level
        props = packet.properties
        self.problem_information = props.request_problem_information is not False
        if props.authentication_method is not None:
            self._refuse(
                ReasonCode.BAD_AUTHENTICATION_METHOD, "enhanced authentication is not supported"
            )
            return
        user = await login.authenticate(self, packet)
        if isinstance(user, login.Refusal):
            self._refuse(user.code, user.text)
            return
        if self.done:
            return
        context = self.context
        try:
            if context.vhost_name not in self.broker.vhosts:
                raise AccessRefused(f"vhost '{context.vhost_name}' not found")
            self.broker.users.check_vhost_access(user, context.vhost_name)
            self.user = user
            if packet.will is not None:
                self.authorize(PermissionKind.WRITE, "exchange", self.config.exchange)
        except KernelError as exc:
            self._refuse(ReasonCode.NOT_AUTHORIZED, exc.reply_text)
            return
        if packet.will is not None and packet.will.retain and not context.retain_available:
            self._refuse(ReasonCode.RETAIN_NOT_SUPPORTED, "retained messages are disabled")
            return
        try:  # counted before a session is taken over: a refused login changes nothing
            self.broker.connections.admit(self.connection, user.name)
        except NotAllowed as exc:
            self._refuse(ReasonCode.QUOTA_EXCEEDED, exc.reply_text)
            return
        client_id = packet.client_id
        assigned = None
        if not client_id:
            client_id = "herald-" + secrets.token_hex(8)
            assigned = client_id if self.version == 5 else None
        if self.version == 5:
            requested = props.session_expiry_interval or 0
        else:
            requested = 0 if packet.clean_start else SESSION_NEVER_EXPIRES
        expiry = min(requested, self.config.session_expiry_max)
        self._take_session(client_id, packet, expiry)
        state = self.state
        assert state is not None
        keepalive, server_keepalive = packet.keepalive, None
        if self.config.keepalive_max and keepalive > self.config.keepalive_max:
            keepalive = self.config.keepalive_max
            server_keepalive = keepalive if self.version == 5 else None
        self.keepalive = keepalive
        window = self.config.max_inflight
        if self.version == 5 and props.receive_maximum:
            window = min(window, props.receive_maximum)
        self.subscriber = Subscriber(self, window)
        self.will = packet.will
        self.connection.vhost = context.vhost_name
        self.connection.client = client_id
        self.connection.channels = self.describe  # the management API's /api/channels
        ack_props = NO_PROPERTIES
        if self.version == 5:
            ack_props = Properties(
                session_expiry_interval=expiry if expiry != requested else None,
                receive_maximum=self.config.max_inflight,
                maximum_packet_size=self.config.max_packet_size,
                topic_alias_maximum=self.config.topic_alias_maximum or None,
                retain_available=False if not context.retain_available else None,
                assigned_client_identifier=assigned,
                server_keep_alive=server_keepalive,
            )
        self.send(ConnAck(ReasonCode.SUCCESS, self._present, ack_props))
        self.can_send = not self.done and self.codec.connected
        self.context.deadlines.schedule(self)
        context.sessions.save(state)
        self.outbound.resend_pubrels()
        self.subscriber.attach()

    def _take_session(self, client_id: str, packet: Connect, expiry: int) -> None:
        """Take over a client id: close its connection if it has one, settle a pending will."""
        sessions = self.context.sessions
        state = sessions.get(client_id)
        if state is not None and state.live is not None:
            state.live.taken_over()
        if state is not None and state.pending_will is not None:
            if packet.clean_start:
                self.context.fire_will(state)  # the old session ends now
            else:
                self.context.cancel_will(state)  # resumed before the will delay passed
        self.state, self._present = sessions.open(
            client_id, clean=packet.clean_start, expiry=expiry
        )
        self.state.live = self

    def taken_over(self) -> None:
        """Another connection CONNECTed with this client id."""
        if self.version == 5 and self.can_send:
            self.send(Disconnect(ReasonCode.SESSION_TAKEN_OVER))
        self.finish("session taken over by a new connection with the same client id")

    def _refuse(self, code: int, text: str) -> None:
        """Answer CONNECT with a refusing CONNACK, then close."""
        log.info("MQTT connection from %s refused: %s", self.connection.peer, text)
        if self.version < 5 and code not in CONNACK_V3_RETURN_CODE:
            code = ReasonCode.SERVER_UNAVAILABLE
        props = Properties(reason_string=text) if self.version == 5 else NO_PROPERTIES
        try:
            self.codec.send(ConnAck(code, properties=props))
        except LocalProtocolError as exc:
            log.debug("refusing CONNACK not sent: %s", exc.text)
        self.finish(text)

    # -- internals ---------------------------------------------------------------------------
    def _wake(self) -> None:
        if not self._signalled:
            self._signalled = True
            if self._output is not None:
                self._output.set()
        if not self.writer_running and self.spawn_writer is not None:
            self.writer_running = True  # an idle connection has no writer task (server.py)
            self.spawn_writer()

    def _set_transport_full(self, full: bool) -> None:
        self.transport_full = full
        if self.subscriber is not None:
            self.subscriber.set_suspended(full)
