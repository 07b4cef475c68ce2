"""The STOMP connection's states and every transition, in one table.

A frame either moves the connection along TRANSITIONS or is refused: frames before CONNECT,
a second CONNECT, frames after DISCONNECT, or anything the server sends after its ERROR.
Heart-beats change nothing. The table is keyed by (state, direction, command), RECEIVE being a
client's frame and SEND the server's (core/codec_kit.py); whatever is not in it is a protocol
error, worded by `_refusal`.
"""

from __future__ import annotations

import enum
from typing import Final

from herald.core.codec_kit import Direction, LocalProtocolError, TransitionTable


class State(enum.Enum):
    """Where the connection is in its life; see TRANSITIONS."""

    __hash__ = object.__hash__  # the table is looked up per frame; Enum's hash is Python code

    AWAIT_CONNECT = "await-connect"
    """Nothing but heart-beats received yet; the client must send CONNECT or STOMP."""
    CONNECTING = "connecting"
    """CONNECT received; the server answers CONNECTED (after setting the version) or ERROR."""
    OPEN = "open"
    DISCONNECTING = "disconnecting"
    """DISCONNECT received; the server may still send RECEIPT (and MESSAGEs in flight)."""
    CLOSED = "closed"
    """The server sent ERROR; it closes the connection and reads nothing more."""


_SESSION_COMMANDS: Final = (
    "SEND",
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "ACK",
    "NACK",
    "BEGIN",
    "COMMIT",
    "ABORT",
)
_R, _S = Direction.RECEIVE, Direction.SEND  # a client's frame, the server's
_LIVE: Final = (State.AWAIT_CONNECT, State.CONNECTING, State.OPEN, State.DISCONNECTING)

TRANSITIONS: Final[dict[tuple[State, Direction, object], State]] = {
    (State.AWAIT_CONNECT, _R, "CONNECT"): State.CONNECTING,
    (State.AWAIT_CONNECT, _R, "STOMP"): State.CONNECTING,
    (State.CONNECTING, _S, "CONNECTED"): State.OPEN,
    **{(State.OPEN, _R, command): State.OPEN for command in _SESSION_COMMANDS},
    (State.OPEN, _R, "DISCONNECT"): State.DISCONNECTING,
    (State.OPEN, _S, "MESSAGE"): State.OPEN,
    (State.OPEN, _S, "RECEIPT"): State.OPEN,
    (State.DISCONNECTING, _S, "MESSAGE"): State.DISCONNECTING,
    (State.DISCONNECTING, _S, "RECEIPT"): State.DISCONNECTING,
    # ERROR answers anything, even a first frame that was not CONNECT, and ends the connection.
    **{(state, _S, "ERROR"): State.CLOSED for state in _LIVE},
}


def _refusal(state: State, direction: Direction, command: object) -> LocalProtocolError:
    if direction is Direction.RECEIVE:
        if state is State.AWAIT_CONNECT:
            text = f"expected a CONNECT or STOMP frame first, got {command}"
        elif state is State.CONNECTING:
            text = f"{command} frame received before the CONNECT frame was answered"
        elif state is State.DISCONNECTING:
            text = f"{command} frame received after DISCONNECT"
        elif command in ("CONNECT", "STOMP"):
            text = f"{command} frame received on a connection that is already connected"
        else:
            text = f"a client may not send a {command} frame"
    elif state is State.CLOSED:
        text = f"cannot send {command}: the connection was closed by an ERROR frame"
    else:
        text = f"a server cannot send {command} in state {state.value}"
    return LocalProtocolError(text)


TABLE: Final = TransitionTable(State, TRANSITIONS, _refusal)
