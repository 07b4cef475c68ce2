"""A subscriber that does not read its socket: past `mqtt.write_buffer` of unwritten
deliveries its consumers are suspended (`Session.transport_full_changed`, from the shared
`SessionIO.queued`), so the backlog stays in its queue instead of in the broker's output
buffer; once it reads again, deliveries resume and every message arrives."""

from __future__ import annotations

import socket
from pathlib import Path
from types import MethodType

import trio

from herald.plugins.mqtt.codec import (
    ConnAck,
    Connect,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
)
from herald.plugins.mqtt.session import Session
from tests.mqtt_e2e.helpers import RawClient, mqtt_broker, port

COUNT = 2000
PAYLOAD = b"x" * 8192  # 16 MB in all, far more than the socket buffers hold


async def slow_reader(tcp_port: int) -> RawClient:
    """A client whose socket takes little: a small receive buffer, set before connecting."""
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", tcp_port))
    return RawClient(trio.SocketStream(sock), 4)


async def test_a_subscriber_that_does_not_read_suspends_its_deliveries(tmp_path: Path) -> None:
    async with mqtt_broker(tmp_path, settings=["mqtt.write_buffer=4096"]) as broker:
        subscriber = await slow_reader(port(broker))
        publisher = await RawClient.open(broker)
        with trio.fail_after(30):
            await subscriber.send(Connect("bp-sub", 4, username="guest", password=b"guest"))
            assert await subscriber.receive() == ConnAck()
            await subscriber.send(Subscribe(1, [Subscription("bp/t")]))  # QoS 0: no window
            assert isinstance(await subscriber.receive(), SubAck)
            (connection,) = [c for c in broker.connections if c.client == "bp-sub"]
            assert isinstance(connection.closer, MethodType)  # the session's close_from_broker
            session = connection.closer.__self__
            assert isinstance(session, Session)
            queue = broker.default_vhost.queues["mqtt-subscription-bp-sub"]

            await publisher.send(Connect("bp-pub", 4, username="guest", password=b"guest"))
            assert await publisher.receive() == ConnAck()
            for _ in range(COUNT // 100):
                await publisher.send(*[Publish("bp/t", PAYLOAD) for _ in range(100)])
            await publisher.ping()  # every PUBLISH routed
            while not session.transport_full:
                await trio.sleep(0.01)
            await trio.sleep(0.2)
            assert session.transport_full
            assert queue.message_count > COUNT // 2  # held back in the queue, not buffered

            received = 0
            while received < COUNT:  # reading again: the rest comes
                packet = await subscriber.receive()
                assert isinstance(packet, Publish) and packet.payload == PAYLOAD
                received += 1
            assert not session.transport_full and queue.message_count == 0
        await subscriber.aclose()
        await publisher.aclose()
