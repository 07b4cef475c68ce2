"""The STOMP connection's states and every transition, in one table.

A frame either moves the connection along TRANSITIONS or is refused: frames before CONNECT,
a second CONNECT, frames after DISCONNECT, or anything the server sends after its ERROR.
Heart-beats change nothing. The table is keyed by (state, sender, command); whatever is not
in it is a protocol error, explained by `_refusal`.
"""

from __future__ import annotations

import enum
from typing import Final

from herald.core.errors import LocalProtocolError


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


class Role(enum.Enum):
    """Who sends a frame."""

    __hash__ = object.__hash__

    CLIENT = "client"
    SERVER = "server"


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
_C, _S = Role.CLIENT, Role.SERVER
_LIVE: Final = (State.AWAIT_CONNECT, State.CONNECTING, State.OPEN, State.DISCONNECTING)

TRANSITIONS: Final[dict[tuple[State, Role, str], State]] = {
    (State.AWAIT_CONNECT, _C, "CONNECT"): State.CONNECTING,
    (State.AWAIT_CONNECT, _C, "STOMP"): State.CONNECTING,
    (State.CONNECTING, _S, "CONNECTED"): State.OPEN,
    **{(State.OPEN, _C, command): State.OPEN for command in _SESSION_COMMANDS},
    (State.OPEN, _C, "DISCONNECT"): State.DISCONNECTING,
    (State.OPEN, _S, "MESSAGE"): State.OPEN,
    (State.OPEN, _S, "RECEIPT"): State.OPEN,
    (State.DISCONNECTING, _S, "MESSAGE"): State.DISCONNECTING,
    (State.DISCONNECTING, _S, "RECEIPT"): State.DISCONNECTING,
    # ERROR answers anything, even a first frame that was not CONNECT, and ends the connection.
    **{(state, _S, "ERROR"): State.CLOSED for state in _LIVE},
}


MOVES: Final[dict[Role, dict[State, dict[str, State]]]] = {
    role: {
        state: {c: after for (s, r, c), after in TRANSITIONS.items() if s is state and r is role}
        for state in State
    }
    for role in Role
}
"""TRANSITIONS by sender, then state, then command: the per-frame lookup takes no tuple
building (what is not in it goes to `transition` for its error)."""


def transition(state: State, role: Role, command: str) -> State:
    """The state after `role` sends a `command` frame in `state`; LocalProtocolError if none."""
    try:
        return TRANSITIONS[state, role, command]
    except KeyError:
        raise LocalProtocolError(_refusal(state, role, command)) from None


def _refusal(state: State, role: Role, command: str) -> str:
    if role is Role.CLIENT:
        if state is State.AWAIT_CONNECT:
            return f"expected a CONNECT or STOMP frame first, got {command}"
        if state is State.CONNECTING:
            return f"{command} frame received before the CONNECT frame was answered"
        if state is State.DISCONNECTING:
            return f"{command} frame received after DISCONNECT"
        if command in ("CONNECT", "STOMP"):
            return f"{command} frame received on a connection that is already connected"
        return f"a client may not send a {command} frame"
    if state is State.CLOSED:
        return f"cannot send {command}: the connection was closed by an ERROR frame"
    return f"a server cannot send {command} in state {state.value}"
