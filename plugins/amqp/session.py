"""One AMQP 0-9-1 connection's protocol state machine, over the sans-IO codec.

The session owns everything the protocol decides: the handshake (handshake.py: start, start-ok
and open through the kernel's session-opening flow, tune), channels and their errors,
connection.close in both directions, heartbeats (what to send, when the peer is dead),
connection.blocked, publisher confirms waiting on the store, and output backpressure. It does
no I/O: the shared adapter (core/adapter.py) feeds it bytes and writes what it produced
(`SessionIO`); its deadlines (handshake, heartbeats, close-ok) are one entry in the kernel's
heap of connection deadlines, and a wait for durability is a task only while confirms are owed.

Errors follow RabbitMQ (docs/amqp.md "Errors"): a kernel error that is not connection-level
closes its channel; a connection-level one or a protocol error closes the connection. A frame
the codec cannot parse, or a stream ended inside one, ends the session at once after the
codec's connection.close (`error_reply`); what follows the last frame is never parsed
(`lingers`: the adapter drops it rather than reset the connection). `NotMaster` nacks every
confirm still owed, then closes 320 CONNECTION_FORCED naming the master when known.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import trio

from herald.core.errors import (
    KernelError,
    LocalProtocolError,
    NotMaster,
    PreconditionFailed,
    RemoteProtocolError,
)
from herald.core.session_io import SessionIO
from herald.plugins.amqp.channel import Channel, ChannelState
from herald.plugins.amqp.codec import (
    NEED_DATA,
    AMQPConnection,
    ConnectionClosed,
    ConnectionState,
    ContentTooLarge,
    Delivery,
    Heartbeat,
    Message,
    MethodFrame,
    ProtocolHeader,
    ReplyCode,
)
from herald.plugins.amqp.codec.constants import reply_text
from herald.plugins.amqp.codec.methods import (
    ChannelClose,
    ChannelCloseOk,
    ChannelOpen,
    ChannelOpenOk,
    ConnectionBlocked,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionUnblocked,
    ConnectionUpdateSecret,
    ConnectionUpdateSecretOk,
    Method,
    TxCommit,
)
from herald.plugins.amqp.codec.state import RUNNING
from herald.plugins.amqp.confirms import DurableConfirms
from herald.plugins.amqp.handshake import Handshake

if TYPE_CHECKING:
    from collections.abc import Mapping

    from herald.core.auth import User
    from herald.core.broker import Broker
    from herald.core.connections import Connection
    from herald.core.session_open import Permissions
    from herald.core.vhost import VirtualHost
    from herald.plugins.amqp.config import AMQPConfig

log = logging.getLogger(__name__)

_SENDING = RUNNING  # the codec's states where a connection.close may start, as error_reply's
_DELIVERY_OVERHEAD = 64  # frame headers and the method frame of one delivery, roughly
_NO_CAPABILITIES: frozenset[str] = frozenset()  # shared: an empty frozenset is no singleton


class Session(SessionIO):
    """The AMQP side of one client connection."""

    __slots__ = (
        "_blocked_sent",
        "_close_by",
        "_closing",
        "_handshake_by",
        "_next_heartbeat",
        "_opened",
        "broker",
        "capabilities",
        "channel_max",
        "channels",
        "codecs",
        "config",
        "confirms",
        "connection",
        "handshake",
        "heartbeat",
        "last_received",
        "linger",
        "peer_host",
        "permissions",
        "published",
        "store",
        "user",
        "user_name",
        "vhost",
    )

    codec: AMQPConnection

    def __init__(
        self, broker: Broker, config: AMQPConfig, connection: Connection, peer_host: str | None
    ) -> None:
        super().__init__(config.write_buffer)
        self.broker = broker
        self.config = config
        self.connection = connection  # also the owner of this connection's exclusive queues
        self.peer_host = peer_host
        self.codecs = broker.codecs
        self.store = broker.store
        self.codec = AMQPConnection(max_message_size=config.max_message_size)
        self.channels: dict[int, Channel] = {}
        connection.channels = self.describe_channels  # the management API's /api/channels
        self.user: User | None = None
        self.user_name = ""
        self.vhost: VirtualHost = None  # type: ignore[assignment]  # set by connection.open
        self.permissions: Permissions | None = None  # set by connection.open
        self.capabilities = _NO_CAPABILITIES
        self.channel_max = config.channel_max
        self.heartbeat = 0  # negotiated seconds; 0 = none
        self.published = False  # RabbitMQ blocks only connections that publish
        self._opened = False  # connection.open-ok went out
        self.linger = False  # ended by a goodbye frame: the adapter drains input before closing
        now = trio.current_time()
        self.last_received = now
        self.handshake = Handshake(self)
        self._closing = False
        self._blocked_sent = False
        # Deadlines (Trio clock), math.inf for none: see `check_timers`.
        self._handshake_by = now + config.handshake_timeout  # until connection.open-ok
        self._close_by = math.inf  # close-ok due, once the server sent connection.close
        self._next_heartbeat = math.inf  # once tune-ok negotiated a heartbeat
        self.confirms = DurableConfirms(self)

    def describe_channels(self) -> list[Mapping[str, Any]]:
        """The open channels as RabbitMQ's management API shows them."""
        return [
            {
                "number": channel.id,
                "consumer_count": len(channel.consumers.by_tag),
                "messages_unacknowledged": len(channel.consumers.unacked),
                "prefetch_count": channel.consumers.prefetch_count,
                "global_prefetch_count": channel.consumers.shared.count_limit,
                "confirm": channel.publisher.confirm,
                "transactional": channel.publisher.tx,
            }
            for channel in self.channels.values()
        ]

    # -- for the adapter ---------------------------------------------------------------------
    async def receive(self, data: bytes) -> None:
        """Handle bytes from the client: every whole event they complete (b"": its end)."""
        self.last_received = trio.current_time()
        codec = self.codec
        codec.receive_data(data)
        try:
            while not self.done:
                event = codec.next_event()
                if event is NEED_DATA:
                    break
                kind = type(event)
                # `kind is`, one type() per event, on the hot path: mypy does not narrow on it.
                if kind is Message:
                    self._on_publish(event)  # type: ignore[arg-type]  # kind is Message
                elif kind is MethodFrame:
                    frame: MethodFrame = event  # type: ignore[assignment]  # kind is MethodFrame
                    channel, method = frame.channel, frame.method
                    if not channel:
                        await self._on_connection_method(method)
                    elif type(method) is TxCommit:
                        await self._tx_commit(channel, method)
                    else:
                        self._on_channel_method(channel, method)
                elif kind is ProtocolHeader:
                    self.handshake.start()
                elif isinstance(event, ContentTooLarge):
                    self._content_too_large(event)
                elif kind is ConnectionClosed:  # the client ended its stream between frames
                    self.connection_lost("client closed the connection")
                    break
                elif kind is not Heartbeat:
                    raise RemoteProtocolError(f"unexpected {event!r}", 505)
        except RemoteProtocolError as exc:
            self._codec_failed(exc)
        self.confirms.flush()

    @property
    def reading_paused(self) -> bool:
        """Whether the adapter should stop reading: a publisher while a resource alarm is on."""
        return self.published and self.broker.alarms.blocked and not self._closing

    @property
    def lingers(self) -> bool:
        return self.linger

    def deadline(self) -> float:
        return min(self._handshake_by, self._close_by, self._next_heartbeat)

    def check_timers(self, now: float) -> None:
        """A deadline came: close-ok never came, the handshake took too long, or it is time for
        a heartbeat (every heartbeat/2 seconds: send one, give up on a peer silent too long)."""
        if self.done:
            return
        if now >= self._close_by:
            self.finish("connection.close-ok not received in time")
        elif now >= self._handshake_by:
            self.finish(f"handshake timeout ({self.config.handshake_timeout}s)")
        elif now >= self._next_heartbeat:
            self._next_heartbeat = now + self.heartbeat / 2
            if self.reading_paused:
                self.last_received = now  # we are not reading: its heartbeats wait in the socket
            elif now - self.last_received > 2 * self.heartbeat:
                self.finish(f"missed heartbeats from client, timeout: {self.heartbeat}s")
                return
            if self.codec.state in _SENDING:
                self.codec.send(Heartbeat())
                self.wake()

    def connection_lost(self, reason: str) -> None:
        self.finish(reason)

    def close_from_broker(self, reason: str) -> None:
        """The broker's closer (shutdown, vhost deleted, management): 320 CONNECTION_FORCED."""
        self.close(ReplyCode.CONNECTION_FORCED, reason)

    def not_master(self, exc: NotMaster, method: type[Method] | None = None) -> None:
        """This node is not (or no longer) its group's master: nack every confirm still owed
        (the messages may or may not survive: a nack is not a loss), then close with 320
        CONNECTION_FORCED naming the master, for the client to reconnect there."""
        if self._closing or self.done:
            return
        self.confirms.fail_all()
        text = exc.text_for("amqp", self.connection.tls is not None)
        log.info("amqp connection from %s closed: %s", self.connection.peer, text)
        self.close(exc.reply_code, text, method)

    def teardown(self) -> None:
        """The connection ended: give every channel's consumers and messages back."""
        channels, self.channels = self.channels, {}
        for channel in channels.values():
            channel.state = ChannelState.CLOSING
            channel.release()

    def finish(self, reason: str) -> None:
        """Nothing more to read: the adapter writes what is left and closes."""
        if not self.done:
            self.done = True
            self.close_reason = reason
        self.teardown()
        self.wake()

    def transport_full_changed(self, full: bool) -> None:
        """Suspend (or resume) every consumer: the socket's backlog passed `write_buffer`."""
        for channel in list(self.channels.values()):
            channel.consumers.apply_suspension(full)

    # -- for the handshake -------------------------------------------------------------------
    def start_heartbeats(self, seconds: int) -> None:
        """connection.tune-ok negotiated `seconds`: the first heartbeat is due in half that."""
        self.heartbeat = seconds
        if seconds:
            self._next_heartbeat = trio.current_time() + seconds / 2
            self.reschedule_timers()

    def alarms_changed(self, active: frozenset[str]) -> None:
        """Tell a client that asked for it (capability connection.blocked); the connection
        registry calls this when the broker's resource alarms change."""
        if not self._opened or self._closing:
            return
        if active and not self._blocked_sent:
            reason = "low on " + ", ".join(sorted(active))
            self.send_method(0, ConnectionBlocked(reason))
            self._blocked_sent = True
        elif not active and self._blocked_sent:
            self.send_method(0, ConnectionUnblocked())
            self._blocked_sent = False

    # -- for channels ------------------------------------------------------------------------
    def capable(self, capability: str) -> bool:
        return capability in self.capabilities

    def send_method(self, channel: int, method: Method) -> None:
        try:
            self.codec.send(MethodFrame(channel, method))
        except LocalProtocolError:  # closed in the meantime: nobody to tell
            return
        self.wake()

    def send_delivery(self, event: Delivery, counted: bool = False) -> None:
        """Queue a content (deliver, get-ok, return); suspend consumers past the buffer."""
        if self.codec.state is not ConnectionState.OPEN:
            return  # closing: the entry stays unacked and goes back with its channel
        self.codec.send(event)
        if not counted:
            self.count_output(event)
        self.wake()

    def deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        raw_properties: bytes,
        body: bytes,
    ) -> None:
        """`send_delivery` of a basic.deliver, without building the events (once per message)."""
        codec = self.codec
        if codec.state is not ConnectionState.OPEN:
            return  # closing: the entry stays unacked and goes back with its channel
        codec.send_deliver(
            channel, consumer_tag, delivery_tag, redelivered, exchange, routing_key,
            raw_properties, body,
        )  # fmt: skip
        self.queued(len(body) + len(raw_properties) + _DELIVERY_OVERHEAD)
        self.wake()

    def count_output(self, event: Delivery) -> None:
        """Add a content to the write backlog; past `write_buffer`, suspend every consumer."""
        properties = event.properties  # raw bytes here, as deliveries are sent
        size = len(properties) if isinstance(properties, bytes) else 0
        self.queued(len(event.body) + size + _DELIVERY_OVERHEAD)

    def close(self, code: int, text: str, method: type[Method] | None = None) -> None:
        """Close the connection with connection.close (or at once before the handshake)."""
        if self._closing or self.done:
            return
        goodbye = None
        if self.codec.state in _SENDING:
            class_id, method_id = (method.CLASS_ID, method.METHOD_ID) if method else (0, 0)
            close = ConnectionClose(code, reply_text(code, text), class_id, method_id)
            goodbye = MethodFrame(0, close)
        self._say_goodbye(goodbye, text)

    # -- internals ---------------------------------------------------------------------------
    def _say_goodbye(self, goodbye: MethodFrame | None, text: str) -> None:
        """Send connection.close and wait `close_timeout` for close-ok; with nothing to send
        (no protocol header yet, or close already exchanged), end at once."""
        self._closing = True
        self.close_reason = text
        self.teardown()
        if goodbye is None:
            self.finish(text)
            return
        self.send_method(goodbye.channel, goodbye.method)
        self._close_by = trio.current_time() + self.config.close_timeout
        self.reschedule_timers()

    def _codec_failed(self, exc: RemoteProtocolError) -> None:
        """The codec cannot go on: send its connection.close if it has one, then hang up."""
        log.info("amqp protocol error from %s: %s", self.connection.peer, exc.text)
        goodbye = self.codec.error_reply()
        if goodbye is not None and not self._closing and not self.done:
            self._say_goodbye(goodbye, exc.text)
        self.linger = True  # connection.close or our protocol header is the last frame
        self.finish(exc.text)

    # -- connection methods ------------------------------------------------------------------
    async def _on_connection_method(self, method: Method) -> None:
        kind = type(method)
        if kind is ConnectionClose:
            self.teardown()
            self.send_method(0, ConnectionCloseOk())
            self.linger = True  # frames the client sent after its close are still coming
            self.finish(self.close_reason if self._closing else "client closed the connection")
            return
        if kind is ConnectionCloseOk:
            self.linger = True
            self.finish(self.close_reason)
            return
        if self._closing:
            return
        if kind is ConnectionUpdateSecret:
            self.send_method(0, ConnectionUpdateSecretOk())
            return
        await self.handshake.handle(method)

    def opened(self, vhost: VirtualHost, permissions: Permissions) -> None:
        """connection.open-ok went out: channels may open. The handshake deadline is over;
        a client that asked for connection.blocked hears of alarm changes from now on, and
        of those on already."""
        self.vhost = vhost
        self.permissions = permissions
        self._opened = True
        self._handshake_by = math.inf
        if self.capable("connection.blocked"):
            self.connection.alarms_changed = self.alarms_changed
            self.alarms_changed(self.broker.alarms.active)

    # -- channels ----------------------------------------------------------------------------
    def _on_channel_method(self, channel_id: int, method: Method) -> None:
        if self._closing:
            return
        kind = type(method)
        channel = self.channels.get(channel_id)
        try:
            if channel is None:
                if kind is ChannelOpen:
                    self._open_channel(channel_id)
                elif kind is not ChannelCloseOk:  # a late close-ok is harmless
                    raise RemoteProtocolError(
                        f"expected 'channel.open' on channel {channel_id}", 504
                    )
                return
            if channel.state is ChannelState.CLOSING:
                if kind is ChannelCloseOk:
                    del self.channels[channel_id]
                elif kind is ChannelClose:
                    self.send_method(channel_id, ChannelCloseOk())
                return
            if kind is ChannelClose:
                del self.channels[channel_id]
                channel.closed_by_client()
            elif kind is ChannelOpen:
                raise RemoteProtocolError(
                    f"second 'channel.open' seen on channel {channel_id}", 504
                )
            elif kind is not ChannelCloseOk:
                channel.handle(method)
        except Exception as exc:
            self._failed(channel, exc, kind)

    def _failed(self, channel: Channel | None, exc: Exception, kind: type[Method]) -> None:
        """Answer a failed method: channel.close for a channel error, else connection.close."""
        if isinstance(exc, NotMaster):  # a publish, a declare, a tx.commit this node refused
            self.not_master(exc, kind)
        elif isinstance(exc, KernelError):
            if exc.connection_level or channel is None:
                self.close(exc.reply_code, exc.reply_text, kind)
            elif channel.open:
                channel.fail(exc.reply_code, reply_text(exc.reply_code, exc.reply_text), kind)
        elif isinstance(exc, RemoteProtocolError):
            self.close(exc.code or ReplyCode.INTERNAL_ERROR, exc.text, kind)
        else:  # a bug: close this connection, keep the broker and everyone else going
            log.exception("amqp %s failed on %s", kind.NAME, self.connection.peer)
            self.close(ReplyCode.INTERNAL_ERROR, f"internal error in {kind.NAME}", kind)

    def _open_channel(self, channel_id: int) -> None:
        if channel_id > self.channel_max:
            raise RemoteProtocolError(
                f"channel {channel_id} exceeds the negotiated channel_max {self.channel_max}", 530
            )
        channel = self.channels[channel_id] = Channel(self, channel_id)
        self.send_method(channel_id, ChannelOpenOk())
        if self.transport_full:
            channel.consumers.apply_suspension(True)

    def _on_publish(self, event: Message) -> None:
        channel = self.channels.get(event.channel)
        if self._closing:
            return
        if channel is None:
            self.close(
                504, f"expected 'channel.open' on channel {event.channel}", type(event.method)
            )
            return
        if not channel.open:
            return
        try:
            channel.publish(event)
        except Exception as exc:
            self._failed(channel, exc, type(event.method))

    def _content_too_large(self, event: ContentTooLarge) -> None:
        channel = self.channels.get(event.channel)
        error = PreconditionFailed(  # RabbitMQ's text, and the key that raises the limit
            f"message size {event.body_size} is larger than configured max size"
            f" {self.config.max_message_size} (amqp.max_message_size)"
        )
        if channel is not None and channel.open:
            self._failed(channel, error, type(event.method))

    async def _tx_commit(self, channel_id: int, method: TxCommit) -> None:
        channel = self.channels.get(channel_id)
        if channel is None or not channel.open:
            self._on_channel_method(channel_id, method)
            return
        try:
            await channel.publisher.tx_commit()
        except Exception as exc:
            self._failed(channel, exc, TxCommit)
