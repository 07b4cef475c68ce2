"""Who may send which frame when, on both streams of the cluster port, in one table per role.

Each stream is written once below, as the turns its two ends take (`HA_STEPS`, `LINK_STEPS`:
state, sender, frame, next state); a role's table is derived from them: its own frames are
SEND moves, its peer's are RECEIVE moves (core/codec_kit.py's `Direction`). So the master never
receives DATA and the slave never sends it, and each end of a stream walks the same states.

- HA stream: the slave dials and sends HELLO; the master answers EPOCHS; the slave truncates
  and sends START; the master streams DATA, or first a snapshot (SNAP_BEGIN, then per file a
  SNAP_FILE and its SNAP_CHUNKs, then SNAP_END) when the slave's offset is gone; the slave ACKs
  from START on.
- Node link: the holder dials and sends LINK_HELLO; the origin answers with its own; the holder
  may send READ and ACKS at once (pipelined), the origin answers with ENTRIES, ACKED and
  LINK_ERROR only after its LINK_HELLO.
- REFUSE may pass either way once the first frame has, and ends the connection: the end that
  sent it reads nothing more (REFUSED), the end that received it may send nothing (CLOSED).
- A peer that breaks the protocol (`PeerError`) leaves the connection FAILED, where only the
  REFUSE of `error_reply()` may still be sent.

The cluster port accepts both streams, so the ACCEPTOR's table is the master's and the origin's
together: their first frames differ (HELLO, LINK_HELLO), and the first frame picks the stream.
A pair missing from a table is refused: received, it is the peer's protocol error; sent, the
caller's LocalProtocolError. Nothing else changes `FrameConnection.state` (h11's rule 1).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final

from herald.cluster.frames.events import (
    Ack,
    Acked,
    Acks,
    Data,
    Entries,
    Epochs,
    Hello,
    LinkError,
    LinkHello,
    Read,
    Refuse,
    SnapBegin,
    SnapChunk,
    SnapEnd,
    SnapFile,
    Start,
)
from herald.core.codec_kit import Direction, LocalProtocolError, Refusal, TransitionTable


class Role(enum.Enum):
    """Which end of which stream a connection is."""

    __hash__ = object.__hash__  # looked up per frame; Enum's own hash runs Python code

    HA_MASTER = "HA master"
    """The master's end of an HA stream: receives HELLO, START, ACK; sends EPOCHS, DATA and
    snapshots."""
    HA_SLAVE = "HA slave"
    """The slave's end: dials the master, sends HELLO, START, ACK."""
    LINK_ORIGIN = "link origin"
    """The end of a node link on the queue's origin (its group's master): receives
    LINK_HELLO, READ, ACKS; sends LINK_HELLO, ENTRIES, ACKED, LINK_ERROR."""
    LINK_HOLDER = "link holder"
    """The end on the node that holds the slots: dials the origin, reads and acks."""
    ACCEPTOR = "cluster port"
    """A connection the cluster port accepted: its first frame makes it an HA master's end
    (HELLO) or a link origin's (LINK_HELLO)."""


class State(enum.Enum):
    __hash__ = object.__hash__

    AWAIT_HELLO = "before the first frame"
    HA_HELLO = "HELLO passed; the master answers EPOCHS"
    HA_EPOCHS = "EPOCHS passed; the slave truncates and sends START"
    HA_STARTED = "START passed; the master sends DATA, or a snapshot first"
    HA_STREAMING = "streaming DATA"
    HA_SNAPSHOT = "SNAP_BEGIN passed; a SNAP_FILE or SNAP_END follows"
    HA_SNAPSHOT_FILE = "SNAP_FILE passed; its SNAP_CHUNKs, another SNAP_FILE or SNAP_END follow"
    LINK_HELLO = "the holder's LINK_HELLO passed; the origin answers with its own"
    LINK_OPEN = "node link open"
    REFUSED = "this end sent REFUSE and reads nothing more"
    CLOSED = "the peer sent REFUSE; nothing more may pass"
    FAILED = "the peer broke the protocol; only a REFUSE may be sent"


class PeerError:
    """Trigger: the peer sent bytes that break the protocol."""


S = State
MASTER, SLAVE = Role.HA_MASTER, Role.HA_SLAVE
ORIGIN, HOLDER = Role.LINK_ORIGIN, Role.LINK_HOLDER
Step = tuple[State, Role, type, State]

_SNAPSHOT: Final = (S.HA_SNAPSHOT, S.HA_SNAPSHOT_FILE)
HA_STEPS: Final[tuple[Step, ...]] = (
    (S.AWAIT_HELLO, SLAVE, Hello, S.HA_HELLO),
    (S.HA_HELLO, MASTER, Epochs, S.HA_EPOCHS),
    (S.HA_EPOCHS, SLAVE, Start, S.HA_STARTED),
    (S.HA_STARTED, MASTER, Data, S.HA_STREAMING),
    (S.HA_STREAMING, MASTER, Data, S.HA_STREAMING),
    (S.HA_STARTED, MASTER, SnapBegin, S.HA_SNAPSHOT),
    *((state, MASTER, SnapFile, S.HA_SNAPSHOT_FILE) for state in _SNAPSHOT),
    (S.HA_SNAPSHOT_FILE, MASTER, SnapChunk, S.HA_SNAPSHOT_FILE),
    *((state, MASTER, SnapEnd, S.HA_STREAMING) for state in _SNAPSHOT),
    *((state, SLAVE, Ack, state) for state in (S.HA_STARTED, S.HA_STREAMING, *_SNAPSHOT)),
)
LINK_STEPS: Final[tuple[Step, ...]] = (
    (S.AWAIT_HELLO, HOLDER, LinkHello, S.LINK_HELLO),
    (S.LINK_HELLO, ORIGIN, LinkHello, S.LINK_OPEN),
    *(
        (state, HOLDER, frame, state)
        for state in (S.LINK_HELLO, S.LINK_OPEN)
        for frame in (Read, Acks)
    ),
    *((S.LINK_OPEN, ORIGIN, frame, S.LINK_OPEN) for frame in (Entries, Acked, LinkError)),
)


def _moves(role: Role, steps: Iterable[Step]) -> dict[tuple[State, Direction, object], State]:
    """One end's rows: the stream's steps, plus REFUSE and the peer's errors in every state
    after the first frame."""
    rows: dict[tuple[State, Direction, object], State] = {}
    live: set[State] = set()
    for state, sender, frame, after in steps:
        direction = Direction.SEND if sender is role else Direction.RECEIVE
        rows[(state, direction, frame)] = after
        live.add(after)
    for state in live:
        rows[(state, Direction.SEND, Refuse)] = S.REFUSED
        rows[(state, Direction.RECEIVE, Refuse)] = S.CLOSED
    for state in (S.AWAIT_HELLO, *live):
        rows[(state, Direction.RECEIVE, PeerError)] = S.FAILED
    rows[(S.CLOSED, Direction.RECEIVE, PeerError)] = S.CLOSED
    rows[(S.FAILED, Direction.SEND, Refuse)] = S.REFUSED
    return rows


def _refusal(role: Role) -> Refusal:
    def refuse(state: State, direction: Direction, trigger: object) -> LocalProtocolError:
        kind = getattr(trigger, "TYPE", None)  # a frame class's wire name: DATA, ...
        name = kind.name if kind is not None else getattr(trigger, "__name__", trigger)
        way = "receive" if direction is Direction.RECEIVE else "send"
        return LocalProtocolError(f"the {role.value} end cannot {way} {name} ({state.value})")

    return refuse


TRANSITIONS: Final = {
    MASTER: _moves(MASTER, HA_STEPS),
    SLAVE: _moves(SLAVE, HA_STEPS),
    ORIGIN: _moves(ORIGIN, LINK_STEPS),
    HOLDER: _moves(HOLDER, LINK_STEPS),
    Role.ACCEPTOR: {**_moves(MASTER, HA_STEPS), **_moves(ORIGIN, LINK_STEPS)},
}
TABLES: Final = {
    role: TransitionTable(State, rows, _refusal(role)) for role, rows in TRANSITIONS.items()
}
