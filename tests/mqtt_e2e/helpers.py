"""End-to-end helpers: an embedded broker with the MQTT plugin, paho clients, a raw client.

paho runs its own network thread (`loop_start`); its callbacks put what they see on
`queue.Queue`s, which the Trio test reads through `trio.to_thread.run_sync` with a timeout,
so every wait is bounded and the broker's Trio loop keeps running meanwhile. Blocking paho
calls (connect, which for WebSocket does the HTTP upgrade) also run in a thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypedDict

import attrs
import pytest
import trio
from paho.mqtt.client import Client, MQTTMessage, MQTTProtocolVersion
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.properties import Properties as PahoProperties
from paho.mqtt.subscribeoptions import SubscribeOptions

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.testing import listener_port
from herald.plugins.mqtt import plugin as mqtt_plugin
from herald.plugins.mqtt.codec import Packet, PacketReader, PingResp, encode_packet
from herald.storage.memory import MemoryStore, MemoryStoreData

WAIT = 10.0
"""Seconds any single wait may take before the test fails."""

BASE_SETTINGS = (
    "mqtt.port=0",
    "mqtt.ws_port=0",
    "mqtt.host=127.0.0.1",
    "mqtt.ws_host=127.0.0.1",
)
PahoTransport = Literal["tcp", "websockets", "unix"]


class Login(TypedDict):
    """CONNECT's credentials, spread into `Connect(..., **LOGIN)`."""

    username: str
    password: bytes


LOGIN: Login = {"username": "guest", "password": b"guest"}
VERSIONS = {
    3: MQTTProtocolVersion.MQTTv31,
    4: MQTTProtocolVersion.MQTTv311,
    5: MQTTProtocolVersion.MQTTv5,
}


@asynccontextmanager
async def mqtt_broker(
    tmp_path: Path, data: MemoryStoreData | None = None, settings: Sequence[str] = ()
) -> AsyncIterator[Broker]:
    """A broker with only the MQTT protocol, on a memory store over `data` (keep `data` to
    restart a broker on the same store)."""
    async with embedded(
        extra_plugins=[mqtt_plugin],
        plugins=["mqtt"],
        settings=[*BASE_SETTINGS, *settings],
        store=MemoryStore(data if data is not None else MemoryStoreData()),
        data_dir=tmp_path,
        load_entrypoints=False,
    ) as broker:
        yield broker


def port(broker: Broker, transport: str = "tcp") -> int:
    return listener_port(broker, "mqtt", transport)


async def wait_for(q: queue.Queue[Any], timeout: float = WAIT) -> Any:
    """The next item of a thread-fed queue; queue.Empty after `timeout` seconds."""
    return await trio.to_thread.run_sync(partial(q.get, timeout=timeout), abandon_on_cancel=True)


@attrs.frozen
class Connected:
    reason_code: int
    session_present: bool
    properties: Any


class Paho:
    """A paho-mqtt 2.x client driven from a Trio test."""

    def __init__(
        self,
        broker: Broker,
        *,
        version: int = 4,
        transport: PahoTransport = "tcp",
        client_id: str = "",
        clean: bool = True,
        username: str | None = "guest",
        password: str | None = "guest",
    ) -> None:
        self.port = port(broker, "ws" if transport == "websockets" else "tcp")
        self.version = version
        kwargs: dict[str, Any] = {}
        if version != 5:
            kwargs["clean_session"] = clean
        self.client = Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=VERSIONS[version],
            transport=transport,
            reconnect_on_failure=False,
            **kwargs,
        )
        if username is not None:
            self.client.username_pw_set(username, password)
        self.messages: queue.Queue[MQTTMessage] = queue.Queue()
        self.connects: queue.Queue[Connected] = queue.Queue()
        self.subacks: queue.Queue[list[Any]] = queue.Queue()
        self.unsubacks: queue.Queue[list[Any]] = queue.Queue()
        self.publishes: queue.Queue[tuple[int, Any]] = queue.Queue()
        self.disconnects: queue.Queue[Any] = queue.Queue()
        self.gone = threading.Event()
        c = self.client
        c.on_connect = lambda cl, ud, flags, rc, props: self.connects.put(
            Connected(rc.value, flags.session_present, props)
        )
        c.on_message = lambda cl, ud, message: self.messages.put(message)
        c.on_subscribe = lambda cl, ud, mid, codes, props: self.subacks.put(codes)
        c.on_unsubscribe = lambda cl, ud, mid, codes, props: self.unsubacks.put(codes)
        c.on_publish = lambda cl, ud, mid, rc, props: self.publishes.put((mid, rc))
        c.on_disconnect = self._on_disconnect

    def _on_disconnect(
        self, client: Client, userdata: Any, flags: Any, rc: Any, props: Any
    ) -> None:
        self.disconnects.put(rc)
        self.gone.set()

    async def connect(
        self,
        *,
        keepalive: int = 60,
        clean_start: Any = None,
        properties: PahoProperties | None = None,
    ) -> Connected:
        extra: dict[str, Any] = {}
        if self.version == 5:
            extra["clean_start"] = True if clean_start is None else clean_start
            extra["properties"] = properties
        await trio.to_thread.run_sync(
            partial(self.client.connect, "127.0.0.1", self.port, keepalive, **extra)
        )
        self.client.loop_start()
        return await wait_for(self.connects)

    async def subscribe(self, topic: str, qos: int = 0, **options: Any) -> list[Any]:
        if self.version == 5:
            properties = options.pop("properties", None)
            self.client.subscribe(
                topic, options=SubscribeOptions(qos=qos, **options), properties=properties
            )
        else:
            self.client.subscribe(topic, qos)
        return await wait_for(self.subacks)

    async def unsubscribe(self, topic: str) -> list[Any]:
        self.client.unsubscribe(topic)
        return await wait_for(self.unsubacks)

    async def publish(
        self,
        topic: str,
        payload: bytes | str = b"",
        qos: int = 0,
        retain: bool = False,
        properties: PahoProperties | None = None,
    ) -> Any:
        """Publish; for QoS > 0 wait for the broker's ack and return its reason code."""
        info = self.client.publish(topic, payload, qos, retain, properties)
        if qos == 0:
            await trio.to_thread.run_sync(
                partial(info.wait_for_publish, WAIT), abandon_on_cancel=True
            )
            return None
        while True:
            mid, rc = await wait_for(self.publishes)
            if mid == info.mid:
                return rc

    async def message(self, timeout: float = WAIT) -> MQTTMessage:
        return await wait_for(self.messages, timeout)

    async def messages_until(self, payload: bytes) -> list[MQTTMessage]:
        """Every message up to and including the one carrying `payload` (a sentinel)."""
        out = []
        while True:
            message = await self.message()
            out.append(message)
            if message.payload == payload:
                return out

    async def disconnect(self, properties: PahoProperties | None = None) -> None:
        self.client.disconnect(properties=properties)
        await trio.to_thread.run_sync(partial(self.gone.wait, WAIT), abandon_on_cancel=True)
        self.client.loop_stop()

    def drop(self) -> None:
        """Vanish without DISCONNECT: stop the network thread, close the socket."""
        self.client.loop_stop()
        sock = self.client.socket()
        if sock is not None:
            sock.close()

    async def wait_gone(self) -> Any:
        """The reason code of the disconnection the broker caused."""
        rc = await wait_for(self.disconnects)
        self.client.loop_stop()
        return rc


def props5(**values: Any) -> PahoProperties:
    """paho PUBLISH properties: props5(ContentType="text/plain", UserProperty=[("a", "b")])."""
    from paho.mqtt.packettypes import PacketTypes

    properties = PahoProperties(PacketTypes.PUBLISH)
    for name, value in values.items():
        setattr(properties, name, value)
    return properties


def connect_props5(**values: Any) -> PahoProperties:
    from paho.mqtt.packettypes import PacketTypes

    properties = PahoProperties(PacketTypes.CONNECT)
    for name, value in values.items():
        setattr(properties, name, value)
    return properties


class RawClient:
    """A byte-level MQTT client over TCP, for what paho will not send."""

    def __init__(self, stream: trio.SocketStream, version: int) -> None:
        self.stream = stream
        self.version = version
        self.reader = PacketReader()

    @classmethod
    async def open(cls, broker: Broker, version: int = 4) -> RawClient:
        stream = await trio.open_tcp_stream("127.0.0.1", port(broker))
        return cls(stream, version)

    async def send(self, *packets: Packet) -> None:
        await self.stream.send_all(b"".join(encode_packet(p, self.version) for p in packets))

    async def send_bytes(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def receive(self) -> Packet | None:
        """The next packet from the broker, or None once it closed the connection."""
        with trio.fail_after(WAIT):
            while True:
                packet = self.reader.next_packet(self.version)
                if isinstance(packet, Packet):
                    return packet
                if not await self._read():
                    return None

    async def receive_raw(self) -> bytes | None:
        """The next packet from the broker exactly as it came over the wire (fixed header
        included), or None once it closed the connection."""
        reader = self.reader
        with trio.fail_after(WAIT):
            while True:
                frame = reader.next_frame()
                if frame is not None:
                    begin, end = len(reader.buffer) - reader.buffered, frame[2]
                    data = bytes(reader.buffer[begin:end])
                    reader.consume(end)
                    return data
                if not await self._read():
                    return None

    async def _read(self) -> bool:
        """Buffer what the broker sent next; False once it closed the connection."""
        try:
            data = await self.stream.receive_some(65536)
        except trio.BrokenResourceError:
            return False  # reset by the broker
        if not data:
            return False
        self.reader.receive_data(data)
        return True

    async def ping(self) -> None:
        """A round trip: everything sent before it has been handled by the broker."""
        await self.send_bytes(b"\xc0\x00")
        assert await self.receive() == PingResp()

    async def until_closed(self) -> list[Packet]:
        """Every packet until the broker closes the connection."""
        packets = []
        while (packet := await self.receive()) is not None:
            packets.append(packet)
        return packets

    async def aclose(self) -> None:
        await self.stream.aclose()


def no_errors_logged(caplog: pytest.LogCaptureFixture) -> None:
    """No ERROR record: serve_tcp logs a connection handler's exception as one."""
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
