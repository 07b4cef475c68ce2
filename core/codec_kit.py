"""What the three sans-IO codecs share, so each one means the same by the same word (h11's shapes).

    conn.receive_data(chunk)          # b"" = the peer ended the stream
    while (event := conn.next_event()) is not NEED_DATA:
        if type(event) is ConnectionClosed: ...   # at a frame boundary: a clean end
    conn.send(event); sock.send_all(conn.data_to_send())

- `NEED_DATA`: `next_event()` has no whole event in its buffer (a sentinel, never None).
- `Event`: the base of every codec's events (AMQP frames, MQTT packets, STOMP frames).
- `ConnectionClosed`: the stream ended between two events. A stream that ends inside one is a
  `RemoteProtocolError` from `next_event` (`end_of_stream` decides), never a clean close.
- Errors (core/errors.py, imported from nothing but itself): internal code raises
  `LocalProtocolError`; `next_event` re-raises what the peer caused as `RemoteProtocolError`,
  and stays broken; `error_reply()` is then what to tell the peer before hanging up.
- `TransitionTable`: every (state, direction, trigger) -> next state of one codec; a pair that
  is not in the table is not allowed, in every codec.

This module imports attrs and the error types only: a codec that uses it stays free of trio,
pluggy and the kernel (tests/test_codec_imports.py).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Generic, Protocol, TypeVar

import attrs

from herald.core.errors import LocalProtocolError, ProtocolError, RemoteProtocolError

__all__ = [
    "NEED_DATA",
    "CodecConnection",
    "ConnectionClosed",
    "Direction",
    "Event",
    "LocalProtocolError",
    "ProtocolError",
    "RemoteProtocolError",
    "TransitionTable",
    "end_of_stream",
]


class _SentinelType(type):
    def __repr__(cls) -> str:
        return cls.__name__


class NEED_DATA(metaclass=_SentinelType):  # a sentinel class, named and shaped like h11's
    """Returned by `next_event()` when the buffered bytes hold no whole event yet."""


class Event:
    """Base of every codec event; each protocol's events are frozen attrs classes under it."""

    __slots__ = ()


@attrs.frozen(slots=True)
class ConnectionClosed(Event):
    """The peer ended the stream (`receive_data(b"")`) with no event half received."""


CONNECTION_CLOSED: Final = ConnectionClosed()


def end_of_stream(buffered: int, code: int | None = None) -> ConnectionClosed:
    """What `next_event()` returns once the stream ended and no whole event is left:
    `ConnectionClosed` if nothing is buffered, else a LocalProtocolError with `code` (the
    codec's "malformed frame" reply), since the peer hung up in the middle of a frame."""
    if buffered:
        raise LocalProtocolError(
            f"the peer closed the connection in the middle of a frame ({buffered} bytes)", code
        )
    return CONNECTION_CLOSED


class Direction(enum.Enum):
    """Which way a trigger passed, seen from the codec's side (a server)."""

    __hash__ = object.__hash__  # looked up per frame; Enum's own hash runs Python code

    RECEIVE = "receive"
    SEND = "send"


StateT = TypeVar("StateT", bound=enum.Enum)
Refusal = Callable[[Any, Direction, object], LocalProtocolError]
"""`refusal(state, direction, trigger)`: the error for a move the table does not have."""


def _default_refusal(state: enum.Enum, direction: Direction, trigger: object) -> LocalProtocolError:
    name = getattr(trigger, "__name__", trigger)
    way = "received" if direction is Direction.RECEIVE else "sent"
    return LocalProtocolError(f"{name} cannot be {way} in state {state.name}")


class TransitionTable(Generic[StateT]):
    """A codec's state machine: `transitions` maps (state, direction, trigger) to the next
    state, a trigger being an event class or a marker class the codec defines. Whatever is
    not in the table is refused, by a LocalProtocolError that `refusal` words (and gives the
    protocol's reply code). Nothing but a codec's table changes its state (h11's rule 1).

    `moves(state, direction)` is the table for one state and direction as a dict of trigger
    -> next state, for hot paths that keep their state's dict and look up a class.
    """

    def __init__(
        self,
        states: Iterable[StateT],
        transitions: Mapping[tuple[StateT, Direction, object], StateT],
        refusal: Refusal | None = None,
    ) -> None:
        self.transitions: Final = dict(transitions)
        self._refusal = refusal or _default_refusal
        self._moves: dict[Direction, dict[StateT, dict[object, StateT]]] = {
            direction: {state: {} for state in states} for direction in Direction
        }
        for (state, direction, trigger), after in self.transitions.items():
            self._moves[direction][state][trigger] = after

    def moves(self, state: StateT, direction: Direction) -> Mapping[object, StateT]:
        """trigger -> next state, for every trigger allowed in `state` going `direction`."""
        return self._moves[direction][state]

    def allows(self, state: StateT, direction: Direction, trigger: object) -> bool:
        return trigger in self._moves[direction][state]

    def next_state(self, state: StateT, direction: Direction, trigger: object) -> StateT:
        """The state after `trigger` passed `direction` in `state`; raises the refusal if the
        table has no such move."""
        after = self._moves[direction][state].get(trigger)
        if after is None:
            raise self._refusal(state, direction, trigger)
        return after


class CodecConnection(Protocol):
    """The one API of herald's three server-side codecs (h2's shape: the codec answers
    heartbeats, PINGREQ and close itself, so it sends as well as parses)."""

    def receive_data(self, data: bytes) -> None:
        """Buffer bytes from the peer; b"" means the peer ended the stream."""

    def next_event(self) -> Event | type[NEED_DATA]:
        """The next whole event, NEED_DATA, or ConnectionClosed; raises RemoteProtocolError."""

    def data_to_send(self) -> bytes:
        """Everything queued to send since the last call, as one bytes (b"" if nothing)."""

    def error_reply(self) -> Event | None:
        """After `next_event` raised RemoteProtocolError: the event to send before closing
        (AMQP connection.close, a refusing MQTT CONNACK or MQTT 5 DISCONNECT, a STOMP ERROR
        frame), or None when the protocol has nothing to say then."""
