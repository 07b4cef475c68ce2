"""The byte pipes a session is served over (core/transports.py): the direct socket read that
replaces `SocketStream.receive_some` (real TCP on 127.0.0.1), the linger after the end, and
a WebSocket's text messages for binary-only (MQTT) and text (STOMP) protocols (trio-websocket
over memory streams)."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing
from trio_websocket import WebSocketConnection, wrap_client_stream, wrap_server_stream

from herald.core.transports import StreamTransport, WebSocketTransport


async def tcp_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """A connected (server side, client side) pair of TCP streams on 127.0.0.1."""
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with listener:
        client = await trio.open_tcp_stream("127.0.0.1", listener.socket.getsockname()[1])
        accepted = await listener.accept()
    assert isinstance(accepted, trio.SocketStream)
    return accepted, client


async def test_direct_read_returns_data_then_eof() -> None:
    accepted, client = await tcp_pair()
    transport = StreamTransport(accepted)
    sock = transport.socket
    assert sock is not None  # plain TCP: read directly
    assert transport.receive_now(sock) is None  # nothing yet, without blocking
    await client.send_all(b"abc")
    with trio.fail_after(5):
        assert await transport.receive() == b"abc"  # waits for readability
    await client.aclose()
    with trio.fail_after(5):
        assert await transport.receive() == b""
    assert transport.eof
    await accepted.aclose()


async def test_direct_read_errors_are_stream_errors() -> None:
    accepted, client = await tcp_pair()
    transport = StreamTransport(accepted)
    client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
    await client.aclose()  # linger 0: a reset
    with trio.fail_after(5), pytest.raises(trio.BrokenResourceError):
        while True:
            await transport.receive()
    await accepted.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await transport.receive()


async def test_other_streams_are_read_through_receive_some() -> None:
    server_side, client = trio.testing.memory_stream_pair()
    transport = StreamTransport(server_side)
    assert transport.socket is None
    await client.send_all(b"xyz")
    assert await transport.receive() == b"xyz"
    await client.aclose()
    assert await transport.receive() == b"" and transport.eof


async def test_linger_after_the_client_closed_returns_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server_side, client = trio.testing.memory_stream_pair()
    transport = StreamTransport(server_side)
    await client.aclose()
    assert await transport.receive() == b""
    start = trio.current_time()
    await transport.linger(60)
    assert trio.current_time() == start


async def test_linger_shuts_the_write_side_and_gives_up_after_its_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server_side, client = trio.testing.memory_stream_pair()
    transport = StreamTransport(server_side)
    ended: list[float] = []

    async def linger() -> None:
        await transport.linger(5.0)
        ended.append(trio.current_time())

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(linger)
        assert await client.receive_some(10) == b""  # our write side is shut: EOF
        await client.send_all(b"still sending")  # read and discarded
        await trio.sleep(10)  # the client never closes: the linger ends at its timeout
    assert ended == [start + 5.0]


async def websocket_pair(
    nursery: trio.Nursery,
) -> tuple[WebSocketConnection, WebSocketConnection]:
    """(server side, client side) of one WebSocket over memory streams."""
    server_stream, client_stream = trio.testing.memory_stream_pair()
    accepted: list[WebSocketConnection] = []

    async def accept() -> None:
        request = await wrap_server_stream(nursery, server_stream)
        accepted.append(await request.accept())

    nursery.start_soon(accept)
    client = await wrap_client_stream(
        nursery,
        client_stream,  # type: ignore[arg-type]  # typed for a SocketStream; any stream works
        "localhost",
        "/ws",
    )
    while not accepted:
        await trio.sleep(0)
    return accepted[0], client


async def test_a_binary_protocol_ends_at_a_text_message(nursery: trio.Nursery) -> None:
    server, client = await websocket_pair(nursery)
    transport = WebSocketTransport(server, text=False)
    with trio.fail_after(5):
        await client.send_message(b"\x10\x00")
        assert await transport.receive() == b"\x10\x00"
        await transport.send("é".encode())  # output stays binary, even when it is UTF-8
        assert await client.get_message() == "é".encode()
        await client.send_message("text")  # MQTT forbids text messages
        assert await transport.receive() == b""


async def test_a_text_protocol_takes_text_and_answers_text_when_it_can(
    nursery: trio.Nursery,
) -> None:
    server, client = await websocket_pair(nursery)
    transport = WebSocketTransport(server, text=True)
    with trio.fail_after(5):
        await client.send_message("SEND é")
        assert await transport.receive() == "SEND é".encode()
        await transport.send("MESSAGE é".encode())
        assert await client.get_message() == "MESSAGE é"  # UTF-8: sent as text
        await transport.send(b"\xff\x00")
        assert await client.get_message() == b"\xff\x00"  # not UTF-8: binary


async def test_a_closed_websocket_reads_as_the_end_and_breaks_writes(
    nursery: trio.Nursery,
) -> None:
    server, client = await websocket_pair(nursery)
    transport = WebSocketTransport(server, text=False)
    with trio.fail_after(5):
        await client.aclose()
        assert await transport.receive() == b""
        with pytest.raises(trio.BrokenResourceError):
            await transport.send(b"late")
