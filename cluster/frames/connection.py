"""`FrameConnection`: one end of a cluster port connection, sans-IO (core/codec_kit.py's API).

    conn = FrameConnection(Role.ACCEPTOR)      # or HA_SLAVE / LINK_HOLDER when dialing
    conn.receive_data(chunk)                   # b"" at the end of the stream
    while (frame := conn.next_event()) is not NEED_DATA:
        if type(frame) is ConnectionClosed: ...   # ended between two frames
        ...                                    # Hello, Start, Ack, ...; conn.send(Epochs(...))
    stream.send_all(conn.data_to_send())

The role says which end it is, and its table (state.py) what it may receive and send when.
Whatever the peer gets wrong raises `RemoteProtocolError` from `next_event`, once, and again
on every later call: an unknown type, a length over `MAX_FRAME` (from the prefix alone), a
body that does not fill its frame exactly, bad UTF-8, a frame this end may not receive now,
the stream ending inside a frame. `.code` is a `RefuseCode` when one says what went wrong
(5, version), else None; `error_reply()` is then the REFUSE to send before closing, or None.
Misuse by the caller (a frame this end may not send, a value its field cannot hold) raises
`LocalProtocolError` from `send`, and nothing is queued.
"""

from __future__ import annotations

from collections.abc import Mapping

from herald.cluster.frames.events import Frame, Refuse, RefuseCode
from herald.cluster.frames.reader import FrameReader
from herald.cluster.frames.state import TABLES, PeerError, Role, State
from herald.cluster.frames.wire import frame_pieces
from herald.core.codec_kit import (
    NEED_DATA,
    ConnectionClosed,
    Direction,
    LocalProtocolError,
    RemoteProtocolError,
    end_of_stream,
)


class FrameConnection:
    """One end of an HA stream or a node link."""

    __slots__ = (
        "_eof",
        "_error",
        "_out",
        "_reader",
        "_receivable",
        "_sendable",
        "_state",
        "_table",
        "role",
    )

    def __init__(self, role: Role) -> None:
        self.role = role
        self._table = TABLES[role]
        self._reader = FrameReader()
        self._out: list[bytes] = []
        self._eof = False  # receive_data(b""): the peer ended its stream
        self._error: RemoteProtocolError | None = None
        self._set_state(State.AWAIT_HELLO)

    @property
    def state(self) -> State:
        return self._state

    @property
    def buffered(self) -> int:
        """Received bytes not yet returned as frames (for the caller's flow control)."""
        return self._reader.buffered

    def _set_state(self, state: State) -> None:
        self._state = state
        # This state's moves, frame class -> next state: a frame costs one dict lookup.
        self._receivable: Mapping[object, State] = self._table.moves(state, Direction.RECEIVE)
        self._sendable: Mapping[object, State] = self._table.moves(state, Direction.SEND)

    # -- inbound ------------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes from the peer; b"" marks the end of its stream, after which more data
        is the caller's error. Ignored once the connection failed or sent REFUSE."""
        if not data:
            self._eof = True
        elif self._eof:
            raise LocalProtocolError("data received after the end of the stream")
        elif self._error is None and self._state is not State.REFUSED:
            self._reader.receive_data(data)

    def next_event(self) -> Frame | ConnectionClosed | type[NEED_DATA]:
        """The next frame from the peer, NEED_DATA, or (once the stream ended between two
        frames) ConnectionClosed; raises RemoteProtocolError. After this end sent REFUSE the
        bytes left are not read."""
        if self._error is not None:
            error = self._error
            raise RemoteProtocolError(f"connection already failed: {error.text}", error.code)
        if self._state is State.REFUSED:  # this end refused: it reads nothing more
            return ConnectionClosed() if self._eof else NEED_DATA
        reader = self._reader
        try:
            head = reader.header()
            if head is not None:
                cls, end = head
                after = self._receivable.get(cls)
                if after is None:  # not in the table: its refusal raises
                    after = self._table.next_state(self._state, Direction.RECEIVE, cls)
                if reader.complete(end):
                    frame = reader.decode(cls, end)
                    if after is not self._state:
                        self._set_state(after)
                    return frame
            if self._eof:  # ConnectionClosed, or an error if the stream ended inside a frame
                return end_of_stream(reader.buffered)
            return NEED_DATA
        except LocalProtocolError as exc:
            self._error = RemoteProtocolError(exc.text, exc.code)
            self._set_state(self._receivable.get(PeerError, self._state))
            raise self._error from None

    def error_reply(self) -> Refuse | None:
        """After `next_event` raised: the REFUSE to send before closing when a `RefuseCode`
        says what the peer got wrong (a version this end does not speak), else None; None too
        if nothing failed or the peer had refused first."""
        error = self._error
        if error is None or error.code is None or self._state is not State.FAILED:
            return None
        return Refuse(RefuseCode(error.code), error.text)

    # -- outbound -----------------------------------------------------------------------------

    def send(self, frame: Frame) -> None:
        """Queue `frame` for `data_to_send`; raises LocalProtocolError (nothing queued) if this
        end may not send it now or a value does not fit its field."""
        cls = type(frame)
        after = self._sendable.get(cls)
        if after is None:  # not in the table: its refusal raises
            after = self._table.next_state(self._state, Direction.SEND, cls)
        self._out += frame_pieces(frame)
        if after is not self._state:
            self._set_state(after)

    def data_to_send(self) -> bytes:
        """Everything queued since the last call, as one bytes object: header and payload
        pieces are joined here, once."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        return data
