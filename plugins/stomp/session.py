"""One STOMP connection's protocol state machine, over the sans-IO codec.

The session decides everything the protocol decides: CONNECT (version, heart-beats, and the
login → virtual host → access → per-user admission flow every protocol shares,
core/session_open.py), each client frame, RECEIPTs, ERRORs, and output backpressure. It does
no I/O: the adapter every protocol shares (core/adapter.py, set up by server.py) feeds it
bytes (`receive`), writes what it produced (the output side, `SessionIO` in
core/session_io.py), and calls `check_timers` at `deadline()`: the handshake deadline, then
the heart-beats, in the one heap of connection deadlines on the kernel's timer task
(core/connection_deadlines.py). An idle connection has no task but the adapter's reader.

Errors: STOMP has one answer to any error, an ERROR frame (a short `message` header, an
explanatory body, and `receipt-id` when the offending frame asked for a receipt), after which
the server closes the connection. Kernel refusals are reported the same way, with the kernel's
reply text as the body.

Receipts leave in the order their frames arrived (receipts.py): a SEND's waits until the store
has made the message durable when it is persistent and reached a durable queue, a COMMIT's
for every such message of the transaction, in a task that runs only while such receipts are
owed. A receipt of a SEND, ACK or NACK inside a transaction says the frame joined the
transaction. A SUBSCRIBE's receipt comes before the subscription's first MESSAGE
(subscriptions.py holds it until then). DISCONNECT's receipt comes after all others, then the
server closes.

Flow control: while a resource alarm is on, a SEND waits before it is acted on, and the
adapter stops reading from a connection that has published, so TCP backpressure reaches the
publisher; consumers keep receiving.

A SEND that a queue refuses (`x-overflow: reject-publish`) is answered with an ERROR
("Message rejected") when it asked for a receipt, like a publisher confirm's nack; without a
receipt it is dropped, as an AMQP publish without confirms is.
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from herald.core.connections import UserConnectionLimit
from herald.core.errors import (
    AccessRefused,
    KernelError,
    LocalProtocolError,
    NotAllowed,
    NotMaster,
    RemoteProtocolError,
)
from herald.core.session_io import SessionIO
from herald.core.session_open import (
    CheckedLazily,
    Credentials,
    Permissions,
    certificate_user,
    log_in,
    open_vhost,
)
from herald.core.vhost import RouteStatus
from herald.plugins.stomp.codec import (
    NEED_DATA,
    VERSIONS,
    Frame,
    Heartbeat,
    LimitExceeded,
    State,
    StompConnection,
    error_frame,
)
from herald.plugins.stomp.errors import FrameError, kernel_error_detail, kernel_error_message
from herald.plugins.stomp.handshake import (
    VERSION_MISMATCH,
    choose_vhost,
    connected_frame,
    parse_connect,
)
from herald.plugins.stomp.publisher import Publisher
from herald.plugins.stomp.receipts import Receipts
from herald.plugins.stomp.subscriptions import Subscriptions
from herald.plugins.stomp.transactions import TRANSACTIONAL, Transactions

if TYPE_CHECKING:
    from herald.core.auth import User
    from herald.core.broker import Broker
    from herald.core.connections import Connection
    from herald.core.vhost import VirtualHost
    from herald.plugins.stomp.codec import StompLimits
    from herald.plugins.stomp.config import StompConfig

log = logging.getLogger(__name__)

_SENDING = frozenset({State.OPEN, State.DISCONNECTING})


class Session(CheckedLazily, SessionIO):
    """The STOMP side of one client connection; `SessionIO` is its output side (the adapter's
    half: output buffer, writer wake-ups, write-buffer backpressure, deadline scheduling)."""

    # Slots: one Session per connection, and idle connections are held by the ten thousand
    # (docs/PERFORMANCE.md); these and SessionIO's.
    __slots__ = (
        "_closing",
        "_handlers",
        "_permissions",
        "_receipts",
        "broker",
        "codecs",
        "config",
        "connection",
        "last_received",
        "last_sent",
        "opened_at",
        "peer_host",
        "published",
        "publisher",
        "receive_interval",
        "send_interval",
        "session_id",
        "store",
        "subscriptions",
        "transactions",
        "user",
        "vhost",
    )

    codec: StompConnection  # SessionIO's slot, typed

    def __init__(
        self,
        broker: Broker,
        config: StompConfig,
        connection: Connection,
        peer_host: str | None,
        limits: StompLimits | None = None,
    ) -> None:
        super().__init__(config.write_buffer)
        self.broker = broker
        self.config = config
        self.connection = connection  # also the owner of this connection's exclusive queues
        self.peer_host = peer_host
        self.codecs = broker.codecs
        self.store = broker.store
        self.codec = StompConnection(config.limits if limits is None else limits)
        self.session_id = "session-" + secrets.token_urlsafe(12)
        self.user: User | None = None  # set when CONNECTED is sent
        self.vhost: VirtualHost = None  # type: ignore[assignment]  # CONNECT sets it; read after
        self.subscriptions = Subscriptions(self)
        connection.channels = self.subscriptions.describe  # the management API's /api/channels
        self.publisher = Publisher(self)
        self.transactions = Transactions()
        self.send_interval = 0.0  # seconds between our heart-beats; 0 = none
        self.receive_interval = 0.0  # seconds between the client's; 0 = not checked
        self.opened_at = self.last_received = self.last_sent = trio.current_time()
        self.published = False  # only publishers are blocked by resource alarms
        self._closing = False  # an ERROR was sent or DISCONNECT received: read nothing more
        # Made on first use, as an idle connection does not need them:
        self._permissions: Permissions | None = None  # by `authorize`
        self._handlers: dict[str, Any] | None = None  # by `_on_frame`
        self._receipts: Receipts | None = None  # by `_add_receipt`

    @property
    def version(self) -> str:
        return self.codec.version

    @property
    def can_send(self) -> bool:
        """Whether MESSAGE and RECEIPT frames can still go out."""
        return not self.done and self.codec.state in _SENDING

    # -- for the adapter ---------------------------------------------------------------------
    async def receive(self, data: bytes) -> None:
        """Handle bytes from the client: every whole frame they complete; b"" at the end of
        its stream (a frame left half sent is answered with an ERROR)."""
        self.last_received = trio.current_time()
        codec = self.codec
        codec.receive_data(data)
        while not self._closing and not self.done:
            try:
                event = codec.next_event()
            except RemoteProtocolError as exc:
                text = exc.text
                cause = exc.__cause__
                if isinstance(cause, LimitExceeded):  # say which setting raises it
                    text = f"{text} ({self.config.limit_key(cause.limit)})"
                self._send_error(codec.error_reply(text), text, text)
                break
            if type(event) is not Frame:
                if type(event) is Heartbeat:
                    continue
                if event is not NEED_DATA:  # ConnectionClosed: gone without DISCONNECT
                    self.connection_lost("client closed the connection")
                break
            command = event.command
            if command == "SEND" and self.broker.alarms.blocked:
                self.published = True  # a blocked publisher: the adapter stops reading too
                await self.broker.alarms.wait_publish_allowed()
                if self.done or self._closing:
                    break
            if command == "CONNECT" or command == "STOMP":
                await self._connect(event)
            else:
                self._on_frame(event)
        receipts = self._receipts
        if receipts:
            receipts.flush()
        if codec.has_output or self.done:
            self.wake()

    def data_to_send(self) -> bytes:
        data = SessionIO.data_to_send(self)
        if data and self.send_interval:
            self.last_sent = trio.current_time()
        return data

    @property
    def reading_paused(self) -> bool:
        """Whether the adapter should stop reading: a publisher while a resource alarm is on."""
        return self.published and self.broker.alarms.blocked and not self._closing

    def deadline(self) -> float:
        """When `check_timers` must run next (Trio clock): the handshake deadline until a
        CONNECT arrives, then (after CONNECTED) our next heart-beat or the client's last
        chance (inf: neither)."""
        if self.done:
            return math.inf
        if self.user is None:
            if self.codec.state is not State.AWAIT_CONNECT:
                return math.inf  # CONNECT came: ours to answer (the login may queue for scrypt)
            return self.opened_at + self.config.handshake_timeout
        deadline = math.inf
        if self.send_interval:
            deadline = self.last_sent + self.send_interval
        if self.receive_interval:
            deadline = min(deadline, self.last_received + 2 * self.receive_interval)
        return deadline

    def check_timers(self, now: float) -> None:
        """Close a connection that sent no CONNECT in time; send a heart-beat if we were
        quiet; give up on a client silent for two of its intervals."""
        if self.done:
            return
        if self.user is None:
            if now >= self.deadline():
                timeout = self.config.handshake_timeout
                self.finish(f"no CONNECT frame within the handshake timeout ({timeout:g}s)")
            return
        if self.reading_paused:
            self.last_received = now  # we are not reading: its heart-beats wait in the socket
        elif self.receive_interval and now - self.last_received >= 2 * self.receive_interval:
            self.finish(f"no heart-beat from the client for {2 * self.receive_interval:g}s")
            return
        if self.send_interval and now - self.last_sent >= self.send_interval:
            self.last_sent = now  # the next one is due an interval on, sent or not
            if self.can_send:
                self.codec.send_heartbeat()
                self.wake()

    def connection_lost(self, reason: str) -> None:
        """The transport ended (EOF, reset) without DISCONNECT."""
        self.finish(reason)

    def close_from_broker(self, reason: str) -> None:
        """The broker's closer (shutdown, vhost deleted, management): an ERROR, then close."""
        if self.codec.state in _SENDING:
            self.fail("Connection closed by the broker", reason)
        else:
            self.finish(reason)

    def not_master(self, exc: NotMaster) -> None:
        """The node was demoted (`Connection.close` with a `NotMaster`): ERROR "Not master"
        naming the master's STOMP address, then close."""
        if self.codec.state in _SENDING:
            self.fail(
                kernel_error_message(exc), kernel_error_detail(exc, self.connection.tls is not None)
            )
        else:
            self.finish(exc.reply_text)

    def teardown(self) -> None:
        """The connection ended: subscriptions cancelled, unsettled messages requeued, no
        more waiting for the store."""
        self._release()
        if self._receipts is not None:
            self._receipts.cancel()

    def _release(self) -> None:
        """Cancel the subscriptions (requeueing what is unsettled) and the transactions."""
        self.subscriptions.release()
        self.transactions.clear()

    def finish(self, reason: str) -> None:
        if not self.done:
            self.done = True
            self.close_reason = reason
        self.teardown()
        self.wake()

    # -- for subscriptions and the publisher -----------------------------------------------------
    @property
    def permissions_vhost(self) -> str:
        """The vhost `authorize` checks in (CheckedLazily)."""
        return self.vhost.name

    def send_message(self, frame: Frame, size: int) -> None:
        """Queue a MESSAGE frame; pause subscriptions once the output passes the write buffer."""
        self.codec.send(frame)
        self.queued(size)
        self.wake()

    def send_encoded_message(self, data: bytes, size: int) -> None:
        """`send_message` for a MESSAGE frame encoded from cached pieces (message_frames.py)."""
        self.codec.send_encoded("MESSAGE", data)
        self.queued(size)
        self.wake()

    def transport_full_changed(self, full: bool) -> None:
        """The write buffer filled (or drained): pause (or resume) the subscriptions."""
        self.subscriptions.apply_suspension(full)

    def fail(
        self, message: str, detail: str, frame: Frame | None = None, receipt_id: str | None = None
    ) -> None:
        """Send an ERROR frame and close the connection."""
        if receipt_id is None and frame is not None:
            receipt_id = frame.get("receipt")
        error = error_frame(message, detail.encode(), receipt_id)
        if message == VERSION_MISMATCH:
            error = Frame("ERROR", (*error.headers, ("version", ",".join(VERSIONS))), error.body)
        self._send_error(error, message, detail)

    def _send_error(self, error: Frame | None, message: str, detail: str) -> None:
        """Send `error` (None: nothing can be sent) and close; nothing more is read."""
        if self.done or self.codec.state is State.CLOSED:
            return
        log.info("stomp error to %s: %s: %s", self.connection.peer, message, detail)
        if error is not None:
            with contextlib.suppress(LocalProtocolError):  # a header this version cannot carry
                self.codec.send(error)
        self._closing = True
        self.finish(f"{message}: {detail}")

    def _add_receipt(
        self,
        receipt_id: str | None,
        ticket: int | None = None,
        final: bool = False,
        then: Callable[[], None] | None = None,
    ) -> None:
        receipts = self._receipts
        if receipts is None:
            receipts = self._receipts = Receipts(self)
        receipts.add(receipt_id, ticket, final, then)

    # -- client frames ---------------------------------------------------------------------------
    def _on_frame(self, frame: Frame) -> None:
        """Any frame but CONNECT (the only one that waits, for the password check)."""
        command = frame.command
        if command == "DISCONNECT":
            self._closing = True
            self._release()  # its receipts may still wait for the store
            # Closes after the receipts asked for before it, with its own or without one.
            self._add_receipt(frame.get("receipt"), final=True)
            return
        then = None
        try:
            transaction = frame.get("transaction") if command in TRANSACTIONAL else None
            if transaction is not None:
                self.transactions.add(transaction, frame)
                ticket = None
            elif command == "SUBSCRIBE":
                ticket = None
                then = self.subscriptions.subscribe(frame)  # held until its receipt is out
            else:
                handlers = self._handlers
                if handlers is None:
                    handlers = self._make_handlers()
                ticket = handlers[command](frame)
        except FrameError as exc:
            self.fail(exc.message, exc.detail, frame)
            return
        except KernelError as exc:
            tls = self.connection.tls is not None
            self.fail(kernel_error_message(exc), kernel_error_detail(exc, tls), frame)
            return
        receipt = frame.get("receipt")
        if receipt is not None:
            self._add_receipt(receipt, ticket, then=then)

    def _make_handlers(self) -> dict[str, Any]:
        """Bound methods by command: one call per frame, no wrapper (made at the first frame
        after CONNECT, so an idle connection does not hold them)."""
        subscriptions, transactions = self.subscriptions, self.transactions
        self._handlers = {
            "SEND": self._send,
            "UNSUBSCRIBE": subscriptions.unsubscribe,
            "ACK": subscriptions.settle,
            "NACK": subscriptions.settle,
            "BEGIN": transactions.begin,
            "COMMIT": self._commit,
            "ABORT": transactions.abort,
        }
        return self._handlers

    def _send(self, frame: Frame) -> int | None:
        result = self.publisher.send(frame)
        if result.status is RouteStatus.REJECTED:
            if frame.get("receipt") is not None:
                raise FrameError(
                    "Message rejected",
                    f"a queue refused the message sent to {frame.get('destination')} "
                    "(it is full and its x-overflow is reject-publish)",
                )
            log.debug("stomp SEND to %s rejected by a full queue", frame.get("destination"))
        return result.ticket

    def _commit(self, frame: Frame) -> int | None:
        """Act on the transaction's frames in order; the receipt waits for the last stored one."""
        handlers = self._handlers
        assert handlers is not None  # COMMIT came through them
        ticket = None
        for held in self.transactions.commit(frame):
            stored = handlers[held.command](held)
            if stored is not None:
                ticket = stored
        return ticket

    # -- CONNECT -------------------------------------------------------------------------------
    async def _connect(self, frame: Frame) -> None:
        """Answer CONNECT: the shared login flow (core/session_open.py), then CONNECTED; each
        refusal an ERROR with the words STOMP clients have always had from herald."""
        broker, connection = self.broker, self.connection
        try:
            request = parse_connect(frame, self.config, certificate_user(broker, connection))
        except FrameError as exc:
            self.fail(exc.message, exc.detail)
            return
        # A certificate's user: no credentials, `log_in` takes the certificate; anonymous:
        # the configured default login and passcode, checked like any password.
        credentials = (
            Credentials(None)
            if request.certificate
            else Credentials(request.login, request.passcode)
        )
        try:
            user = await log_in(broker, connection, self.peer_host, credentials)
        except AccessRefused:
            self.fail("Access refused", f"access refused for user '{request.login}'")
            return
        if self.done:
            return  # closed (broker shutdown, handshake timeout) while the password was checked
        try:
            name = choose_vhost(request, broker.vhosts, self.config)
            self.vhost = open_vhost(broker, connection, user, name)  # admitted by user name
        except FrameError as exc:
            self.fail(exc.message, exc.detail)
            return
        except UserConnectionLimit as exc:
            self.fail("Not allowed", exc.reply_text)
            return
        except NotAllowed as exc:  # no access to the virtual host
            self.fail("Access refused", exc.reply_text)
            return
        self.user = user
        self.send_interval = request.send_ms / 1000
        self.receive_interval = request.receive_ms / 1000
        self.codec.version = request.version  # before CONNECTED: later frames are read under it
        self.codec.send(connected_frame(request, self.session_id))
        self.last_received = self.last_sent = trio.current_time()  # the login took a while
        self.reschedule_timers()  # the first heart-beat may come before the handshake deadline
