"""The connection's transition table (codec/state.py): what it lists moves, everything else is
refused, and it lets through every connection method the session answers itself."""

from __future__ import annotations

import pytest

from herald.core.codec_kit import Direction, LocalProtocolError
from herald.plugins.amqp.codec import METHODS, ConnectionState, MethodFrame, ProtocolHeader
from herald.plugins.amqp.codec.methods import (
    ConnectionBlocked,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTuneOk,
)
from herald.plugins.amqp.codec.state import TABLE
from tests.amqp.helpers import feed, method_frame, server_in

S = ConnectionState
CONNECTION_METHODS = [cls for (class_id, _), cls in METHODS.items() if class_id == 10]
TRIGGERS: list[type] = [ProtocolHeader, *CONNECTION_METHODS]
RUNNING = [S.HANDSHAKE, S.TUNED, S.OPEN]


def test_every_move_not_in_the_table_is_refused() -> None:
    refused = 0
    for state in S:
        for direction in Direction:
            for trigger in TRIGGERS:
                listed = TABLE.transitions.get((state, direction, trigger))
                assert TABLE.allows(state, direction, trigger) is (listed is not None)
                if listed is not None:
                    assert TABLE.next_state(state, direction, trigger) is listed
                    continue
                refused += 1
                with pytest.raises(LocalProtocolError) as info:
                    TABLE.next_state(state, direction, trigger)
                assert info.value.code == (503 if direction is Direction.RECEIVE else None)
    assert refused > len(TABLE.transitions)  # the table is the exception, not the rule


@pytest.mark.parametrize("state", RUNNING)
@pytest.mark.parametrize(
    "method", [cls for cls in CONNECTION_METHODS if cls.SENT_BY_CLIENT], ids=lambda c: c.NAME
)
def test_every_client_connection_method_passes_while_running(
    state: ConnectionState, method: type
) -> None:
    """The session refuses one out of turn (503 with its ids, then close-ok awaited), so the
    codec must not refuse it first."""
    assert TABLE.allows(state, Direction.RECEIVE, method)


def test_methods_out_of_turn_reach_the_session_and_keep_the_state() -> None:
    conn = server_in(S.OPEN)
    events = feed(conn, method_frame(0, ConnectionStartOk()) + method_frame(0, ConnectionTuneOk()))
    assert events == [MethodFrame(0, ConnectionStartOk()), MethodFrame(0, ConnectionTuneOk())]
    assert conn.state is S.OPEN


@pytest.mark.parametrize(
    "state, method",
    [(S.OPEN, ConnectionStart()), (S.HANDSHAKE, ConnectionBlocked()), (S.TUNED, ConnectionStart())],
)
def test_the_codec_refuses_to_send_what_the_table_does_not_list(
    state: ConnectionState, method: ConnectionStart | ConnectionBlocked
) -> None:
    conn = server_in(state)
    with pytest.raises(LocalProtocolError, match="cannot send connection"):
        conn.send(MethodFrame(0, method))
    assert conn.data_to_send() == b""
    assert conn.state is state
