"""The connection's states and every transition between them, in one table (h11's rule 1).

    AWAIT_HEADER --receive ProtocolHeader--> HANDSHAKE --receive tune-ok--> TUNED
    TUNED --receive open--> OPEN
    HANDSHAKE / TUNED / OPEN (/ CLOSING) --send or receive connection.close--> CLOSING
    HANDSHAKE / TUNED / OPEN / CLOSING --send or receive close-ok--> CLOSED

A move the table does not list is refused (codec_kit's rule), so it lists the moves that keep
the state too: every method a client may send on channel 0 while the connection runs (the
session answers one out of turn itself, handshake.py: 503 with its class and method ids), and
what the server sends in each state. A refused receive is 503 COMMAND_INVALID; a refused send
is herald's own mistake (no reply code).

What each state allows is also here: frames on channels other than 0 only once the connection
is open (RabbitMQ answers earlier ones with UNEXPECTED_FRAME 505), and after connection.close
both directions drop everything but connection.close and close-ok (spec: "after sending this
method, any received methods except Close and Close-OK MUST be discarded"). The connection
checks those through flags it caches per state, not through the table: they run per frame.
"""

from __future__ import annotations

import enum

from herald.core.codec_kit import Direction, LocalProtocolError, TransitionTable
from herald.plugins.amqp.codec.constants import ReplyCode
from herald.plugins.amqp.codec.events import ProtocolHeader
from herald.plugins.amqp.codec.methods import (
    ConnectionBlocked,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionSecure,
    ConnectionSecureOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    ConnectionUnblocked,
    ConnectionUpdateSecret,
    ConnectionUpdateSecretOk,
)


class ConnectionState(enum.Enum):
    AWAIT_HEADER = "await-header"  # nothing received yet
    HANDSHAKE = "handshake"  # header received: start / secure / tune on channel 0
    TUNED = "tuned"  # tune-ok received: frame_max is negotiated; waiting for connection.open
    OPEN = "open"  # connection.open received: channels may be used
    CLOSING = "closing"  # connection.close sent or received: only close / close-ok count
    CLOSED = "closed"  # close-ok sent or received: nothing more


S = ConnectionState
RECEIVE, SEND = Direction.RECEIVE, Direction.SEND
_RUNNING = (S.HANDSHAKE, S.TUNED, S.OPEN)

_CLIENT_METHODS = (
    ConnectionStartOk,
    ConnectionSecureOk,
    ConnectionTuneOk,
    ConnectionOpen,
    ConnectionUpdateSecret,
)
"""Received in every running state: the session, not the codec, refuses one out of turn."""

_SERVER_METHODS = {
    S.HANDSHAKE: (ConnectionStart, ConnectionSecure, ConnectionTune, ConnectionUpdateSecretOk),
    S.TUNED: (ConnectionUpdateSecretOk,),
    S.OPEN: (ConnectionOpenOk, ConnectionUpdateSecretOk, ConnectionBlocked, ConnectionUnblocked),
}
"""What herald sends besides close and close-ok (open-ok: receiving open moved to OPEN)."""


def _refuse(state: ConnectionState, direction: Direction, trigger: object) -> LocalProtocolError:
    name = getattr(trigger, "NAME", None) or getattr(trigger, "__name__", trigger)
    if direction is RECEIVE:
        return LocalProtocolError(
            f"unexpected {name} in connection state {state.value}", ReplyCode.COMMAND_INVALID
        )
    return LocalProtocolError(f"cannot send {name} in connection state {state.value}")


_CLOSERS = (*_RUNNING, S.CLOSING)

TABLE: TransitionTable[ConnectionState] = TransitionTable(
    ConnectionState,
    {
        (S.AWAIT_HEADER, RECEIVE, ProtocolHeader): S.HANDSHAKE,
        **{(state, RECEIVE, cls): state for state in _RUNNING for cls in _CLIENT_METHODS},
        (S.HANDSHAKE, RECEIVE, ConnectionTuneOk): S.TUNED,  # over the line above's self-move
        (S.TUNED, RECEIVE, ConnectionOpen): S.OPEN,  # likewise
        **{(state, SEND, cls): state for state, sent in _SERVER_METHODS.items() for cls in sent},
        **{(state, way, ConnectionClose): S.CLOSING for state in _CLOSERS for way in Direction},
        **{(state, way, ConnectionCloseOk): S.CLOSED for state in _CLOSERS for way in Direction},
        # The peer's close or close-ok crossing our close-ok: returned, changes nothing.
        (S.CLOSED, RECEIVE, ConnectionClose): S.CLOSED,
        (S.CLOSED, RECEIVE, ConnectionCloseOk): S.CLOSED,
    },
    _refuse,
)
"""(state, direction, ProtocolHeader or a connection method class) -> next state."""

RUNNING = frozenset(_RUNNING)
"""States in which the server may start a connection.close."""

CHANNELS_ALLOWED = frozenset({S.OPEN, S.CLOSING})
"""States in which frames on channels other than 0 are accepted (CLOSING: and dropped)."""

DISCARDING = frozenset({S.CLOSING, S.CLOSED})
"""States in which frames other than connection.close / close-ok are dropped."""

SENDING = frozenset({*_RUNNING, S.CLOSING})
"""States in which the server may send frames at all."""
