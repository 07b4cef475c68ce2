"""A frame factory and a client-side frame reader for the AMQP codec tests (h2's FrameFactory)."""

from __future__ import annotations

from herald.plugins.amqp.codec import (
    NEED_DATA,
    AMQPConnection,
    BasicProperties,
    ConnectionClosed,
    ConnectionState,
    Delivery,
    Event,
    Heartbeat,
    Message,
    MethodFrame,
)
from herald.plugins.amqp.codec.constants import PROTOCOL_HEADER, FrameType
from herald.plugins.amqp.codec.frames import FrameReader, frame
from herald.plugins.amqp.codec.methods import (
    DECODERS,
    ChannelOpen,
    ConnectionOpen,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    Method,
)
from herald.plugins.amqp.codec.properties import (
    decode_content_header,
    decode_properties,
    encode_content_header,
)


def method_frame(channel: int, method: Method) -> bytes:
    return frame(FrameType.METHOD, channel, method.encode())


def header_frame(channel: int, body_size: int, properties: BasicProperties | bytes) -> bytes:
    return frame(FrameType.HEADER, channel, encode_content_header(60, body_size, properties))


def body_frame(channel: int, data: bytes) -> bytes:
    return frame(FrameType.BODY, channel, data)


def server_in(state: ConnectionState, frame_max: int = 131072) -> AMQPConnection:
    """A server codec driven to `state` by a well-behaved client (channel 1 open if OPEN)."""
    conn = AMQPConnection()
    if state is not ConnectionState.AWAIT_HEADER:
        conn.receive_data(PROTOCOL_HEADER)
        assert conn.next_event() is not NEED_DATA
    if state in (ConnectionState.TUNED, ConnectionState.OPEN):
        feed(conn, method_frame(0, ConnectionStartOk(response=b"\0guest\0guest")))
        conn.send(MethodFrame(0, ConnectionTune(2047, frame_max, 60)))
        feed(conn, method_frame(0, ConnectionTuneOk(2047, frame_max, 60)))
    if state is ConnectionState.OPEN:
        feed(conn, method_frame(0, ConnectionOpen()))
        feed(conn, method_frame(1, ChannelOpen()))
    conn.data_to_send()
    assert conn.state is state, conn.state
    return conn


def feed(conn: AMQPConnection, data: bytes) -> list[Event]:
    """Feed `data` and drain every event it completes."""
    conn.receive_data(data)
    return drain(conn)


def drain(conn: AMQPConnection) -> list[Event]:
    """Every whole event buffered; a ConnectionClosed (returned again on every call once the
    stream ended) is the last."""
    events: list[Event] = []
    while (event := conn.next_event()) is not NEED_DATA:
        assert isinstance(event, Event)
        events.append(event)
        if type(event) is ConnectionClosed:
            break
    return events


def messages(conn: AMQPConnection, data: bytes) -> list[Message]:
    """`feed`, for input that completes only messages."""
    events = feed(conn, data)
    found = [event for event in events if isinstance(event, Message)]
    assert found == events, events
    return found


class ClientReader:
    """Reads what a server sends, as a client would: methods, deliveries, heartbeats.

    Built from the codec's own FrameReader and decoders, but with none of the server
    connection's rules, so the golden tests can decode server-only methods.
    """

    def __init__(self) -> None:
        self.reader = FrameReader(0)
        self.pending: tuple[int, Method, BasicProperties, int, list[bytes]] | None = None

    def feed(self, data: bytes) -> list[Event]:
        self.reader.feed(data)
        events: list[Event] = []
        while (found := self.reader.next_frame()) is not None:
            frame_type, channel, start, end = found
            buf = self.reader.buf
            if frame_type == FrameType.HEARTBEAT:
                events.append(Heartbeat())
            elif frame_type == FrameType.METHOD:
                key = int.from_bytes(buf[start : start + 4], "big")
                method = DECODERS[key](buf, start + 4, end)
                if method.HAS_CONTENT:
                    self.pending = (channel, method, BasicProperties(), 0, [])
                else:
                    events.append(MethodFrame(channel, method))
            elif frame_type == FrameType.HEADER:
                assert self.pending is not None
                _, _, size = decode_content_header(buf, start, end)
                props = decode_properties(buf, start + 12, end)
                self.pending = (channel, self.pending[1], props, size, [])
                events.extend(self._complete())
            else:
                assert self.pending is not None
                self.pending[4].append(bytes(buf[start:end]))
                events.extend(self._complete())
        self.reader.compact()
        return events

    def _complete(self) -> list[Event]:
        assert self.pending is not None
        channel, method, props, size, chunks = self.pending
        body = b"".join(chunks)
        if len(body) < size:
            return []
        self.pending = None
        return [Delivery(channel, method, props, body)]
