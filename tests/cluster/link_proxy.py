"""A proxy that blackholes the connections of chosen client processes only (CLUSTER.md §8.2
scenario 8: the replication link of one slave).

Every slave of a group dials the one cluster address its master advertises, so one proxy in
front of that address carries the streams of all of them; cutting it with `Proxy.set_mode`
would cut every slave at once. `LinkProxy` asks, for each connection it accepts, which
process holds the client's end: `owner(port)` gets the client's source port and names the
owner (the harness looks the port up in each node's sockets with psutil, which reads /proc:
no root). `set_cut(owners)` then blackholes exactly those owners' connections, as
`blackhole` does for all of them: nothing is read or forwarded, bytes already read are held,
a new connection of a cut owner is accepted but not connected upstream; healed (`set_cut(())`)
the held bytes flow on and held connections are connected. A connection whose owner was
unknown when accepted is looked up again at each `set_cut`. `set_mode` still acts on every
connection.

`LinkProxyThread` runs one in a thread of its own for sync tests, as `ProxyThread` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import trio

from tests.cluster.proxy import CHUNK, Proxy, ProxyThread

Owner = Callable[[int], str | None]
"""The name of the process whose socket has this local port (the client's end), or None."""


class LinkProxy(Proxy):
    """A `Proxy` whose connections can also be cut per owning process (see the module)."""

    def __init__(self, target: int, owner: Owner, *, port: int = 0) -> None:
        super().__init__(target, port=port)
        self.owner = owner
        self.cut: frozenset[str] = frozenset()
        self.links: dict[int, tuple[int, str]] = {}
        """id(client stream) -> (the client's port, its owner or ""), while it lasts."""

    def set_cut(self, owners: Iterable[str]) -> None:
        """Blackhole the connections of `owners` from now on, and only theirs. A connection
        whose owner was unknown when accepted is looked up again now."""
        self.cut = frozenset(owners)
        for key, (port, owner) in list(self.links.items()):
            if not owner:
                self.links[key] = (port, self._lookup(port))
        if self.mode != "reset":
            self.set_mode(self.mode)  # wakes every pump to look again

    def _lookup(self, port: int) -> str:
        return (self.owner(port) or "") if port else ""

    def _open(self, key: int) -> bool:
        owner = self.links.get(key, (0, ""))[1]
        return self.mode == "pass" and owner not in self.cut

    async def _wait_open(self, key: int) -> None:
        while not self._open(key):
            await self._changed.wait()

    async def _serve(self, client: trio.SocketStream) -> None:
        key = id(client)
        try:
            port = int(client.socket.getpeername()[1])
        except OSError:  # the client is gone already: its link passes (and ends) at once
            port = 0
        self.links[key] = (port, self._lookup(port))
        try:
            await self._wait_open(key)  # a cut owner's new connection is held
            await super()._serve(client)
        except BaseException:
            await trio.aclose_forcefully(client)
            raise
        finally:
            del self.links[key]

    async def _pump(
        self, source: trio.SocketStream, sink: trio.SocketStream, both: trio.CancelScope
    ) -> None:
        """`Proxy._pump`, held while the link's owner is cut too."""
        key = id(source) if id(source) in self.links else id(sink)
        try:
            while True:
                await self._wait_open(key)
                data = await source.receive_some(CHUNK)
                if not data:
                    break
                await self._wait_open(key)
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        both.cancel()


class LinkProxyThread(ProxyThread):
    """A `LinkProxy` in a Trio loop of its own thread. `target` may be 0 until `retarget`."""

    proxy: LinkProxy

    def __init__(self, target: int, owner: Owner, *, port: int = 0) -> None:
        super().__init__(target, port=port)
        self.proxy = LinkProxy(target, owner, port=port)

    def retarget(self, target: int) -> None:
        """Forward connections made from now on to 127.0.0.1:`target`."""
        self.proxy.target = target

    def set_cut(self, owners: Iterable[str]) -> None:
        assert self._token is not None, "not started"
        trio.from_thread.run_sync(self.proxy.set_cut, tuple(owners), trio_token=self._token)
