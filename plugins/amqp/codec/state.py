"""The connection's states and every transition between them, in one table (h11's rule 1).

    AWAIT_HEADER --recv ProtocolHeader--> HANDSHAKE --recv tune-ok--> TUNED --recv open--> OPEN
    HANDSHAKE / TUNED / OPEN --send or recv connection.close--> CLOSING
    CLOSING --send or recv connection.close-ok--> CLOSED   (from any state: close-ok closes)

What each state allows is also here: frames on channels other than 0 only once the connection
is open (RabbitMQ answers earlier ones with UNEXPECTED_FRAME 505), and after connection.close
both directions drop everything but connection.close and close-ok (spec: "after sending this
method, any received methods except Close and Close-OK MUST be discarded").
"""

from __future__ import annotations

import enum

from herald.plugins.amqp.codec.events import ProtocolHeader
from herald.plugins.amqp.codec.methods import (
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionTuneOk,
)


class ConnectionState(enum.Enum):
    AWAIT_HEADER = "await-header"  # nothing received yet
    HANDSHAKE = "handshake"  # header received: start / secure / tune on channel 0
    TUNED = "tuned"  # tune-ok received: frame_max is negotiated; waiting for connection.open
    OPEN = "open"  # connection.open received: channels may be used
    CLOSING = "closing"  # connection.close sent or received: only close / close-ok count
    CLOSED = "closed"  # close-ok sent or received: nothing more


class Direction(enum.Enum):
    SEND = "send"
    RECV = "recv"


S, D = ConnectionState, Direction
_RUNNING = (S.HANDSHAKE, S.TUNED, S.OPEN)

TRANSITIONS: dict[tuple[ConnectionState, Direction, type], ConnectionState] = {
    (S.AWAIT_HEADER, D.RECV, ProtocolHeader): S.HANDSHAKE,
    (S.HANDSHAKE, D.RECV, ConnectionTuneOk): S.TUNED,
    (S.TUNED, D.RECV, ConnectionOpen): S.OPEN,
    **{(state, d, ConnectionClose): S.CLOSING for state in _RUNNING for d in D},
    **{(state, d, ConnectionCloseOk): S.CLOSED for state in (*_RUNNING, S.CLOSING) for d in D},
}
"""(state, direction, event or method class) -> next state; pairs not listed keep the state."""

CHANNELS_ALLOWED = frozenset({S.OPEN, S.CLOSING})
"""States in which frames on channels other than 0 are accepted (CLOSING: and dropped)."""

DISCARDING = frozenset({S.CLOSING, S.CLOSED})
"""States in which frames other than connection.close / close-ok are dropped."""

SENDING = frozenset({S.HANDSHAKE, S.TUNED, S.OPEN, S.CLOSING})
"""States in which the server may send frames at all."""


def next_state(state: ConnectionState, direction: Direction, trigger: type) -> ConnectionState:
    """The state after `trigger` (an event or method class) went in `direction`."""
    return TRANSITIONS.get((state, direction, trigger), state)
