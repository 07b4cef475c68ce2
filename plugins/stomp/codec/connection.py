"""`StompConnection`: the server side of one STOMP connection, without I/O.

The caller (the STOMP session, driven by the Trio adapter) feeds received bytes with
`receive_data`, pulls `Frame`s and `Heartbeat`s with `next_event` until NEED_DATA, queues
replies with `send` / `send_heartbeat`, and writes `data_to_send()` to the socket
(core/codec_kit.py's `CodecConnection`). The end of the stream goes in as `receive_data(b"")`:
between frames `next_event` then returns `ConnectionClosed`; inside one it raises, as a frame
cut short is a protocol error, not a clean close. The codec never picks the protocol version:
the session negotiates it from CONNECT's accept-version and sets `version` before it sends
CONNECTED; until then frames are read and written as 1.0.

A peer's protocol error is raised from `next_event` as RemoteProtocolError (STOMP has no error
code: `code` is None and `text` belongs in the ERROR frame's message header); its `__cause__`
is the reader's LocalProtocolError, a `LimitExceeded` naming the limit for a frame over one.
The error is sticky: the connection is then only good for sending `error_reply()`. After an
ERROR frame is sent, inbound bytes are ignored and nothing more may be sent.
"""

from __future__ import annotations

from typing import Final

import attrs

from herald.core.codec_kit import (
    NEED_DATA,
    ConnectionClosed,
    Direction,
    LocalProtocolError,
    RemoteProtocolError,
    end_of_stream,
)
from herald.plugins.stomp.codec.events import (
    CLIENT_COMMANDS,
    VERSIONS,
    Frame,
    Heartbeat,
    error_frame,
)
from herald.plugins.stomp.codec.limits import StompLimits
from herald.plugins.stomp.codec.reader import FrameReader
from herald.plugins.stomp.codec.state import TABLE, State
from herald.plugins.stomp.codec.writer import encode_frame

_RECEIVE, _SEND = Direction.RECEIVE, Direction.SEND
# Each state's moves, kept per direction: a frame costs one dict lookup by its command, and a
# connection holds no dicts of its own (idle ones are held by the ten thousand).
_RECEIVE_MOVES: Final = {state: TABLE.moves(state, _RECEIVE) for state in State}
_SEND_MOVES: Final = {state: TABLE.moves(state, _SEND) for state in State}
_CLOSED: Final = State.CLOSED  # an Enum member read from its class costs a lookup per frame


@attrs.define(slots=True)
class StompConnection:
    """A sans-IO STOMP 1.0/1.1/1.2 server connection: bytes in, events out, frames to bytes."""

    limits: StompLimits = attrs.field(factory=StompLimits)
    version: str = attrs.field(default="1.0", validator=attrs.validators.in_(VERSIONS))
    """The agreed version; the session sets it when it answers CONNECT."""
    state: State = attrs.field(default=State.AWAIT_CONNECT, init=False)
    _reader: FrameReader = attrs.field(init=False)
    _outgoing: list[bytes] = attrs.field(init=False, factory=list)
    _error: RemoteProtocolError | None = attrs.field(init=False, default=None)
    _eof: bool = attrs.field(init=False, default=False)  # receive_data(b""): the client is done

    def __attrs_post_init__(self) -> None:
        self._reader = FrameReader(self.limits, CLIENT_COMMANDS, peer="client")

    # -- inbound ----------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Buffer bytes received from the client; b"" marks the end of its stream (h11's
        convention), after which more data is the caller's error. Ignored after ERROR."""
        if not data:
            self._eof = True
        elif self._eof:
            raise LocalProtocolError("data received after the end of the stream")
        elif self.state is not _CLOSED:
            self._reader.feed(data)

    def next_event(self) -> Frame | Heartbeat | ConnectionClosed | type[NEED_DATA]:
        """The next complete frame or heart-beat, NEED_DATA, or once the stream ended with
        no frame half read, ConnectionClosed.

        Raises RemoteProtocolError when the client broke the protocol, and again on every
        later call. After the server sent ERROR the bytes left are not read.
        """
        if self._error is not None:
            raise self._error
        state = self.state
        if state is _CLOSED:
            return ConnectionClosed() if self._eof else NEED_DATA
        try:
            event = self._reader.next_event(self.version)
            if type(event) is Frame:
                after = _RECEIVE_MOVES[state].get(event.command)
                if after is None:  # not in the table: raises its refusal
                    after = TABLE.next_state(state, _RECEIVE, event.command)
                if after is not state:  # attrs' __setattr__ costs more than the check
                    self.state = after
            elif event is NEED_DATA and self._eof:
                return end_of_stream(self._reader.buffered)  # raises if a frame was cut
        except LocalProtocolError as exc:
            self._error = RemoteProtocolError(exc.text)
            raise self._error from exc
        return event

    def error_reply(self, text: str | None = None) -> Frame | None:
        """After `next_event` raised: the ERROR frame to send before closing, saying the
        error's text (or `text`, the caller's fuller wording) in its message header and body;
        None when there was no error or an ERROR was already sent."""
        error = self._error
        if error is None or self.state is _CLOSED:
            return None
        message = error.text if text is None else text
        return error_frame(message, message.encode())

    @property
    def buffered(self) -> int:
        """Received bytes not yet returned as events (for the adapter's flow control)."""
        return self._reader.buffered

    # -- outbound ---------------------------------------------------------------------------

    def send(self, frame: Frame) -> None:
        """Queue a server frame (CONNECTED, MESSAGE, RECEIPT, ERROR) for `data_to_send`.

        Raises LocalProtocolError if the state does not allow the frame or a header cannot be
        written in this version; nothing is queued then.
        """
        state = _SEND_MOVES[self.state].get(frame.command)
        if state is None:  # not in the table: raises its refusal
            state = TABLE.next_state(self.state, _SEND, frame.command)
        self._outgoing.append(encode_frame(frame, self.version))
        if state is not self.state:
            self.state = state

    def send_encoded(self, command: str, data: bytes) -> None:
        """Queue a server frame the caller encoded itself (from `header_line` pieces), exactly
        as `encode_frame` would for this version; the state changes as for `send`."""
        state = _SEND_MOVES[self.state].get(command)
        if state is None:  # not in the table: raises its refusal
            state = TABLE.next_state(self.state, _SEND, command)
        self._outgoing.append(data)
        if state is not self.state:
            self.state = state

    def send_heartbeat(self) -> None:
        """Queue one heart-beat (an LF, valid in every version)."""
        if self.state is _CLOSED:
            raise LocalProtocolError("cannot send a heart-beat: the connection sent ERROR")
        self._outgoing.append(b"\n")

    @property
    def has_output(self) -> bool:
        """Whether anything is queued for `data_to_send`."""
        return bool(self._outgoing)

    def data_to_send(self) -> bytes:
        """Everything queued since the last call, as one bytes object."""
        if not self._outgoing:
            return b""
        data = b"".join(self._outgoing)
        self._outgoing.clear()
        return data
