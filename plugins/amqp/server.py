"""The trio adapter: sockets in and out of an AMQP `Session`; no protocol decisions here.

Per connection, in one nursery:
- the reader feeds the session what the socket gives, and stops reading while the session says
  publishing is blocked (a resource alarm), so TCP backpressure reaches the publisher;
- the writer (this task) sends everything the session produced since its last write in one
  `send_all`, and tells the session when it is written (consumer backpressure);
- timers: the handshake deadline, heartbeats, the close-ok deadline;
- the session's confirm task (durability waits) and a watcher of the broker's alarms.

When the session ended with a goodbye (close-ok sent or received, or a connection.close after
a frame that did not parse), the socket lingers before it is closed (`StreamTransport.linger`):
write side shut, input read and dropped until the client closes or `close_linger` passes, so a
client still sending (publishes it buffered behind its connection.close) is not answered with a
reset that makes its writes fail and can destroy the close-ok before it is read.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

import trio

from herald.core.cert_login import TLSPeer
from herald.core.listeners import peer_host, peer_name, serve_tcp
from herald.core.transports import StreamTransport
from herald.plugins.amqp.config import AMQPConfig
from herald.plugins.amqp.session import Session

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.core.flow import Alarms
    from herald.core.plugin_types import Listener

log = logging.getLogger(__name__)

RECEIVE_SIZE = 256 * 1024
_LOST = (trio.BrokenResourceError, trio.ClosedResourceError)


async def serve(
    broker: Broker,
    config: AMQPConfig | None,
    *,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on `[amqp] host:port` (and `tls_port` when TLS is configured) and serve each
    connection until cancelled."""
    config = config if config is not None else AMQPConfig()

    async def handle(stream: trio.abc.Stream) -> None:
        await handle_connection(broker, config, stream)

    async with trio.open_nursery() as nursery:
        tcp = partial(
            serve_tcp, handle, config.host, config.port, protocol="amqp", setting="amqp.port"
        )
        listeners: list[Listener] = list(await nursery.start(tcp))
        if broker.tls_context is not None:
            tls = partial(
                serve_tcp,
                handle,
                config.host,
                config.tls_port,
                protocol="amqp",
                ssl_context=broker.tls_context,
                setting="amqp.tls_port",
            )
            listeners.extend(await nursery.start(tls))
        task_status.started(listeners)


async def handle_connection(broker: Broker, config: AMQPConfig, stream: trio.abc.Stream) -> None:
    connection = broker.connections.open("amqp", peer_name(stream))
    connection.tls = TLSPeer.of(stream)
    session = Session(broker, config, connection, peer_host(stream))
    connection.closer = session.close_from_broker
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_read, session, stream)
            nursery.start_soon(_handshake_deadline, session, config.handshake_timeout)
            nursery.start_soon(_heartbeats, session)
            nursery.start_soon(_end_deadline, session, config.close_timeout, nursery.cancel_scope)
            nursery.start_soon(session.run_confirms)
            nursery.start_soon(_watch_alarms, session, broker.alarms)
            await _write(session, stream)
            nursery.cancel_scope.cancel()
    finally:
        session.teardown()
        broker.connections.close(connection, session.close_reason)
    if session.linger:
        await StreamTransport(stream).linger(config.close_linger)


async def _read(session: Session, stream: trio.abc.Stream) -> None:
    alarms = session.broker.alarms
    while not session.done:
        if session.reading_paused:
            await alarms.wait_publish_allowed()
            continue
        try:
            data = await stream.receive_some(RECEIVE_SIZE)
        except _LOST:
            data = b""
        if not data:
            session.finish("client closed the TCP connection")
            return
        await session.receive(data)


async def _write(session: Session, stream: trio.abc.Stream) -> None:
    while True:
        await session.wait_output()
        # Let tasks that are already runnable (other connections' readers) add to this write
        # first: under load a write carries many deliveries instead of one.
        await trio.lowlevel.cancel_shielded_checkpoint()
        data = session.data_to_send()
        if data:
            try:
                await stream.send_all(data)
            except _LOST:
                session.finish("connection lost while writing")
                return
            session.written()
        if session.done:
            rest = session.data_to_send()
            if rest:
                with trio.move_on_after(session.config.close_timeout):
                    await stream.send_all(rest)
            return


async def _handshake_deadline(session: Session, timeout: float) -> None:
    with trio.move_on_after(timeout):
        await session.wait_opened()
        return
    session.abort(f"handshake timeout ({timeout}s)")


async def _heartbeats(session: Session) -> None:
    await session.wait_opened()
    interval = session.heartbeat
    if not interval:
        return
    while not session.done:
        await trio.sleep(interval / 2)
        session.heartbeat_tick(trio.current_time())


async def _end_deadline(session: Session, timeout: float, scope: trio.CancelScope) -> None:
    """Once the session is ending, the connection has `timeout` seconds to finish."""
    await session.wait_ending()
    await trio.sleep(timeout)
    session.abort("connection.close-ok not received in time")
    scope.cancel()


async def _watch_alarms(session: Session, alarms: Alarms) -> None:
    while True:
        session.alarms_changed(await alarms.wait_changed())
