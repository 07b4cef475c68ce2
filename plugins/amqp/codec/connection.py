"""The sans-IO AMQP 0-9-1 server connection: bytes in, events out; events in, bytes out.

    conn = AMQPConnection()
    conn.receive_data(chunk)                # whatever the socket gave
    while (event := conn.next_event()) is not NEED_DATA:
        ...                                 # ProtocolHeader, MethodFrame, Message, ...
    conn.send(MethodFrame(0, ConnectionStart(...)))
    sock.send_all(conn.data_to_send())      # everything queued, as one bytes

No I/O, no clock: heartbeat timing is the adapter's. `receive_data(b"")` says the client ended
the stream: `next_event` then returns ConnectionClosed if it ended between frames, else raises
501 (a frame, the protocol header or a message cut short is not a clean close). Errors,
following h11: internal code raises LocalProtocolError; `next_event` re-raises what the peer
caused as RemoteProtocolError with the AMQP reply code to close with (`.code`), and stays
broken afterwards; `error_reply()` is then the connection.close to send. `send` raises
LocalProtocolError when herald itself misuses the codec. The reply codes follow RabbitMQ:

- 501 FRAME_ERROR: frame larger than frame_max (checked on the frame header, before the
  payload is buffered), frame-end octet not 0xCE, unknown frame type, heartbeat with a
  payload, method or header payload that does not decode or does not fill its frame, the
  stream ending inside a frame or a message;
- 502 SYNTAX_ERROR: a field table with an unknown value type, unknown property flags;
- 503 COMMAND_INVALID: a method only servers send (basic.deliver ...) or a connection method
  on a channel other than 0 (RabbitMQ's "unimplemented method"), or one the state table
  (state.py) does not allow;
- 504 CHANNEL_ERROR: a non-connection method on channel 0;
- 505 UNEXPECTED_FRAME: a method while a content is being received on that channel, a
  header or body without a content-bearing method before it, a header of the wrong class or
  with a weight, a body longer than its header declared, content frames on channel 0, a
  heartbeat on another channel, channel frames before connection.open;
- 530 NOT_ALLOWED: tune-ok with a frame_max below 4096 or above what the server proposed;
- 540 NOT_IMPLEMENTED: an unknown class/method id pair (RabbitMQ crashes the connection);
- None: a protocol header that is not 0-9-1; the 0-9-1 header is already queued in
  `data_to_send()`, to be written before closing the socket (spec 4.2.2).

frame_max: before tune-ok the limit is `initial_frame_max` (RabbitMQ's `initial_frame_max`,
8192 since 4.1 so big JWTs fit in start-ok; the spec's minimum is 4096); tune-ok sets the
negotiated one. Like RabbitMQ, a payload may be up to frame_max, not frame_max - 8, since
clients off by the frame overhead are common; outbound bodies use frame_max - 8.
"""

from __future__ import annotations

import struct

import attrs

from herald.core.codec_kit import (
    NEED_DATA,
    ConnectionClosed,
    Event,
    LocalProtocolError,
    RemoteProtocolError,
    end_of_stream,
)
from herald.plugins.amqp.codec import state as st
from herald.plugins.amqp.codec.constants import (
    DEFAULT_INITIAL_FRAME_MAX,
    FRAME_MIN_SIZE,
    FRAME_OVERHEAD,
    PROTOCOL_HEADER,
    FrameType,
    ReplyCode,
    reply_text,
)
from herald.plugins.amqp.codec.deliver import DeliverFastPath
from herald.plugins.amqp.codec.events import (
    ContentTooLarge,
    Delivery,
    Heartbeat,
    Message,
    MethodFrame,
    ProtocolHeader,
)
from herald.plugins.amqp.codec.frames import HEARTBEAT_FRAME, FrameReader, content_frames, frame
from herald.plugins.amqp.codec.methods import (
    DECODERS,
    BasicPublish,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionTune,
    ConnectionTuneOk,
    Method,
)
from herald.plugins.amqp.codec.properties import (
    EMPTY_PROPERTIES,
    EMPTY_RAW_PROPERTIES,
    BasicProperties,
    decode_content_header,
    decode_properties,
    encode_properties,
)
from herald.plugins.amqp.codec.state import RECEIVE, SEND, TABLE, ConnectionState

DEFAULT_MAX_MESSAGE_SIZE = 16 * 1024 * 1024  # RabbitMQ 4's default max_message_size
_LOW_LEVEL_ERRORS = (struct.error, IndexError, ValueError)  # truncated input, bad UTF-8
_CONNECTION_CLASS = 10
_CLOSE_KEYS = frozenset({(10 << 16) | 50, (10 << 16) | 51})
_METHOD, _HEADER, _BODY = int(FrameType.METHOD), int(FrameType.HEADER), int(FrameType.BODY)
_HEARTBEAT = int(FrameType.HEARTBEAT)
_PUBLISH_KEY = (BasicPublish.CLASS_ID << 16) | BasicPublish.METHOD_ID
_decode_basic_publish = DECODERS[_PUBLISH_KEY]
_U32 = struct.Struct(">I")
_EMPTY = b""
_NO_PUBLISH = BasicPublish()


@attrs.define(slots=True)
class _Content:
    """A content being received on one channel: its method, then its header, then its body."""

    method: Method
    properties: BasicProperties | None = None  # None until the header frame
    raw: bytes = _EMPTY
    body_size: int = 0
    received: int = 0
    chunks: list[bytes] = attrs.Factory(list)
    skip: bool = False  # body over max_message_size: count it, don't keep it


def _unexpected(text: str) -> LocalProtocolError:
    return LocalProtocolError(text, ReplyCode.UNEXPECTED_FRAME)


class AMQPConnection(DeliverFastPath):
    """One AMQP 0-9-1 connection, server side (`send_deliver`: deliver.py)."""

    def __init__(
        self,
        *,
        initial_frame_max: int = DEFAULT_INITIAL_FRAME_MAX,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    ) -> None:
        if initial_frame_max < FRAME_MIN_SIZE:
            raise ValueError(f"initial_frame_max must be at least {FRAME_MIN_SIZE}")
        super().__init__()
        self._state = ConnectionState.AWAIT_HEADER
        # What the state allows, cached as booleans: enum hashing is slow on the hot path.
        self._discarding = False
        self._channels_ok = False
        self._can_send = False
        self._reader = FrameReader(initial_frame_max)
        self._eof = False  # receive_data(b"") came: the client ended the stream
        self._out: list[bytes] = []
        self._contents: dict[int, _Content] = {}
        self._broken: RemoteProtocolError | None = None
        self._offered_frame_max: int | None = None  # from the connection.tune we sent
        self._frame_max = initial_frame_max
        self._max_body_frame = initial_frame_max - FRAME_OVERHEAD
        self._max_message_size = max_message_size
        self._last_raw = EMPTY_RAW_PROPERTIES  # one-entry cache: publishers repeat properties
        self._last_properties = EMPTY_PROPERTIES
        # The same for basic.publish payloads; no payload is empty, so this one never matches.
        self._last_publish_raw = _EMPTY
        self._last_publish: Method = _NO_PUBLISH

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def frame_max(self) -> int:
        """The frame size limit in force (0 = none): initial until tune-ok, then negotiated."""
        return self._frame_max

    # -- inbound ------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Buffer bytes from the peer for `next_event`; b"" marks the end of its stream, after
        which more data is a LocalProtocolError (h11's convention)."""
        if data:
            if self._eof:
                raise LocalProtocolError("data received after the end of the stream")
            self._reader.feed(data)
        else:
            self._eof = True

    def next_event(self) -> Event | type[NEED_DATA]:
        """The next event from the buffered bytes, NEED_DATA, or once the stream ended,
        ConnectionClosed. Raises RemoteProtocolError (with `.code`) when the peer broke the
        protocol."""
        if self._broken is not None:
            raise self._broken
        try:
            return self._next_event()
        except LocalProtocolError as exc:
            code = None if exc.code is None else int(exc.code)
            self._broken = RemoteProtocolError(exc.text, code)
        except _LOW_LEVEL_ERRORS as exc:
            self._broken = RemoteProtocolError(f"cannot decode frame: {exc}", 501)
        raise self._broken

    def _next_event(self) -> Event | type[NEED_DATA]:
        reader = self._reader
        if self._state is ConnectionState.AWAIT_HEADER:
            return self._read_protocol_header()
        while True:
            found = reader.next_frame()
            if found is None:
                reader.compact()
                return self._end_of_stream() if self._eof else NEED_DATA
            frame_type, channel, start, end = found
            if frame_type == _METHOD:
                event = self._on_method(channel, reader.buf, start, end)
            elif frame_type == _BODY:
                event = self._on_body(channel, reader.buf, start, end)
            elif frame_type == _HEADER:
                event = self._on_header(channel, reader.buf, start, end)
            elif frame_type == _HEARTBEAT:
                if start != end:
                    raise LocalProtocolError("heartbeat frame with a payload", 501)
                if channel:
                    raise _unexpected(f"heartbeat frame on channel {channel}")
                return Heartbeat()
            else:
                raise LocalProtocolError(f"unknown frame type {frame_type}", 501)
            if event is not None:
                return event

    def _read_protocol_header(self) -> Event | type[NEED_DATA]:
        header = self._reader.read_protocol_header()
        if header is None:
            return self._end_of_stream() if self._eof else NEED_DATA
        if header != PROTOCOL_HEADER:
            self._out.append(PROTOCOL_HEADER)
            self._broken = RemoteProtocolError(
                f"unsupported protocol header {header!r}; answered with AMQP 0-9-1's", None
            )
            raise self._broken
        self._set_state(TABLE.next_state(self._state, RECEIVE, ProtocolHeader))
        return ProtocolHeader(header[5], header[6], header[7])

    def _end_of_stream(self) -> ConnectionClosed:
        """The stream ended and no whole event is left: a clean close between frames, else
        501, whether a frame or a message (a publish whose header or body never came) was cut."""
        buffered = self._reader.buffered
        if not buffered and self._contents:
            raise LocalProtocolError(
                "the peer closed the connection in the middle of a message on channel "
                f"{next(iter(self._contents))}",
                ReplyCode.FRAME_ERROR,
            )
        return end_of_stream(buffered, ReplyCode.FRAME_ERROR)

    def _on_method(self, channel: int, buf: bytearray, start: int, end: int) -> Event | None:
        if end - start < 4:
            raise LocalProtocolError("method frame shorter than its class and method ids", 501)
        (key,) = _U32.unpack_from(buf, start)
        if self._discarding and (channel or key not in _CLOSE_KEYS):
            return None
        if channel:
            if not self._channels_ok:
                raise _unexpected(f"frame on channel {channel} before connection.open")
            if channel in self._contents:
                raise _unexpected(f"method frame on channel {channel} while receiving content")
        if key == _PUBLISH_KEY:
            # Publishers repeat exchange and routing key: reuse the last decoded basic.publish.
            payload = buf[start:end]
            if payload == self._last_publish_raw:
                method = self._last_publish
            else:
                method = _decode_basic_publish(buf, start + 4, end)
                self._last_publish_raw, self._last_publish = bytes(payload), method
            if not channel:
                raise LocalProtocolError(f"{method.NAME} on channel 0", 504)
            return self._content(channel, method)
        decoder = DECODERS.get(key)
        if decoder is None:
            raise LocalProtocolError(
                f"unknown method {key >> 16}.{key & 0xFFFF}", ReplyCode.NOT_IMPLEMENTED
            )
        method = decoder(buf, start + 4, end)
        if not method.SENT_BY_CLIENT:
            raise LocalProtocolError(f"{method.NAME} is sent by servers only", 503)
        if channel == 0:
            if key >> 16 != _CONNECTION_CLASS:
                raise LocalProtocolError(f"{method.NAME} on channel 0", 504)
            self._after_connection_method(method)
        elif key >> 16 == _CONNECTION_CLASS:
            raise LocalProtocolError(f"{method.NAME} on channel {channel}", 503)
        elif method.HAS_CONTENT:
            return self._content(channel, method)
        return MethodFrame(channel, method)

    def _content(self, channel: int, method: Method) -> Message | None:
        """The whole message at once if its frames are buffered, else start assembling it."""
        reader = self._reader
        found = reader.next_content(channel, method.CLASS_ID, self._max_message_size)
        if found is None:
            self._contents[channel] = _Content(method)
            return None
        props_start, props_end, body_start, body_end = found
        buf = reader.buf
        raw = bytes(buf[props_start:props_end])
        if raw == self._last_raw:
            properties = self._last_properties
        else:
            properties = decode_properties(buf, props_start, props_end)
            self._last_raw, self._last_properties = raw, properties
        body = bytes(buf[body_start:body_end]) if body_end != body_start else _EMPTY
        return Message(channel, method, properties, body, raw)

    def _after_connection_method(self, method: Method) -> None:
        after = TABLE.next_state(self._state, RECEIVE, type(method))
        if type(method) is ConnectionTuneOk and self._state is ConnectionState.HANDSHAKE:
            self._adopt_frame_max(method.frame_max)  # a later tune-ok is the session's problem
        self._set_state(after)

    def _set_state(self, state: ConnectionState) -> None:
        self._state = state
        self._discarding = state in st.DISCARDING
        self._channels_ok = state in st.CHANNELS_ALLOWED
        self._can_send = state in st.SENDING
        if self._discarding:
            self._contents.clear()  # contents in progress are dropped with everything else

    def _adopt_frame_max(self, frame_max: int) -> None:
        offered = self._offered_frame_max
        if frame_max and frame_max < FRAME_MIN_SIZE:
            raise LocalProtocolError(
                f"negotiated frame_max {frame_max} is below the minimum {FRAME_MIN_SIZE}", 530
            )
        if offered and (frame_max == 0 or frame_max > offered):
            raise LocalProtocolError(
                f"negotiated frame_max {frame_max} exceeds the server's {offered}", 530
            )
        self._frame_max = frame_max
        self._reader.max_payload = frame_max
        self._max_body_frame = frame_max - FRAME_OVERHEAD if frame_max else 0

    def _on_header(self, channel: int, buf: bytearray, start: int, end: int) -> Event | None:
        content = self._contents.get(channel) if channel else None
        if content is None or content.properties is not None:
            if self._discarding:
                return None
            if not channel:
                raise _unexpected("content header on channel 0")
            raise _unexpected(f"content header on channel {channel} without a method before it")
        class_id, weight, body_size = decode_content_header(buf, start, end)
        method = content.method
        if class_id != method.CLASS_ID or weight:
            raise _unexpected(
                f"content header of class {class_id} weight {weight} after {method.NAME}"
            )
        raw = bytes(buf[start + 12 : end])
        if raw == self._last_raw:
            properties = self._last_properties
        else:
            properties = decode_properties(buf, start + 12, end)
            self._last_raw, self._last_properties = raw, properties
        if body_size == 0:
            del self._contents[channel]
            return Message(channel, method, properties, _EMPTY, raw)
        content.properties, content.raw, content.body_size = properties, raw, body_size
        if body_size > self._max_message_size:
            content.skip = True
            return ContentTooLarge(channel, method, body_size)
        return None

    def _on_body(self, channel: int, buf: bytearray, start: int, end: int) -> Event | None:
        content = self._contents.get(channel) if channel else None
        if content is None or content.properties is None:
            if self._discarding:
                return None
            if not channel:
                raise _unexpected("content body on channel 0")
            raise _unexpected(f"content body on channel {channel} without a header before it")
        received = content.received + end - start
        if received > content.body_size:
            raise _unexpected(
                f"content body on channel {channel} longer than the {content.body_size} "
                "bytes its header declared"
            )
        content.received = received
        if content.skip:
            if received == content.body_size:
                del self._contents[channel]
            return None
        chunk = bytes(buf[start:end])
        if received < content.body_size:
            content.chunks.append(chunk)
            return None
        del self._contents[channel]
        if content.chunks:
            content.chunks.append(chunk)
            chunk = _EMPTY.join(content.chunks)
        return Message(channel, content.method, content.properties, chunk, content.raw)

    # -- outbound -----------------------------------------------------------------------

    def send(self, event: Event) -> None:
        """Queue `event`'s frames for `data_to_send`.

        After connection.close, frames other than close / close-ok are dropped (the peer would
        discard them). Raises LocalProtocolError for what a server may not send.
        """
        state = self._state
        if not self._can_send:
            raise LocalProtocolError(f"cannot send in state {state.value}")
        if type(event) is Delivery:
            self._send_delivery(event, state)
        elif type(event) is MethodFrame:
            self._send_method(event, state)
        elif type(event) is Heartbeat:
            self._out.append(HEARTBEAT_FRAME)
        else:
            raise LocalProtocolError(f"a server cannot send {event!r}")

    def _send_method(self, event: MethodFrame, state: ConnectionState) -> None:
        method, channel = event.method, event.channel
        cls = type(method)
        if self._discarding and cls is not ConnectionClose and cls is not ConnectionCloseOk:
            return
        if not method.SENT_BY_SERVER or method.HAS_CONTENT:
            what = "send it as a Delivery" if method.HAS_CONTENT else "clients send it"
            raise LocalProtocolError(f"cannot send {method.NAME} as a method frame: {what}")
        if (channel == 0) != (method.CLASS_ID == _CONNECTION_CLASS):
            raise LocalProtocolError(f"cannot send {method.NAME} on channel {channel}")
        try:
            payload = method.encode()
        except (struct.error, UnicodeEncodeError, TypeError) as exc:
            raise LocalProtocolError(f"cannot encode {method!r}: {exc}") from exc
        if self._frame_max and len(payload) > self._frame_max - FRAME_OVERHEAD:
            raise LocalProtocolError(f"{method.NAME} does not fit in frame_max {self._frame_max}")
        if channel:
            self._out.append(frame(_METHOD, channel, payload))
            return
        after = TABLE.next_state(state, SEND, cls)  # before queueing it
        if type(method) is ConnectionTune:
            self._offered_frame_max = method.frame_max
        self._out.append(frame(_METHOD, 0, payload))
        self._set_state(after)

    def _send_delivery(self, event: Delivery, state: ConnectionState) -> None:
        if state is not ConnectionState.OPEN:
            if self._discarding:
                return
            raise LocalProtocolError(f"cannot deliver in state {state.value}")
        method = event.method
        if not (method.HAS_CONTENT and method.SENT_BY_SERVER) or event.channel == 0:
            raise LocalProtocolError(f"cannot send {method.NAME} on {event.channel} as a Delivery")
        properties = event.properties
        try:
            raw = properties if isinstance(properties, bytes) else encode_properties(properties)
            content_frames(self._out, event.channel, method, raw, event.body, self._max_body_frame)
        except (struct.error, UnicodeEncodeError, TypeError) as exc:
            raise LocalProtocolError(f"cannot encode {method!r}: {exc}") from exc

    def data_to_send(self) -> bytes:
        """Everything queued since the last call, as one bytes (b"" if nothing)."""
        out = self._out
        if not out:
            return _EMPTY
        data = out[0] if len(out) == 1 else _EMPTY.join(out)
        out.clear()
        return data

    # -- errors -------------------------------------------------------------------------

    def error_reply(self) -> MethodFrame | None:
        """After `next_event` raised RemoteProtocolError: the connection.close to send before
        hanging up, worded as the session words its own. None when nothing can be said: no
        reply code (a foreign protocol header, answered with ours already queued), or a state
        in which the server may not start a close (no header yet; close already exchanged)."""
        error = self._broken
        if error is None or error.code is None or self._state not in st.RUNNING:
            return None
        code = error.code
        return MethodFrame(0, ConnectionClose(code, reply_text(code, error.text), 0, 0))
