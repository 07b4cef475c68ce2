"""The Trio adapter's memory-saving shapes (plugins/mqtt/server.py): the direct socket read
that replaces `SocketStream.receive_some`, the writer task in the plugin's nursery, and an idle
connection that is one task with no nursery of its own."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from herald.plugins.mqtt import server
from herald.plugins.mqtt.server import StreamTransport, _Writer
from tests.mqtt_e2e.helpers import mqtt_broker, port


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
    assert transport.socket is not None  # plain TCP: read directly
    assert transport.receive_now() is None  # nothing yet, without blocking
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


class FailingSession:
    """What `_write` uses of a Session, failing at the first `data_to_send`."""

    def __init__(self) -> None:
        self.writer_running = True
        self.done = False
        self.lost: list[str] = []

    def data_to_send(self) -> bytes:
        raise RuntimeError("bug")

    def connection_lost(self, reason: str) -> None:
        self.lost.append(reason)
        self.done = True


async def test_a_failing_writer_closes_only_its_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session: Any = FailingSession()
    async with trio.open_nursery() as nursery:  # the plugin's nursery: must not crash
        with trio.CancelScope() as reader:
            writer = _Writer(session, None, nursery, reader)  # type: ignore[arg-type]
            writer()
            await trio.sleep_forever()  # the reader, cancelled by the failing writer
    assert reader.cancelled_caught
    assert session.lost == ["internal error while writing"]
    assert not session.writer_running
    assert "writer failed" in caplog.text


def connect_packet(client_id: str) -> bytes:
    def text(value: str) -> bytes:
        return len(value).to_bytes(2, "big") + value.encode()

    variable = text("MQTT") + bytes([4, 0xC2]) + (600).to_bytes(2, "big")
    body = variable + text(client_id) + text("guest") + text("guest")
    return bytes([0x10, len(body)]) + body


def all_tasks() -> list[trio.lowlevel.Task]:
    root = trio.lowlevel.current_root_task()
    assert root is not None
    tasks, pending = [], [root]
    while pending:
        task = pending.pop()
        tasks.append(task)
        pending.extend(child for n in task.child_nurseries for child in n.child_tasks)
    return tasks


async def test_an_idle_connection_is_one_task_without_a_nursery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "WRITER_IDLE_S", 0.01)
    async with mqtt_broker(tmp_path) as broker:
        with trio.fail_after(10):
            client = await trio.open_tcp_stream("127.0.0.1", port(broker))
            await client.send_all(connect_packet("idle"))
            assert await client.receive_some(4) == b"\x20\x02\x00\x00"  # CONNACK, accepted
            while any(t.name == server._WRITER_NAME for t in all_tasks()):
                await trio.sleep(0.01)  # the writer ends once idle
            (task,) = [t for t in all_tasks() if t.name == "mqtt connection"]
            assert task.child_nurseries == []
            await client.send_all(b"\xc0\x00")  # PINGREQ: a writer starts again
            assert await client.receive_some(2) == b"\xd0\x00"
            await client.aclose()
            while len(broker.connections):
                await trio.sleep(0.01)
