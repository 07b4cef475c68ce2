"""One STOMP connection's protocol state machine, over the sans-IO codec.

The session decides everything the protocol decides: CONNECT (version, virtual host, login
through `broker.authenticate`, heart-beats), each client frame, RECEIPTs, ERRORs, and output
backpressure. It does no I/O: the Trio adapter (server.py) feeds it bytes (`receive`), writes
what it produced (`data_to_send`, signalled by `wait_output`) and runs its timers.

Errors: STOMP has one answer to any error, an ERROR frame (a short `message` header, an
explanatory body, and `receipt-id` when the offending frame asked for a receipt), after which
the server closes the connection. Kernel refusals are reported the same way, with the kernel's
reply text as the body.

Receipts leave in the order their frames arrived. A SEND's receipt waits until the store has
made the message durable when it is persistent and reached a durable queue; a COMMIT's waits
for every such message of the transaction. A receipt of a SEND, ACK or NACK inside a
transaction says the frame joined the transaction. A SUBSCRIBE's receipt comes before the
subscription's first MESSAGE (subscriptions.py holds it until then). DISCONNECT's receipt
comes after all others, then the server closes.

Flow control: while a resource alarm is on, a SEND waits before it is acted on, and the
adapter stops reading from a connection that has published, so TCP backpressure reaches the
publisher; consumers keep receiving.

A SEND that a queue refuses (`x-overflow: reject-publish`) is answered with an ERROR
("Message rejected") when it asked for a receipt, like a publisher confirm's nack; without a
receipt it is dropped, as an AMQP publish without confirms is.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from herald.core.errors import (
    AccessRefused,
    KernelError,
    LocalProtocolError,
    NotAllowed,
    RemoteProtocolError,
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
from herald.plugins.stomp.errors import FrameError, kernel_error_message
from herald.plugins.stomp.handshake import (
    VERSION_MISMATCH,
    cert_user,
    choose_vhost,
    connected_frame,
    login,
    parse_connect,
)
from herald.plugins.stomp.publisher import Publisher
from herald.plugins.stomp.subscriptions import Subscriptions
from herald.plugins.stomp.transactions import TRANSACTIONAL, Transactions

if TYPE_CHECKING:
    from herald.core.auth import User
    from herald.core.broker import Broker
    from herald.core.connections import Connection
    from herald.core.vhost import VirtualHost
    from herald.plugins.stomp.config import StompConfig

log = logging.getLogger(__name__)

_SENDING = frozenset({State.OPEN, State.DISCONNECTING})


class Session:
    """The STOMP side of one client connection."""

    def __init__(
        self, broker: Broker, config: StompConfig, connection: Connection, peer_host: str | None
    ) -> None:
        self.broker = broker
        self.config = config
        self.connection = connection  # also the owner of this connection's exclusive queues
        self.peer_host = peer_host
        self.codecs = broker.codecs
        self.store = broker.store
        self.codec = StompConnection(config.limits)
        self.session_id = "session-" + secrets.token_urlsafe(12)
        self.user: User | None = None
        self.vhost: VirtualHost = None  # type: ignore[assignment]  # set by CONNECT
        self.subscriptions = Subscriptions(self)
        connection.channels = self.subscriptions.describe  # the management API's /api/channels
        self.publisher = Publisher(self)
        self.transactions = Transactions()
        self.send_interval = 0.0  # seconds between our heart-beats; 0 = none
        self.receive_interval = 0.0  # seconds between the client's; 0 = not checked
        now = trio.current_time()
        self.last_received = self.last_sent = now
        self.published = False  # only publishers are blocked by resource alarms
        self.transport_full = False
        self.done = False  # nothing more to read; the adapter flushes and closes
        self.close_reason = "client closed the connection"
        self._closing = False  # an ERROR was sent or DISCONNECT received: read nothing more
        self._authz: set[tuple[str, str, str]] = set()
        # (store ticket to wait for, receipt id or None, whether it ends the connection,
        # what to do once it is sent: a held subscription's release)
        self._receipts: collections.deque[
            tuple[int | None, str | None, bool, Callable[[], None] | None]
        ] = collections.deque()
        self._receipt_ticket = 0
        self._receipt_event = trio.Event()
        self._queued = self._in_flight = 0
        self._output = trio.Event()
        self._opened = trio.Event()
        subscriptions, transactions = self.subscriptions, self.transactions
        self._handlers: dict[str, Any] = {  # bound methods: one call per frame, no wrapper
            "SEND": self._send,
            "UNSUBSCRIBE": subscriptions.unsubscribe,
            "ACK": subscriptions.settle,
            "NACK": subscriptions.settle,
            "BEGIN": transactions.begin,
            "COMMIT": self._commit,
            "ABORT": transactions.abort,
        }

    @property
    def version(self) -> str:
        return self.codec.version

    @property
    def can_send(self) -> bool:
        """Whether MESSAGE and RECEIPT frames can still go out."""
        return not self.done and self.codec.state in _SENDING

    # -- for the adapter ---------------------------------------------------------------------
    async def receive(self, data: bytes) -> None:
        """Handle bytes from the client: every whole frame they complete."""
        self.last_received = trio.current_time()
        codec = self.codec
        codec.receive_data(data)
        while not self._closing and not self.done:
            try:
                event = codec.next_event()
            except RemoteProtocolError as exc:
                text = exc.text
                if isinstance(exc.__cause__, LimitExceeded):  # say which setting raises it
                    text = f"{text} ({self.config.limit_key(exc.__cause__.limit)})"
                self.fail(text, text)
                break
            if event is NEED_DATA:
                break
            if type(event) is Heartbeat:
                continue
            command = event.command  # type: ignore[union-attr]
            if command == "SEND" and self.broker.alarms.blocked:
                self.published = True  # a blocked publisher: the adapter stops reading too
                await self.broker.alarms.wait_publish_allowed()
                if self.done or self._closing:
                    break
            if command == "CONNECT" or command == "STOMP":
                await self._connect(event)  # type: ignore[arg-type]
            else:
                self._on_frame(event)  # type: ignore[arg-type]
        self.flush_receipts()
        self._wake()

    def data_to_send(self) -> bytes:
        data = self.codec.data_to_send()
        if data:
            self.last_sent = trio.current_time()
        self._in_flight = len(data)
        self._queued = 0
        return data

    def written(self) -> None:
        """The adapter wrote the last `data_to_send`: resume subscriptions if it drained."""
        self._in_flight = 0
        if self.transport_full and self._queued < self.config.write_buffer // 2:
            self._set_transport_full(False)

    async def wait_output(self) -> None:
        """Return once there is something to write, or the session is done."""
        await self._output.wait()
        self._output = trio.Event()

    async def wait_opened(self) -> None:
        await self._opened.wait()

    @property
    def reading_paused(self) -> bool:
        """Whether the adapter should stop reading: a publisher while a resource alarm is on."""
        return self.published and self.broker.alarms.blocked and not self._closing

    def heartbeat_deadline(self) -> float:
        """When `heartbeat_tick` should next run (inf when neither side asked for heart-beats)."""
        deadline = float("inf")
        if self.send_interval:
            deadline = self.last_sent + self.send_interval
        if self.receive_interval:
            deadline = min(deadline, self.last_received + 2 * self.receive_interval)
        return deadline

    def heartbeat_tick(self, now: float) -> None:
        """Send a heart-beat if we were quiet; give up on a client silent for two intervals."""
        if self.reading_paused:
            self.last_received = now  # we are not reading: its heart-beats wait in the socket
        elif self.receive_interval and now - self.last_received >= 2 * self.receive_interval:
            self.finish(f"no heart-beat from the client for {2 * self.receive_interval:g}s")
            return
        if self.send_interval and now - self.last_sent >= self.send_interval and self.can_send:
            self.codec.send_heartbeat()
            self.last_sent = now
            self._wake()

    async def run_receipts(self) -> None:
        """Send receipts of stored messages once the store made them durable (group commit)."""
        while True:
            await self._receipt_event.wait()
            self._receipt_event = trio.Event()
            try:
                await self.store.wait_durable(self._receipt_ticket)
            except KernelError as exc:
                log.error("store failed to make STOMP messages durable: %s", exc)
                receipt = self._receipts[0][1] if self._receipts else None
                self._receipts.clear()
                self.fail(
                    "Message not stored",
                    f"the broker could not store the message: {exc}",
                    receipt_id=receipt,
                )
            self.flush_receipts()
            self._wake()

    def close_from_broker(self, reason: str) -> None:
        """The broker's closer (shutdown, vhost deleted, management): an ERROR, then close."""
        if self.codec.state in _SENDING:
            self.fail("Connection closed by the broker", reason)
        else:
            self.finish(reason)

    def abort(self, reason: str) -> None:
        """Give up without a goodbye (handshake timeout)."""
        self.finish(reason)

    def teardown(self) -> None:
        """The connection ended: subscriptions cancelled, unsettled messages requeued."""
        self.subscriptions.release()
        self.transactions.clear()

    def finish(self, reason: str) -> None:
        if not self.done:
            self.done = True
            self.close_reason = reason
        self.teardown()
        self._wake()

    # -- for subscriptions and the publisher -----------------------------------------------------
    def authorize(self, permission: Any, kind: str, name: str) -> None:
        """broker.authorize, remembered per connection (RabbitMQ caches per connection too)."""
        key = (str(permission), kind, name)
        if key in self._authz:
            return
        assert self.user is not None
        self.broker.authorize(self.user, self.vhost.name, permission, kind, name)
        if len(self._authz) >= 256:
            self._authz.clear()
        self._authz.add(key)

    def send_message(self, frame: Frame, size: int) -> None:
        """Queue a MESSAGE frame; pause subscriptions once the output passes the write buffer."""
        self.codec.send(frame)
        self._queued += size
        if not self.transport_full and self._queued + self._in_flight > self.config.write_buffer:
            self._set_transport_full(True)
        self._wake()

    def send_encoded_message(self, data: bytes, size: int) -> None:
        """`send_message` for a MESSAGE frame encoded from cached pieces (message_frames.py)."""
        self.codec.send_encoded("MESSAGE", data)
        self._queued += size
        if not self.transport_full and self._queued + self._in_flight > self.config.write_buffer:
            self._set_transport_full(True)
        self._wake()

    def fail(
        self, message: str, detail: str, frame: Frame | None = None, receipt_id: str | None = None
    ) -> None:
        """Send an ERROR frame and close the connection."""
        if self.done or self.codec.state is State.CLOSED:
            return
        if receipt_id is None and frame is not None:
            receipt_id = frame.get("receipt")
        log.info("stomp error to %s: %s: %s", self.connection.peer, message, detail)
        error = error_frame(message, detail.encode(), receipt_id)
        if message == VERSION_MISMATCH:
            error = Frame("ERROR", (*error.headers, ("version", ",".join(VERSIONS))), error.body)
        with contextlib.suppress(LocalProtocolError):  # the codec failed: nothing can be sent
            self.codec.send(error)
        self._closing = True
        self.finish(f"{message}: {detail}")

    # -- internals ---------------------------------------------------------------------------
    def _wake(self) -> None:
        if not self._output.is_set():
            self._output.set()

    def _set_transport_full(self, full: bool) -> None:
        self.transport_full = full
        self.subscriptions.apply_suspension(full)

    def _add_receipt(
        self,
        receipt_id: str | None,
        ticket: int | None = None,
        final: bool = False,
        then: Callable[[], None] | None = None,
    ) -> None:
        self._receipts.append((ticket, receipt_id, final, then))
        if ticket is not None and ticket > self.store.durable_ticket:
            self._receipt_ticket = max(self._receipt_ticket, ticket)
            self._receipt_event.set()

    def flush_receipts(self) -> None:
        """Send, in order, every receipt whose frame is settled (stored messages durable)."""
        receipts = self._receipts
        if not receipts:
            return
        durable = self.store.durable_ticket
        while receipts and self.can_send:
            ticket, receipt_id, final, then = receipts[0]
            if ticket is not None and ticket > durable:
                break
            receipts.popleft()
            if receipt_id is not None:
                self.codec.send(Frame("RECEIPT", (("receipt-id", receipt_id),)))
            if then is not None:
                then()
            if final:
                self.finish("client disconnected")

    def _on_frame(self, frame: Frame) -> None:
        """Any frame but CONNECT (the only one that waits, for the password check)."""
        command = frame.command
        if command == "DISCONNECT":
            self._closing = True
            self.teardown()
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
                ticket = self._handlers[command](frame)
        except FrameError as exc:
            self.fail(exc.message, exc.detail, frame)
            return
        except KernelError as exc:
            self.fail(kernel_error_message(exc), exc.reply_text, frame)
            return
        receipt = frame.get("receipt")
        if receipt is not None:
            self._add_receipt(receipt, ticket, then=then)

    # -- CONNECT -------------------------------------------------------------------------------
    async def _connect(self, frame: Frame) -> None:
        broker = self.broker
        try:
            request = parse_connect(frame, self.config, cert_user(broker, self.connection))
        except FrameError as exc:
            self.fail(exc.message, exc.detail)
            return
        try:
            user = await login(broker, request, self.peer_host)
        except AccessRefused:
            self.fail("Access refused", f"access refused for user '{request.login}'")
            return
        if self.done:
            return  # closed (broker shutdown, handshake timeout) while the password was checked
        try:
            name = choose_vhost(request, broker.vhosts, self.config)
            broker.users.check_vhost_access(user, name)
            self.vhost = broker.vhost(name)
        except FrameError as exc:
            self.fail(exc.message, exc.detail)
            return
        except NotAllowed as exc:
            self.fail("Access refused", exc.reply_text)
            return
        try:
            broker.connections.admit(self.connection, request.login)
        except NotAllowed as exc:
            self.fail("Not allowed", exc.reply_text)
            return
        self.user = user
        self.connection.vhost = name
        self.send_interval = request.send_ms / 1000
        self.receive_interval = request.receive_ms / 1000
        self.codec.version = request.version  # before CONNECTED: later frames are read under it
        self.codec.send(connected_frame(request, self.session_id))
        self.last_received = self.last_sent = trio.current_time()  # the login took a while
        self._opened.set()
        self._wake()

    # -- client frames ---------------------------------------------------------------------------
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
        ticket = None
        for held in self.transactions.commit(frame):
            stored = self._handlers[held.command](held)
            if stored is not None:
                ticket = stored
        return ticket
