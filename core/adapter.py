"""The one Trio adapter every protocol plugin is served by: bytes in and out of a session.

Per connection, one task: the reader (bytes into `session.receive`, paused while a resource
alarm blocks a publisher). A writer task (everything the session produced, in one write)
runs only while there is output, in the server's nursery, and every connection's deadlines
(handshake, heartbeat or keep alive, close) are entries in one heap served by the kernel's
timer task (core/connection_deadlines.py). An idle connection is what brokers hold by the ten
thousand: here it costs one task and its session. The writer finishing — the session is done
and its last bytes are out — ends the connection; then the socket lingers (write side shut,
reading and discarding for `close_timeout`), so a client that is still sending does not make
the kernel answer with a reset that destroys the last frame before the client read it.

No protocol decisions are made here: the session (sans-IO codec plus the protocol's state
machine) decides; this module only moves bytes and keeps time. The listeners themselves are
core/listeners.py (`serve_tcp`) and core/websocket.py.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import trio

from herald.core.cert_login import TLSPeer
from herald.core.connection_deadlines import ConnectionDeadlines, Timed
from herald.core.listeners import peer_host, peer_name
from herald.core.transports import LOST, StreamTransport, Transport

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.core.connections import Connection

log = logging.getLogger(__name__)

WRITER_IDLE_S = 1.0
"""How long a connection's writer task waits for output before it ends (`_write`)."""


class AdaptedSession(Timed, Protocol):
    """What the adapter needs of a protocol session (core/session_io.py has the output side
    every protocol shares)."""

    link: Link | None
    close_reason: str

    @property
    def reading_paused(self) -> bool:
        """Stop reading: a publisher while a resource alarm is on."""

    @property
    def lingers(self) -> bool:
        """After the end, read and discard the client's input for a while (see the module)."""

    async def receive(self, data: bytes) -> None:
        """Bytes from the client; b"" is the end of its stream, which goes through the codec
        (a frame cut by it is a protocol error, answered if the protocol can)."""

    def data_to_send(self) -> bytes: ...

    def written(self) -> None: ...

    def output_pending(self) -> bool: ...

    async def wait_output(self) -> None: ...

    def connection_lost(self, reason: str) -> None:
        """The transport ended (EOF the session did not end on, reset) without the
        protocol's goodbye."""

    def teardown(self) -> None:
        """The connection ended: give back what it held."""

    def close_from_broker(self, reason: str) -> None:
        """The broker's closer (shutdown, management): close politely; must not block."""


SessionFactory = Callable[["Connection", "str | None"], AdaptedSession]
"""`new_session(connection, peer_host)`: a session for a connection just accepted."""


class Link:
    """What a session holds of its connection: it starts the writer when there is output
    (`wake`), runs short-lived tasks of its own (`start_task`: a wait for durability), and
    has its close bounded by `close_timeout` once it is done."""

    __slots__ = (
        "aborter",
        "ending",
        "paused",
        "server",
        "session",
        "stopped",
        "transport",
        "writing",
    )

    def __init__(
        self,
        server: ConnectionServer,
        session: AdaptedSession,
        transport: Transport,
        ending: trio.CancelScope,
    ) -> None:
        self.server = server
        self.session = session
        self.transport = transport
        self.ending = ending  # the reader's scope; cancelling it ends the connection
        self.writing: trio.CancelScope | None = None  # while a writer task runs
        self.stopped: trio.Event | None = None  # set when a writer ends, if the reader waits
        self.aborter: Any = None  # the timer that cuts a done session's close short
        self.paused: trio.CancelScope | None = None  # while the reader waits out an alarm

    def wake(self) -> None:
        """The session has output, or is done: start a writer unless one runs. A reader
        paused by a resource alarm looks again (a session closing must read the goodbye)."""
        if self.paused is not None:
            self.paused.cancel()
        if self.session.done and self.aborter is None:
            timers = self.server.broker.timers
            self.aborter = timers.call_later(self.server.close_timeout, self.abort)
        if self.writing is None:
            self.writing = trio.CancelScope()
            self.server.writers.start_soon(self._run_writer, name=self.server.writer_name)

    def start_task(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run `fn(*args)` beside the connection; its failure closes only this connection."""
        self.server.writers.start_soon(self._guard, fn, args)

    def reschedule(self) -> None:
        """The session's deadline may have come nearer (a heartbeat was negotiated)."""
        self.server.deadlines.schedule(self.session)

    def abort(self) -> None:
        """End now: the reader and the writer stop, whatever they wait for."""
        self.ending.cancel()
        if self.writing is not None:
            self.writing.cancel()

    async def _guard(self, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]) -> None:
        try:
            await fn(*args)
        except Exception:
            log.exception(
                "%s connection task failed; closing that connection", self.server.protocol
            )
            self.session.connection_lost("internal error")
            self.abort()

    async def _run_writer(self) -> None:
        session = self.session
        scope = self.writing
        assert scope is not None
        try:
            with scope:
                await _write(session, self.transport, self.ending)
        except Exception:
            log.exception(
                "%s connection writer failed; closing that connection", self.server.protocol
            )
            session.connection_lost("internal error while writing")
            self.ending.cancel()
        finally:
            self.writing = None
            if self.stopped is not None:
                self.stopped.set()


async def _write(session: AdaptedSession, transport: Transport, ending: trio.CancelScope) -> None:
    """Write what the session produces; started when it has output and no writer runs, it
    ends after WRITER_IDLE_S without output: an idle connection costs one task (the reader),
    not two. When the session is done it cancels `ending`, the reader's scope (it has written
    all there was, so nothing of its own is cut short)."""
    idle = False
    while True:
        # Let tasks already runnable (other connections' readers, whose publishes make
        # deliveries) add to this write first: under load a write carries many deliveries.
        await trio.lowlevel.cancel_shielded_checkpoint()
        data = session.data_to_send()
        if data:
            idle = False
            try:
                await transport.send(data)
            except LOST:
                session.connection_lost("connection lost while writing")
                ending.cancel()
                return
            session.written()
            continue
        if session.done:
            ending.cancel()
            return
        if idle and not session.output_pending():
            return  # no await since the check: a later `wake` starts a new writer
        with trio.move_on_after(WRITER_IDLE_S) as waiting:
            await session.wait_output()
        idle = waiting.cancelled_caught


class ConnectionServer:
    """One protocol's connections: the bracket around each (registry, TLS peer, session,
    deadlines, crash isolation), its reader loop, and the nursery its writers run in."""

    def __init__(
        self,
        broker: Broker,
        protocol: str,
        new_session: SessionFactory,
        *,
        close_timeout: float,
        linger_timeout: float | None = None,
    ) -> None:
        self.broker = broker
        self.protocol = protocol
        self.new_session = new_session
        self.close_timeout = close_timeout
        self.linger_timeout = close_timeout if linger_timeout is None else linger_timeout
        self.deadlines: ConnectionDeadlines = broker.connection_deadlines
        self.writer_name = f"{protocol} connection writer"  # one string, not one per task
        self._writers: trio.Nursery | None = None

    @property
    def writers(self) -> trio.Nursery:
        if self._writers is None:
            raise RuntimeError("ConnectionServer.run is not running")
        return self._writers

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the nursery every writer of this protocol runs in, until cancelled."""
        async with trio.open_nursery() as nursery:
            self._writers = nursery
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                self._writers = None

    async def run_connection(
        self, stream: trio.abc.Stream, transport: Transport | None = None, initial: bytes = b""
    ) -> None:
        """Serve one client until either side ends the connection; `stream` is the accepted
        one (TLS: its client certificate may log in, core/cert_login.py), the transport over
        it a `StreamTransport` unless given (a WebSocket). `initial`: bytes already read from
        it (by the any-protocol port, to tell the protocol), handed to the session first.

        This task is the reader, and the one task an idle connection has: it reads in this
        frame, not in a nested coroutine, and has a cancel scope but no nursery of its own
        (each frame, nursery and partial is some 250-1000 bytes of each idle connection).
        """
        if transport is None:
            transport = StreamTransport(stream)
        broker = self.broker
        connection = broker.connections.open(self.protocol, peer_name(stream))
        connection.tls = TLSPeer.of(stream)
        session = self.new_session(connection, peer_host(stream))
        connection.closer = session.close_from_broker
        deadlines = self.deadlines
        deadlines.add(session)
        link = None
        try:
            with trio.CancelScope() as ending:  # cancelled once the session is done and flushed
                link = Link(self, session, transport, ending)
                session.link = link
                if initial:
                    await session.receive(initial)
                # The reader, in this frame: a nested coroutine would be a frame more of each
                # idle connection (300 bytes), and so would the last chunk read if it were
                # still referenced while the next read waits (`data` is None then).
                alarms = broker.alarms
                direct = None  # a StreamTransport whose socket this loop reads itself
                if type(transport) is StreamTransport and transport.socket is not None:
                    direct = transport
                data: bytes | None
                try:
                    while not session.done:
                        if direct is None:
                            data = await transport.receive()
                        else:  # `StreamTransport.receive` inlined: no frame while idle
                            sock = direct.socket
                            assert sock is not None
                            await trio.lowlevel.checkpoint_if_cancelled()
                            data = direct.receive_now(sock)
                            if data is None:
                                while data is None:
                                    await trio.lowlevel.wait_readable(sock)
                                    data = direct.receive_now(sock)
                            else:
                                await trio.lowlevel.cancel_shielded_checkpoint()
                        if not data:
                            await session.receive(b"")  # EOF: through the codec
                            if not session.done:
                                session.connection_lost("client closed the connection")
                            break
                        # Paused after the read, not before it: an alarm that rose while the
                        # read waited must hold back what it brought (a publish sent after
                        # connection.blocked), and nothing more is read meanwhile.
                        while session.reading_paused:
                            with trio.CancelScope() as link.paused:
                                await alarms.wait_publish_allowed()
                            link.paused = None
                        await session.receive(data)
                        data = None
                except LOST as exc:
                    session.connection_lost(f"connection lost: {exc or type(exc).__name__}")
                if link.writing is None:  # the reader ended: flush what is left
                    link.wake()
                while link.writing is not None:  # let the writer finish
                    link.stopped = trio.Event()
                    await link.stopped.wait()
        finally:
            session.link = None
            if link is not None and link.aborter is not None:
                link.aborter.cancel()
            deadlines.remove(session)
            session.teardown()
            broker.connections.close(connection, session.close_reason)
        if session.lingers:
            await transport.linger(self.linger_timeout)
