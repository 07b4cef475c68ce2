"""The server connection's state machine: one codec kit `TransitionTable`, keyed by (state,
direction, trigger).

A trigger is a packet class, or one of two markers: `RefusedConnAck` (a CONNACK whose reason
code refuses the client, which ends the connection where an accepting one opens it) and
`PeerError` (the peer broke the protocol). A pair missing from the table is not allowed (`TABLE`'s
refusal): for an inbound packet that is a Protocol Error (0x82), for an outbound one a
LocalProtocolError without a code. Nothing outside this table changes `MQTTConnection.state`
(h11's rule 1).

The client may send packets right after CONNECT, before its CONNACK (MQTT 5.0 section 3.1.4),
so CONNECTING reads them; the server may send nothing but AUTH before its CONNACK.
"""

from __future__ import annotations

import enum
from typing import Final

from herald.core.codec_kit import Direction, LocalProtocolError, TransitionTable
from herald.plugins.mqtt.codec.packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)
from herald.plugins.mqtt.codec.wire import protocol_error


class ConnectionState(enum.Enum):
    AWAIT_CONNECT = "waiting for CONNECT"
    CONNECTING = "CONNECT received, CONNACK not sent yet"
    CONNECTED = "CONNACK accepted the client"
    CONNECT_FAILED = "the client broke the protocol before its CONNACK; a refusal may be sent"
    FAILED = "the client broke the protocol after its CONNACK; MQTT 5 may send DISCONNECT"
    CLOSED = "DISCONNECT or a refusing CONNACK was exchanged; nothing more may pass"


class RefusedConnAck:
    """Trigger: a CONNACK with a non-zero reason code."""


class PeerError:
    """Trigger: the client sent something that breaks the protocol."""


S = ConnectionState
RECEIVE = Direction.RECEIVE
SEND = Direction.SEND
_CLIENT_PACKETS: Final = (Publish, PubAck, PubRec, PubRel, PubComp, Subscribe, Unsubscribe)
_CLIENT_PACKETS_ALL: Final = (*_CLIENT_PACKETS, PingReq, Auth)
_SERVER_PACKETS: Final = (Publish, PubAck, PubRec, PubRel, PubComp, SubAck, UnsubAck, PingResp)

TRANSITIONS: Final[dict[tuple[ConnectionState, Direction, object], ConnectionState]] = {
    (S.AWAIT_CONNECT, RECEIVE, Connect): S.CONNECTING,
    **{(S.CONNECTING, RECEIVE, cls): S.CONNECTING for cls in _CLIENT_PACKETS_ALL},
    **{(S.CONNECTED, RECEIVE, cls): S.CONNECTED for cls in _CLIENT_PACKETS_ALL},
    (S.CONNECTING, RECEIVE, Disconnect): S.CLOSED,
    (S.CONNECTED, RECEIVE, Disconnect): S.CLOSED,
    (S.AWAIT_CONNECT, RECEIVE, PeerError): S.CONNECT_FAILED,
    (S.CONNECTING, RECEIVE, PeerError): S.CONNECT_FAILED,
    (S.CONNECTED, RECEIVE, PeerError): S.FAILED,
    (S.CLOSED, RECEIVE, PeerError): S.CLOSED,
    (S.CONNECTING, SEND, ConnAck): S.CONNECTED,
    (S.CONNECTING, SEND, RefusedConnAck): S.CLOSED,
    (S.CONNECTING, SEND, Auth): S.CONNECTING,
    (S.CONNECT_FAILED, SEND, RefusedConnAck): S.CLOSED,
    **{(S.CONNECTED, SEND, cls): S.CONNECTED for cls in (*_SERVER_PACKETS, Auth)},
    (S.CONNECTED, SEND, Disconnect): S.CLOSED,
    (S.FAILED, SEND, Disconnect): S.CLOSED,
}

MQTT5_ONLY_SENDS: Final = frozenset({Disconnect, Auth})
"""Packets a server may send only in MQTT 5 (3.1.1 has no server DISCONNECT and no AUTH)."""


def _refusal(state: ConnectionState, direction: Direction, trigger: object) -> LocalProtocolError:
    """MQTT's words for a move the table lacks; an inbound packet is a Protocol Error (0x82),
    which `next_event` re-raises as the peer's."""
    if direction is RECEIVE:
        kind = getattr(trigger, "TYPE", None)  # a packet class's wire name: PUBLISH, ...
        name = kind.name if kind is not None else getattr(trigger, "__name__", trigger)
        return protocol_error(f"{name} is not allowed: {state.value}")
    name = "ConnAck" if trigger is RefusedConnAck else getattr(trigger, "__name__", trigger)
    return LocalProtocolError(f"cannot send {name}: {state.value}")


TABLE: Final = TransitionTable(ConnectionState, TRANSITIONS, _refusal)
"""The connection keeps its state's `TABLE.moves(state, direction)` dicts, so the hot path looks
up a class, not a tuple of enums (whose hashing runs Python code)."""
