"""A Trio TCP proxy for one link we want to cut (CLUSTER.md §8.1): no root, no netns.

`Proxy(target_port)` listens on a free 127.0.0.1 port and forwards every connection to
`127.0.0.1:target_port`. Its mode can be switched at any time:

- `pass`: bytes flow both ways.
- `blackhole`: sockets stay open but nothing is forwarded, as with iptables DROP: the proxy
  stops reading (so the kernel buffers fill and senders stall) and holds what it had read;
  new connections are accepted but not connected upstream. Back to `pass`, the held bytes
  flow on, as TCP retransmission would deliver them after a healed partition.
- `reset`: every open connection is closed with RST (SO_LINGER 0) on both sides and the
  listener is closed, so new connections are refused; back to `pass` (or `blackhole`) it
  listens again on the same port.

In a Trio test: `port = await nursery.start(proxy.run)`, then `proxy.set_mode(...)`.
From sync test code: `with ProxyThread(target_port) as proxy: ... proxy.set_mode("reset")`
runs the same proxy in a thread of its own.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from typing import Literal

import trio

from tests.ports import free_port

Mode = Literal["pass", "blackhole", "reset"]
MODES: tuple[Mode, ...] = ("pass", "blackhole", "reset")
HOST = "127.0.0.1"
CHUNK = 65536


def _linger_zero(stream: trio.SocketStream) -> None:
    """Make the next close of `stream` send RST instead of FIN."""
    with contextlib.suppress(OSError):
        stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class _Link:
    """One proxied connection: the client's stream and (once connected) the upstream one."""

    def __init__(self, client: trio.SocketStream) -> None:
        self.client = client
        self.upstream: trio.SocketStream | None = None
        self.scope = trio.CancelScope()

    def reset(self) -> None:
        _linger_zero(self.client)
        if self.upstream is not None:
            _linger_zero(self.upstream)
        self.scope.cancel()


class Proxy:
    """One link: 127.0.0.1:`port` (free, chosen at the first start) to 127.0.0.1:`target`."""

    def __init__(self, target: int, *, port: int = 0, target_host: str = HOST) -> None:
        self.target = target
        self.target_host = target_host
        self.port = port
        self.mode: Mode = "pass"
        self.connections = 0  # accepted so far, for tests
        self._changed = trio.Event()
        self._links: set[_Link] = set()
        self._accept_scope: trio.CancelScope | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def set_mode(self, mode: Mode) -> None:
        """Switch mode (from the proxy's Trio thread; `ProxyThread.set_mode` from others)."""
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")
        self.mode = mode
        if mode == "reset":
            for link in list(self._links):
                link.reset()
            if self._accept_scope is not None:
                self._accept_scope.cancel()
        self._changed.set()
        self._changed = trio.Event()

    async def _wait_pass(self) -> None:
        while self.mode != "pass":
            await self._changed.wait()

    async def run(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; `task_status.started(port)` once listening."""
        started = False
        async with trio.open_nursery() as nursery:
            try:
                while True:
                    if self.mode == "reset":
                        if not started:  # started in reset: still report the port
                            self.port = self.port or free_port(HOST)
                            task_status.started(self.port)
                            started = True
                        await self._changed.wait()
                        continue
                    listeners = await trio.open_tcp_listeners(self.port, host=HOST)
                    listener = listeners[0]
                    self.port = int(listener.socket.getsockname()[1])
                    if not started:
                        task_status.started(self.port)
                        started = True
                    async with listener:
                        with trio.CancelScope() as self._accept_scope:
                            while True:
                                stream = await listener.accept()
                                self.connections += 1
                                nursery.start_soon(self._serve, stream)
                    self._accept_scope = None
            finally:
                for link in list(self._links):
                    link.scope.cancel()

    async def _serve(self, client: trio.SocketStream) -> None:
        link = _Link(client)
        self._links.add(link)
        try:
            with link.scope:
                async with client:
                    await self._wait_pass()
                    try:
                        link.upstream = await trio.open_tcp_stream(self.target_host, self.target)
                    except OSError:
                        _linger_zero(client)  # the target is down: the client sees a reset
                        return
                    async with link.upstream, trio.open_nursery() as pumps:
                        pumps.start_soon(self._pump, client, link.upstream, pumps.cancel_scope)
                        pumps.start_soon(self._pump, link.upstream, client, pumps.cancel_scope)
        finally:
            self._links.discard(link)

    async def _pump(
        self, source: trio.SocketStream, sink: trio.SocketStream, both: trio.CancelScope
    ) -> None:
        """Forward source to sink while in `pass`; any end or error closes the whole link."""
        try:
            while True:
                await self._wait_pass()
                data = await source.receive_some(CHUNK)
                if not data:
                    break
                await self._wait_pass()
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        both.cancel()


class ProxyThread:
    """A `Proxy` running in a Trio loop of its own thread, for sync tests.

    `start()` returns once it listens; `set_mode` switches it; `stop()` (or leaving the
    `with`) closes every connection and the listener and joins the thread.
    """

    def __init__(self, target: int, *, port: int = 0) -> None:
        self.proxy = Proxy(target, port=port)
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="proxy", daemon=True)

    @property
    def port(self) -> int:
        return self.proxy.port

    @property
    def address(self) -> str:
        return self.proxy.address

    @property
    def mode(self) -> Mode:
        return self.proxy.mode

    def _main(self) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as self._scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.proxy.run)
                    self._ready.set()

        try:
            trio.run(main)
        except BaseException as exc:  # reported by start()
            self._error = exc
        finally:
            self._ready.set()

    def start(self, timeout: float = 10.0) -> ProxyThread:
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None or self._token is None:
            raise RuntimeError(f"proxy did not start: {self._error!r}")
        return self

    def set_mode(self, mode: Mode) -> None:
        assert self._token is not None, "not started"
        trio.from_thread.run_sync(self.proxy.set_mode, mode, trio_token=self._token)

    def stop(self, timeout: float = 10.0) -> None:
        if self._token is not None and self._scope is not None and self._thread.is_alive():
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(timeout)

    def __enter__(self) -> ProxyThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
