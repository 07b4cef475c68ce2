"""Connecting with stomp.py: versions, logins, virtual hosts, heart-beats, receipts, WebSocket."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import stomp
import trio
import trio_websocket
from stomp.adapter.ws import WSStompConnection

from tests.stomp_e2e.helpers import (
    WAIT,
    Client,
    RawClient,
    no_connections,
    port,
    stomp_broker,
)


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
async def test_each_version_connects_and_round_trips(tmp_path: Path, version: str) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker, version)
            connected = client.frames.connected[0]
            assert connected.headers["version"] == version
            assert connected.headers["session"].startswith("session-")
            assert connected.headers["server"].startswith("herald")
            await client.subscribe("/queue/v", "sub-0", ack="client-individual")
            await client.send("/queue/v", "hello", receipt="sent")
            await client.receipt("sent")
            (message,) = await client.messages(1)
            assert message.body == "hello"
            assert message.headers["destination"] == "/queue/v"
            if version == "1.2":
                assert message.headers["ack"] == message.headers["message-id"]
                await client.call(client.conn.ack, message.headers["ack"], receipt="acked")
            else:
                assert "ack" not in message.headers
                args: tuple[str, ...] = (message.headers["message-id"],)
                if version == "1.1":
                    args = (*args, "sub-0")
                await client.call(client.conn.ack, *args, receipt="acked")
            await client.receipt("acked")
            await client.disconnect("bye")
            await client.receipt("bye")
            queue = broker.default_vhost.queues["v"]
            assert queue.statistics().messages_unacknowledged == 0
            assert queue.message_count == 0


async def test_a_wrong_password_is_refused_with_an_error_frame(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            with pytest.raises(stomp.exception.ConnectFailedException):
                await Client.connect(broker, passcode="wrong")
            raw = await RawClient.open(broker)
            await raw.send(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:x\n\n\x00")
            (error,) = await raw.until_closed()
            assert error.command == "ERROR"
            assert error.get("message") == "Access refused"
            assert b"guest" in error.body
            await no_connections(broker)


async def test_a_connect_without_login_needs_allow_anonymous(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            raw = await RawClient.open(broker)
            await raw.send(b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00")
            (error,) = await raw.until_closed()
            assert error.get("message") == "Access refused"
        async with stomp_broker(tmp_path, settings=["stomp.allow_anonymous=true"]) as broker:
            client = await Client.connect(broker, login=None, passcode=None)
            assert broker.connections.get(1) is not None
            assert next(iter(broker.connections)).user == "guest"
            await client.disconnect("bye")


async def test_the_host_header_names_the_virtual_host(tmp_path: Path) -> None:
    for strict in ("false", "true"):
        settings = [f"stomp.strict_host={strict}"]
        async with stomp_broker(tmp_path / strict, settings=settings) as broker:
            with trio.fail_after(WAIT):
                broker.add_vhost("other")
                broker.users.set_permissions("guest", "other", ".*", ".*", ".*")
                client = await Client.connect(broker, vhost="other")
                await client.send("/queue/in-other", "x", receipt="r")
                await client.receipt("r")
                assert "in-other" in broker.vhost("other").queues
                assert "in-other" not in broker.default_vhost.queues
                await client.disconnect("bye")


# (how the test builds a stomp.py connection to the STOMP port, the `host` it sends)
DEFAULT_CLIENTS = {
    "Connection (1.1)": (lambda p: stomp.Connection([("127.0.0.1", p)]), None),
    "Connection12": (lambda p: stomp.Connection12([("127.0.0.1", p)]), "127.0.0.1"),
    "Connection12 to localhost": (
        lambda p: stomp.Connection12([("localhost", p)], try_loopback_connect=False),
        "localhost",
    ),
}


@pytest.mark.parametrize(("make", "host"), DEFAULT_CLIENTS.values(), ids=DEFAULT_CLIENTS.keys())
async def test_stomppy_with_its_defaults_connects_to_the_default_vhost(
    tmp_path: Path, make: Callable[[int], stomp.connect.BaseConnection], host: str | None
) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.attach(make(port(broker)))
            assert client.frames.sent[0].headers.get("host") == host
            assert next(iter(broker.connections)).vhost == "/"
            await client.subscribe("/queue/defaults", "s")
            await client.send("/queue/defaults", "hello", receipt="r")
            await client.receipt("r")
            (message,) = await client.messages(1)
            assert message.body == "hello"
            await client.disconnect("bye")


async def test_stomppy_over_websocket_with_its_defaults_connects(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            conn = WSStompConnection([("127.0.0.1", port(broker, "ws"))], ws_path="/ws")
            client = await Client.attach(conn)
            assert client.frames.sent[0].headers.get("host") == "127.0.0.1"
            await client.send("/queue/ws-defaults", "x", receipt="r")
            await client.receipt("r")
            assert broker.default_vhost.queues["ws-defaults"].message_count == 1
            await client.disconnect("bye")


async def test_with_strict_host_an_unknown_host_is_refused(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path, settings=["stomp.strict_host=true"]) as broker:
            with pytest.raises(stomp.exception.ConnectFailedException):
                await Client.connect(broker, vhost=None)  # stomp.py 1.2 sends host:127.0.0.1
            raw = await RawClient.open(broker)
            await raw.send(
                b"CONNECT\naccept-version:1.1\nhost:nope\nlogin:guest\npasscode:guest\n\n\x00"
            )
            (error,) = await raw.until_closed()
            assert error.command == "ERROR"
            assert error.get("message") == "Bad CONNECT"
            assert error.body == b"virtual host 'nope' does not exist"
            await no_connections(broker)


async def test_no_common_version_is_an_error_naming_the_supported_ones(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            raw = await RawClient.open(broker)
            await raw.send(b"CONNECT\naccept-version:2.0\nlogin:guest\npasscode:guest\n\n\x00")
            (error,) = await raw.until_closed()
            assert error.get("message") == "Version mismatch"
            assert error.get("version") == "1.0,1.1,1.2"


async def test_receipts_answer_every_frame_that_asks(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker)
            await client.subscribe("/queue/r", "s", receipt="r-sub")
            await client.send("/queue/r", "x", receipt="r-send")
            await client.call(client.conn.begin, "tx", receipt="r-begin")
            await client.call(client.conn.commit, "tx", receipt="r-commit")
            await client.call(client.conn.unsubscribe, "s", receipt="r-unsub")
            await client.disconnect("r-bye")
            await client.receipt("r-bye")
            assert client.frames.receipts == [
                "r-sub",
                "r-send",
                "r-begin",
                "r-commit",
                "r-unsub",
                "r-bye",
            ]
            await client.wait_disconnected()
            await no_connections(broker)


@pytest.mark.parametrize("persistent", [False, True])
async def test_a_disconnect_without_receipt_still_sends_earlier_receipts(
    tmp_path: Path, persistent: bool
) -> None:
    """Pipelined SENDs with receipts, then a bare DISCONNECT: every receipt, then the close."""
    sends = b"".join(
        b"SEND\ndestination:/queue/d\nreceipt:r%d\npersistent:%s\n\n%d\x00"
        % (number, b"true" if persistent else b"false", number)
        for number in range(3)
    )
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            raw = await RawClient.open(broker)
            await raw.connect()
            await raw.send(sends + b"DISCONNECT\n\n\x00")
            frames = await raw.until_closed()
            assert [(f.command, f.get("receipt-id")) for f in frames] == [
                ("RECEIPT", "r0"),
                ("RECEIPT", "r1"),
                ("RECEIPT", "r2"),
            ]
            assert broker.default_vhost.queues["d"].message_count == 3
            await no_connections(broker)


async def test_heart_beats_are_negotiated_and_sent(tmp_path: Path) -> None:
    settings = ["stomp.heartbeat_send_min=50", "stomp.heartbeat_receive_min=50"]
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path, settings=settings) as broker:
            client = await Client.connect(broker, heartbeats=(0, 100))
            assert client.frames.connected[0].headers["heart-beat"] == "100,0"
            await client.wait(lambda: client.frames.heartbeats >= 3)
            await client.disconnect("bye")
            floor = await Client.connect(broker, heartbeats=(10, 10))
            assert floor.frames.connected[0].headers["heart-beat"] == "50,50"
            await floor.disconnect("bye")


async def test_a_client_silent_past_its_heart_beat_is_dropped(tmp_path: Path) -> None:
    settings = ["stomp.heartbeat_receive_min=50"]
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path, settings=settings) as broker:
            raw = await RawClient.open(broker)
            await raw.send(
                b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n"
                b"heart-beat:100,0\n\n\x00"
            )
            connected = await raw.frame()
            assert connected.get("heart-beat") == "0,100"
            assert await raw.until_closed() == []  # no word, then the socket closes
            await no_connections(broker)


async def test_a_client_sending_heart_beats_stays_connected(tmp_path: Path) -> None:
    settings = ["stomp.heartbeat_receive_min=50"]
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path, settings=settings) as broker:
            client = await Client.connect(broker, heartbeats=(60, 0))
            assert client.frames.connected[0].headers["heart-beat"] == "0,60"
            await trio.sleep(0.5)  # several intervals: the client's beats keep it alive
            await client.send("/queue/alive", "x", receipt="r")
            await client.receipt("r")
            await client.disconnect("bye")


async def test_a_client_that_never_connects_is_dropped(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path, settings=["stomp.handshake_timeout=0.2"]) as broker:
            raw = await RawClient.open(broker)
            assert await raw.until_closed() == []


async def test_stomp_over_websocket(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            client = await Client.connect(broker, websocket=True)
            tcp = await Client.connect(broker)
            await client.subscribe("/topic/ws.*", "w")
            await client.call(client.conn.subscribe, "/queue/ws-in", "w2", receipt="subbed")
            await client.receipt("subbed")
            await tcp.send("/topic/ws.news", "from tcp", receipt="r1")
            await client.send("/queue/ws-in", "\x00nul and é", receipt="r2")  # text frames: UTF-8
            await tcp.receipt("r1")
            await client.receipt("r2")
            messages = await client.messages(2)
            assert sorted(m.headers["destination"] for m in messages) == [
                "/queue/ws-in",
                "/topic/ws.news",
            ]
            bodies = {m.headers["destination"]: m.body for m in messages}
            assert bodies == {"/queue/ws-in": "\x00nul and é", "/topic/ws.news": "from tcp"}
            await client.disconnect("bye")
            await tcp.disconnect("bye")


async def test_websocket_negotiates_the_stomp_subprotocol_and_path(tmp_path: Path) -> None:
    with trio.fail_after(WAIT):
        async with stomp_broker(tmp_path) as broker:
            ws_port = port(broker, "ws")
            async with trio_websocket.open_websocket(
                "127.0.0.1", ws_port, "/ws", use_ssl=False, subprotocols=["v11.stomp", "v12.stomp"]
            ) as ws:
                assert ws.subprotocol == "v12.stomp"
                await ws.send_message(
                    "CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00"
                )
                reply = await ws.get_message()
                assert isinstance(reply, str)  # a text message
                assert reply.startswith("CONNECTED\n")
            with pytest.raises(trio_websocket.HandshakeError):
                async with trio_websocket.open_websocket(
                    "127.0.0.1", ws_port, "/other", use_ssl=False
                ):
                    pass
