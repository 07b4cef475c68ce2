"""The link proxy: pass forwards both ways, blackhole stalls without closing, reset makes the
client see a reset and then a refusal; the same from sync code through `ProxyThread`."""

from __future__ import annotations

import socket

import pytest
import trio

from tests.cluster.proxy import Proxy, ProxyThread

WAIT_S = 5.0  # hang guard


async def echo(stream: trio.SocketStream) -> None:
    async with stream:
        await stream.send_all(b"hello ")  # the server speaks first: the other direction
        try:
            while data := await stream.receive_some(65536):
                await stream.send_all(data)
        except trio.BrokenResourceError:
            pass


async def start(nursery: trio.Nursery) -> Proxy:
    listeners = await nursery.start(trio.serve_tcp, echo, 0)
    target = listeners[0].socket.getsockname()[1]
    proxy = Proxy(target)
    await nursery.start(proxy.run)
    return proxy


async def receive_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = b""
    with trio.fail_after(WAIT_S):
        while len(data) < size:
            chunk = await stream.receive_some(size - len(data))
            assert chunk, "closed"
            data += chunk
    return data


async def test_pass_forwards_bytes_both_ways() -> None:
    async with trio.open_nursery() as nursery:
        proxy = await start(nursery)
        stream = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        assert await receive_exactly(stream, 6) == b"hello "
        await stream.send_all(b"x" * 200_000)
        assert await receive_exactly(stream, 200_000) == b"x" * 200_000
        await stream.aclose()
        nursery.cancel_scope.cancel()


async def test_blackhole_stalls_without_closing_then_heals() -> None:
    async with trio.open_nursery() as nursery:
        proxy = await start(nursery)
        stream = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        assert await receive_exactly(stream, 6) == b"hello "
        proxy.set_mode("blackhole")
        await stream.send_all(b"ping")
        with trio.move_on_after(0.3) as stalled:
            data = await stream.receive_some(100)  # neither data nor EOF
            raise AssertionError(f"got {data!r} through a blackhole")
        assert stalled.cancelled_caught
        late = await trio.open_tcp_stream("127.0.0.1", proxy.port)  # accepted, held
        with trio.move_on_after(0.2) as held:
            await late.receive_some(100)
        assert held.cancelled_caught
        proxy.set_mode("pass")
        assert await receive_exactly(stream, 4) == b"ping"  # held bytes flow on
        assert await receive_exactly(late, 6) == b"hello "
        await stream.aclose()
        await late.aclose()
        nursery.cancel_scope.cancel()


async def test_reset_resets_open_connections_and_refuses_new_ones() -> None:
    async with trio.open_nursery() as nursery:
        proxy = await start(nursery)
        stream = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        assert await receive_exactly(stream, 6) == b"hello "
        proxy.set_mode("reset")
        with trio.fail_after(WAIT_S), pytest.raises(trio.BrokenResourceError) as caught:
            await stream.receive_some(100)
        assert isinstance(caught.value.__cause__, ConnectionResetError)
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", proxy.port)  # refused
        proxy.set_mode("pass")
        await trio.sleep(0.05)  # listening again on the same port
        again = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        assert await receive_exactly(again, 6) == b"hello "
        await again.aclose()
        nursery.cancel_scope.cancel()


def test_proxy_thread_from_sync_code() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        target = server.getsockname()[1]
        with ProxyThread(target) as proxy:
            client = socket.create_connection(("127.0.0.1", proxy.port), timeout=WAIT_S)
            upstream, _ = server.accept()
            client.sendall(b"up")
            assert upstream.recv(10) == b"up"
            upstream.sendall(b"down")
            assert client.recv(10) == b"down"
            proxy.set_mode("reset")
            with pytest.raises(ConnectionResetError):
                client.recv(10)
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", proxy.port), timeout=WAIT_S)
            proxy.set_mode("pass")
            client.close()
            upstream.close()
