"""`LinkProxy`: only the connections of the owners it is told to cut stall (held, not closed),
a cut owner's new connection is held too, and healed, what was held flows on; other owners'
connections pass throughout. Owners are told apart by the client's source port, which the
test chooses by binding each client socket before it connects."""

from __future__ import annotations

import trio

from tests.cluster.link_proxy import LinkProxy
from tests.cluster.test_proxy import echo, receive_exactly

HOST = "127.0.0.1"


async def client(proxy: LinkProxy, owners: dict[int, str], name: str) -> trio.SocketStream:
    """A connection to the proxy from a source port the owner lookup names `name`."""
    sock = trio.socket.socket()
    await sock.bind((HOST, 0))
    owners[sock.getsockname()[1]] = name
    await sock.connect((HOST, proxy.port))
    return trio.SocketStream(sock)


async def stalls(stream: trio.SocketStream) -> bool:
    """Nothing (neither data nor EOF) arrives for a moment."""
    with trio.move_on_after(0.3) as stalled:
        data = await stream.receive_some(100)
        raise AssertionError(f"got {data!r} through a cut link")
    return stalled.cancelled_caught


async def test_only_the_cut_owners_links_stall_then_heal() -> None:
    owners: dict[int, str] = {}
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, echo, 0)
        proxy = LinkProxy(listeners[0].socket.getsockname()[1], owners.get)
        await nursery.start(proxy.run)
        a, b = [await client(proxy, owners, name) for name in ("a", "b")]
        for stream in (a, b):
            assert await receive_exactly(stream, 6) == b"hello "

        proxy.set_cut(["a"])
        await a.send_all(b"ping")
        await b.send_all(b"pong")
        assert await receive_exactly(b, 4) == b"pong"  # b's link passes
        assert await stalls(a)
        late = await client(proxy, owners, "a")  # accepted, not connected upstream
        assert await stalls(late)

        proxy.set_cut(())
        assert await receive_exactly(a, 4) == b"ping"  # held, then delivered
        assert await receive_exactly(late, 6) == b"hello "
        for stream in (a, b, late):
            await stream.aclose()
        nursery.cancel_scope.cancel()
