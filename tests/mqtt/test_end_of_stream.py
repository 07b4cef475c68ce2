"""The end of the stream through the codec (`receive_data(b"")`, h11's convention), and the
state table's refusals: both in the codec kit's terms (core/codec_kit.py), MQTT's wire codes."""

from __future__ import annotations

import itertools

import pytest

from herald.core.codec_kit import (
    CodecConnection,
    Direction,
    LocalProtocolError,
    RemoteProtocolError,
)
from herald.plugins.mqtt.codec import (
    NEED_DATA,
    PACKET_CLASSES,
    ConnAck,
    ConnectionClosed,
    ConnectionState,
    Disconnect,
    MQTTConnection,
    Publish,
    ReasonCode,
    encode_packet,
)
from herald.plugins.mqtt.codec.state import TABLE, TRANSITIONS, PeerError, RefusedConnAck
from tests.mqtt.helpers import connect_bytes, connected, drain

S = ConnectionState
PUBLISH = encode_packet(Publish("a/b", b"hello", 1, packet_id=7), 4)  # 30 0e 0003 612f62 0007 ...
CUTS = {
    "in the fixed header": PUBLISH[:1],
    "in the remaining length": b"\x30\x80",  # a continuation bit, then nothing
    "in the body": PUBLISH[:-1],
}


def test_the_codec_is_a_codec_kit_connection() -> None:
    conn: CodecConnection = MQTTConnection()  # checked by mypy: the kit's one API
    assert conn.error_reply() is None


def end(conn: MQTTConnection, data: bytes = b"") -> object:
    """Feed `data` and the end of the stream; the first thing `next_event` gives that is not
    a packet."""
    conn.receive_data(data)
    conn.receive_data(b"")
    while True:
        event = conn.next_event()
        if event is NEED_DATA or type(event) is ConnectionClosed:
            return event


@pytest.mark.parametrize("version", [3, 4, 5])
def test_the_end_between_packets_is_a_clean_close(version: int) -> None:
    conn = connected(version)
    assert end(conn, encode_packet(Publish("a/b", b"x"), version)) == ConnectionClosed()
    assert conn.next_event() == ConnectionClosed()  # and stays so
    assert conn.state is S.CONNECTED and conn.error_reply() is None


@pytest.mark.parametrize(
    "before", [b"", connect_bytes(5)], ids=["before CONNECT", "before CONNACK"]
)
def test_the_end_before_the_handshake_is_a_clean_close_too(before: bytes) -> None:
    conn = MQTTConnection()
    assert end(conn, before) == ConnectionClosed()
    assert conn.error_reply() is None


@pytest.mark.parametrize("cut", CUTS.values(), ids=CUTS.keys())
def test_the_end_inside_a_packet_is_malformed_and_mqtt5_answers_with_disconnect_0x81(
    cut: bytes,
) -> None:
    conn = connected(5)
    with pytest.raises(
        RemoteProtocolError, match=rf"middle of a frame \({len(cut)} bytes\)"
    ) as info:
        end(conn, cut)
    assert info.value.code == ReasonCode.MALFORMED_PACKET
    assert conn.state is S.FAILED
    reply = conn.error_reply()
    assert reply == Disconnect(ReasonCode.MALFORMED_PACKET)
    conn.send(reply)
    assert conn.data_to_send() == b"\xe0\x01\x81"
    with pytest.raises(RemoteProtocolError, match="already failed"):
        conn.next_event()


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("cut", CUTS.values(), ids=CUTS.keys())
def test_the_end_inside_a_packet_closes_mqtt311_without_a_word(version: int, cut: bytes) -> None:
    conn = connected(version)
    with pytest.raises(RemoteProtocolError) as info:
        end(conn, cut)
    assert info.value.code == ReasonCode.MALFORMED_PACKET
    assert conn.error_reply() is None


@pytest.mark.parametrize("version", [3, 4, 5])
def test_the_end_inside_the_connect_gets_no_reply(version: int) -> None:
    """The CONNECT is not whole, so its protocol level is unknown: nothing to answer in."""
    conn = MQTTConnection()
    with pytest.raises(RemoteProtocolError) as info:
        end(conn, connect_bytes(version)[:-1])
    assert info.value.code == ReasonCode.MALFORMED_PACKET
    assert conn.state is S.CONNECT_FAILED and conn.error_reply() is None


def test_the_end_inside_a_packet_before_connack_refuses_an_mqtt5_client() -> None:
    """A pipelined packet cut short while the server still owes the CONNACK."""
    conn = MQTTConnection()
    with pytest.raises(RemoteProtocolError):
        end(conn, connect_bytes(5) + PUBLISH[:-1])
    reply = conn.error_reply()
    assert reply == ConnAck(ReasonCode.MALFORMED_PACKET)
    conn.send(reply)
    assert conn.data_to_send() == bytes.fromhex("2003008100")
    assert conn.state is S.CLOSED


def test_data_after_the_end_is_the_callers_error() -> None:
    conn = connected(4)
    conn.receive_data(b"")
    conn.receive_data(b"")  # the end may be said twice
    with pytest.raises(LocalProtocolError, match="after the end of the stream"):
        conn.receive_data(b"\xc0\x00")
    assert conn.next_event() == ConnectionClosed()


def test_packets_before_the_end_come_out_first() -> None:
    conn = connected(4)
    conn.receive_data(PUBLISH + PUBLISH[:3])
    conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match=r"\(3 bytes\)"):
        drain(conn)


# -- the state table ------------------------------------------------------------------------

TRIGGERS = [*PACKET_CLASSES.values(), RefusedConnAck, PeerError]


@pytest.mark.parametrize(
    ("state", "direction"), list(itertools.product(S, Direction)), ids=lambda x: x.name
)
def test_the_table_refuses_exactly_what_it_does_not_list(
    state: ConnectionState, direction: Direction
) -> None:
    for trigger in TRIGGERS:
        listed = (state, direction, trigger) in TRANSITIONS
        assert TABLE.allows(state, direction, trigger) is listed
        if listed:
            assert (
                TABLE.next_state(state, direction, trigger)
                is TRANSITIONS[state, direction, trigger]
            )
        else:
            with pytest.raises(LocalProtocolError):
                TABLE.next_state(state, direction, trigger)


def test_a_refused_inbound_packet_is_a_protocol_error_0x82() -> None:
    with pytest.raises(LocalProtocolError) as info:
        TABLE.next_state(S.AWAIT_CONNECT, Direction.RECEIVE, Publish)
    assert (info.value.text, info.value.code) == (
        "PUBLISH is not allowed: waiting for CONNECT",
        ReasonCode.PROTOCOL_ERROR,
    )


def test_a_refused_outbound_packet_is_our_error_without_a_code() -> None:
    with pytest.raises(LocalProtocolError) as info:
        TABLE.next_state(S.CONNECTED, Direction.SEND, RefusedConnAck)
    assert (info.value.text, info.value.code) == (
        "cannot send ConnAck: CONNACK accepted the client",
        None,
    )


def test_the_connection_refuses_through_the_table_on_the_wire() -> None:
    conn = MQTTConnection()
    conn.receive_data(PUBLISH)
    with pytest.raises(RemoteProtocolError) as info:
        conn.next_event()
    assert (info.value.text, info.value.code) == (
        "PUBLISH is not allowed: waiting for CONNECT",
        ReasonCode.PROTOCOL_ERROR,
    )
    assert conn.state is S.CONNECT_FAILED and conn.error_reply() is None
    with pytest.raises(LocalProtocolError, match="cannot send Publish: the client broke"):
        conn.send(Publish("a"))
