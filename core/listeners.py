"""Serving TCP for protocol plugins: bind, report, and isolate each connection.

`serve_tcp` is what a protocol's `serve` usually calls: it binds, reports the bound addresses
through `task_status` (so port 0 works for tests), and runs one handler task per connection.
A handler that crashes is logged and its stream closed; the listener and every other
connection carry on (DESIGN.md: a crash in one connection closes that connection only).
"""

from __future__ import annotations

import errno
import logging
import ssl
from collections.abc import Awaitable, Callable

import trio

from herald.core.connections import TooManyConnections
from herald.core.plugin_types import Listener

log = logging.getLogger(__name__)

Handler = Callable[[trio.abc.Stream], Awaitable[None]]

# What trio.serve_listeners retries after a pause: the process or system is out of descriptors
# or memory; other accept errors end the listener.
_ACCEPT_CAPACITY_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("EMFILE", "ENFILE", "ENOMEM", "ENOBUFS")
    if hasattr(errno, name)
)
_ACCEPT_RETRY_S = 0.1


def peer_name(stream: trio.abc.Stream) -> str:
    """'host:port' of the other end of a socket stream (or of the socket under TLS)."""
    inner = getattr(stream, "transport_stream", stream)
    sock = getattr(inner, "socket", None)
    if sock is None:
        return "unknown"
    try:
        address = sock.getpeername()
    except OSError:
        return "unknown"
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def peer_host(stream: trio.abc.Stream) -> str | None:
    """The other end's IP address (what loopback-only users are checked against), or None."""
    sock = getattr(getattr(stream, "transport_stream", stream), "socket", None)
    try:
        return str(sock.getpeername()[0]) if sock is not None else None
    except OSError:
        return None


async def _guarded(handler: Handler, protocol: str, stream: trio.abc.Stream) -> None:
    try:
        await handler(stream)
    except TooManyConnections as exc:
        log.warning("%s", exc)  # the stream closes when this returns
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        log.debug("%s connection lost", protocol)  # the peer went away: not a failure
    except Exception:
        log.exception("%s connection handler failed; closing that connection", protocol)
    finally:
        await trio.aclose_forcefully(stream)


class ListenerBindError(OSError):
    """A listener could not bind: says which one, where, and the setting that moves it.

    An OSError still (errno and strerror kept), so whoever handles bind failures as OS errors
    keeps working; `herald run` prints it as its one-line start failure.
    """

    def __init__(self, cause: OSError, what: str, host: str, port: int, setting: str | None):
        super().__init__(cause.errno, cause.strerror)
        self.what = what
        self.host = host
        self.port = port
        self.setting = setting

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else (self.host or "*")
        text = f"{self.what} listener cannot bind {host}:{self.port}: {self.strerror}"
        if self.errno == errno.EADDRINUSE:
            text += " (another process holds that port)"
        if self.setting is not None:
            text += f"; move it with --set {self.setting}=PORT (0 picks a free port)"
        return text


async def serve_tcp(
    handler: Handler,
    host: str,
    port: int,
    *,
    protocol: str,
    ssl_context: ssl.SSLContext | None = None,
    backlog: int | None = None,
    setting: str | None = None,
    transport: str | None = None,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept connections on (host, port) until cancelled; `started` gets the Listeners.

    `setting` is the config key of `port` (`amqp.tls_port`) and `transport` what the
    listener is called in a bind failure (default `tcp`, or `tls` with a context).
    """
    listeners: list[trio.abc.Listener[trio.abc.Stream]]
    bound_as = "tls" if ssl_context is not None else "tcp"
    try:
        tcp = await trio.open_tcp_listeners(port, host=host or None, backlog=backlog)
    except OSError as exc:
        what = f"{protocol} {transport or bound_as}"
        raise ListenerBindError(exc, what, host, port, setting) from exc
    if ssl_context is not None:
        listeners = [trio.SSLListener(t, ssl_context, https_compatible=False) for t in tcp]
    else:
        listeners = list(tcp)
    bound = []
    for t in tcp:
        sockname = t.socket.getsockname()
        bound.append(Listener(protocol, bound_as, sockname[0], sockname[1]))
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept, listener, handler, protocol, nursery)
        task_status.started(bound)


async def _accept(
    listener: trio.abc.Listener[trio.abc.Stream],
    handler: Handler,
    protocol: str,
    nursery: trio.Nursery,
) -> None:
    """`trio.serve_listeners` minus its `_run_handler` task frame (`_guarded` closes the
    stream) and its per-task name string: 10,000 idle connections hold one handler task each."""
    name = f"{protocol} connection"
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno is None or exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                    raise
                log.error(
                    "%s: accept failed (%s); retrying in %s s",
                    protocol,
                    errno.errorcode[exc.errno],
                    _ACCEPT_RETRY_S,
                    exc_info=True,
                )
                await trio.sleep(_ACCEPT_RETRY_S)
            else:
                nursery.start_soon(_guarded, handler, protocol, stream, name=name)
