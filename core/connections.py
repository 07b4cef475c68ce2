"""The broker's registry of client connections, whatever their protocol.

Protocol plugins register each connection when it is accepted and unregister it when it ends.
The registry logs one line for each (who, from where, why it closed), lets the management API
list and close connections, removes exclusive queues with their owner, drives the graceful
part of shutdown (ask every connection to close, wait for them until a deadline), and tells
the connections that ask (`Connection.alarms_changed`) when the broker's resource alarms
change, from one task (`watch_alarms`) rather than one per connection.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from herald.core.errors import HeraldError, NotAllowed, NotMaster

CloseReason = str | NotMaster
"""Why the broker closes a connection: text, or `NotMaster` naming where the master went."""

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.core.cert_login import TLSPeer
    from herald.core.flow import Alarms

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class Connection:
    """One client connection, as the kernel and the management API see it.

    `closer(reason)` asks the protocol to close it politely (AMQP connection.close, MQTT 5
    DISCONNECT, STOMP ERROR); it must not block.
    """

    id: int
    protocol: str
    peer: str
    # The session's `close_from_broker`: how the broker asks the protocol to close.
    closer: Callable[[str], None] | None = None
    user: str | None = None
    vhost: str | None = None
    client: str | None = None
    opened_at: float = attrs.field(factory=time.time)
    # The protocol's channels (AMQP) or sessions, described for the management API's
    # /api/channels: one mapping each, with at least "number". None: the protocol says nothing.
    channels: Callable[[], list[Mapping[str, Any]]] | None = None
    # The client's verified TLS certificate (None: not TLS); read at login (core/cert_login.py).
    tls: TLSPeer | None = None
    # Called with the active alarms when the broker's resource alarms change (AMQP's
    # connection.blocked); must not block. None: the protocol does not want to know.
    alarms_changed: Callable[[frozenset[str]], None] | None = None

    def close(self, reason: CloseReason) -> None:
        """Ask the protocol to close. A `NotMaster` goes to the session's `not_master` when
        it has one (every built-in protocol: AMQP 320 naming the master, MQTT 5 DISCONNECT
        0x9C with Server Reference, STOMP ERROR "Not master"), else its text to the closer."""
        closer = self.closer
        if closer is None:
            return
        if isinstance(reason, NotMaster):
            not_master = getattr(getattr(closer, "__self__", None), "not_master", None)
            if not_master is not None:
                not_master(reason)
                return
            reason = reason.reply_text
        closer(reason)

    def __repr__(self) -> str:
        return f"<Connection #{self.id} {self.protocol} {self.peer}>"


class UserConnectionLimit(NotAllowed):
    """A user is at `broker.max_connections_per_user` (530; MQTT answers QUOTA_EXCEEDED)."""


class TooManyConnections(HeraldError):
    """The broker holds `broker.max_connections` connections: a new one is closed at once."""


class ConnectionRegistry:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._ids = itertools.count(1)
        self._open: dict[int, Connection] = {}
        self._per_user: dict[str, int] = {}  # connections admitted per user name
        self._admitted: dict[int, str] = {}  # connection id -> the user it was admitted as
        self._empty = trio.Event()
        self._empty.set()
        section = broker.config.broker
        self.max_connections = section.max_connections
        self.max_per_user = section.max_connections_per_user

    def __iter__(self) -> Iterator[Connection]:
        return iter(list(self._open.values()))

    def __len__(self) -> int:
        return len(self._open)

    def get(self, connection_id: int) -> Connection | None:
        return self._open.get(connection_id)

    def open(
        self, protocol: str, peer: str, closer: Callable[[str], None] | None = None
    ) -> Connection:
        """Register a connection just accepted; TooManyConnections at the global limit (the
        listener then closes the socket without a word, as RabbitMQ does)."""
        if self.max_connections and len(self._open) >= self.max_connections:
            raise TooManyConnections(
                f"{protocol} connection from {peer} refused:"
                f" the broker's limit of {self.max_connections} connections is reached"
            )
        connection = Connection(next(self._ids), protocol, peer, closer)
        self._open[connection.id] = connection
        if self._empty.is_set():
            self._empty = trio.Event()
        log.info("connection #%d opened: %s from %s", connection.id, protocol, peer)
        return connection

    def admit(self, connection: Connection, user: str) -> None:
        """`user` logged in on `connection`: count it against the per-user limit, or raise
        UserConnectionLimit (a NotAllowed, 530) and leave the connection for the protocol to
        refuse."""
        count = self._per_user.get(user, 0)
        if self.max_per_user and count >= self.max_per_user:
            log.warning(
                "connection #%d refused: user %r has %d connections, its limit",
                connection.id,
                user,
                count,
            )
            raise UserConnectionLimit(
                f"connection refused: user '{user}' has reached its limit of"
                f" {self.max_per_user} connections"
            )
        self._per_user[user] = count + 1
        self._admitted[connection.id] = user
        connection.user = user

    def close(self, connection: Connection, reason: str = "closed") -> None:
        """Forget a connection that ended; its exclusive queues are deleted."""
        if self._open.pop(connection.id, None) is None:
            return
        admitted = self._admitted.pop(connection.id, None)
        if admitted is not None:
            left = self._per_user[admitted] - 1
            if left > 0:
                self._per_user[admitted] = left
            else:
                del self._per_user[admitted]
        for vhost in self._broker.vhosts.values():
            vhost.owner_closed(connection)
        user = f" user {connection.user!r}" if connection.user else ""
        log.info(
            "connection #%d closed: %s from %s%s: %s",
            connection.id,
            connection.protocol,
            connection.peer,
            user,
            reason,
        )
        if not self._open:
            self._empty.set()

    async def watch_alarms(
        self, alarms: Alarms, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Call each connection's `alarms_changed` when `alarms` change, until cancelled: one
        task for the broker; a failing callback is logged and the others still run."""
        task_status.started()
        while True:
            active = await alarms.wait_changed()
            for connection in list(self._open.values()):
                callback = connection.alarms_changed
                if callback is None:
                    continue
                try:
                    callback(active)
                except Exception:
                    log.exception("telling %r of the alarms failed", connection)

    async def close_all(self, reason: CloseReason, timeout: float) -> bool:
        """Ask every connection to close; True if all were gone within `timeout` seconds."""
        for connection in list(self._open.values()):
            try:
                connection.close(reason)
            except Exception:
                log.exception("closing %r failed", connection)
        with trio.move_on_after(timeout):
            await self._empty.wait()
            return True
        return False
