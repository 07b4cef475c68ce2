"""WebSocket closes end the connection's task at once: only a Close of trio-websocket's own
(1009) may keep its reader for `close_timeout` (core/websocket.py `serve_websocket`).

`close_timeout` is set far above every wait here, so a handler waiting it out fails the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from herald.core.broker import Broker
from tests.mqtt_e2e.fuzz_cases import connect
from tests.mqtt_e2e.helpers import WAIT, mqtt_broker, port
from tests.socket_fuzz import (
    RECEIVE_SIZE,
    websocket_frame,
    websocket_messages,
    websocket_upgrade,
)

SETTINGS = ("mqtt.close_timeout=3600",)
CLOSE = 8
DISCONNECT = b"\xe0\x00"


def connection_tasks() -> list[trio.lowlevel.Task]:
    """The running handler tasks of MQTT connections (core/listeners.py names them)."""
    root = trio.lowlevel.current_root_task()
    assert root is not None  # called from inside trio.run
    found, nurseries = [], list(root.child_nurseries)
    while nurseries:
        for task in nurseries.pop().child_tasks:
            if task.name == "mqtt connection":
                found.append(task)
            nurseries.extend(task.child_nurseries)
    return found


async def read_until_closed(stream: trio.SocketStream) -> bytes:
    received = bytearray()
    try:
        while data := await stream.receive_some(RECEIVE_SIZE):
            received += data
    except trio.BrokenResourceError:
        pass
    return bytes(received)


async def read_until(stream: trio.SocketStream, received: bytearray, want: bytes) -> None:
    while want not in received:
        data = await stream.receive_some(RECEIVE_SIZE)
        assert data, bytes(received)
        received += data


async def open_websocket(broker: Broker) -> tuple[trio.SocketStream, bytearray]:
    """A WebSocket client that sent CONNECT and read the 101 and the CONNACK."""
    stream = await trio.open_tcp_stream("127.0.0.1", port(broker, "ws"))
    received = bytearray()
    await stream.send_all(websocket_upgrade("/mqtt", ["mqtt"]))
    await read_until(stream, received, b"\r\n\r\n")
    await stream.send_all(websocket_frame(connect(4, "ws-close")))
    await read_until(stream, received, b"\x20\x02\x00\x00")  # CONNACK, accepted
    return stream, received


async def wait_no_connection_task(broker: Broker) -> None:
    while len(broker.connections) or connection_tasks():
        await trio.sleep(0.02)


@pytest.mark.parametrize("who", ["client", "server"])
async def test_normally_closed_websocket_leaves_no_task(tmp_path: Path, who: str) -> None:
    """The client sends Close, or DISCONNECT and then answers the server's Close."""
    with trio.fail_after(WAIT):
        async with mqtt_broker(tmp_path, settings=SETTINGS) as broker:
            stream, received = await open_websocket(broker)
            async with stream:
                assert len(connection_tasks()) == 1
                if who == "client":
                    await stream.send_all(websocket_frame(b"\x03\xe8", CLOSE))
                else:
                    await stream.send_all(websocket_frame(DISCONNECT))
                    await read_until(stream, received, b"\x88")  # the server's Close
                    await stream.send_all(websocket_frame(b"\x03\xe8", CLOSE))
                received += await read_until_closed(stream)
                _, messages = websocket_messages(bytes(received))
                assert messages[-1][0] == CLOSE, messages
                await wait_no_connection_task(broker)


async def test_client_that_drops_the_socket_leaves_no_task(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with mqtt_broker(tmp_path, settings=SETTINGS) as broker:
            stream, _ = await open_websocket(broker)
            await stream.aclose()
            await wait_no_connection_task(broker)


async def test_rejected_websocket_is_closed_at_once(tmp_path: Path) -> None:
    """A 404 does not wait for the client (which may keep its HTTP connection open)."""
    with trio.fail_after(WAIT):
        async with mqtt_broker(tmp_path, settings=SETTINGS) as broker:
            stream = await trio.open_tcp_stream("127.0.0.1", port(broker, "ws"))
            async with stream:
                await stream.send_all(websocket_upgrade("/nope", ["mqtt"]))
                received = await read_until_closed(stream)
                assert received.startswith(b"HTTP/1.1 404"), received
                await wait_no_connection_task(broker)
