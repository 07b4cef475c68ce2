"""The codec kit's pieces mean one thing in every codec (core/codec_kit.py)."""

from __future__ import annotations

import enum

import pytest

from herald.core.codec_kit import (
    NEED_DATA,
    ConnectionClosed,
    Direction,
    Event,
    LocalProtocolError,
    TransitionTable,
    end_of_stream,
)


class Light(enum.Enum):
    OFF = "off"
    ON = "on"


class Press(Event):
    __slots__ = ()


class Pull(Event):
    __slots__ = ()


TABLE = TransitionTable(
    Light,
    {
        (Light.OFF, Direction.RECEIVE, Press): Light.ON,
        (Light.ON, Direction.RECEIVE, Press): Light.ON,
        (Light.ON, Direction.SEND, Pull): Light.OFF,
    },
)


def test_need_data_is_a_sentinel_named_like_h11s() -> None:
    assert repr(NEED_DATA) == "NEED_DATA"
    assert NEED_DATA is not None


def test_a_listed_move_gives_the_next_state() -> None:
    assert TABLE.next_state(Light.OFF, Direction.RECEIVE, Press) is Light.ON
    assert TABLE.next_state(Light.ON, Direction.SEND, Pull) is Light.OFF
    assert TABLE.moves(Light.ON, Direction.RECEIVE) == {Press: Light.ON}
    assert TABLE.allows(Light.ON, Direction.SEND, Pull)


def test_a_missing_pair_is_refused_in_either_direction() -> None:
    with pytest.raises(LocalProtocolError, match="Pull cannot be sent in state OFF"):
        TABLE.next_state(Light.OFF, Direction.SEND, Pull)
    with pytest.raises(LocalProtocolError, match="Pull cannot be received in state ON"):
        TABLE.next_state(Light.ON, Direction.RECEIVE, Pull)
    assert not TABLE.allows(Light.OFF, Direction.SEND, Pull)
    assert TABLE.moves(Light.OFF, Direction.SEND) == {}


def test_a_codec_words_its_own_refusal_with_its_reply_code() -> None:
    def refuse(state: Light, direction: Direction, trigger: object) -> LocalProtocolError:
        return LocalProtocolError(
            f"no {getattr(trigger, '__name__', trigger)} while {state.value}", 0x82
        )

    table = TransitionTable(Light, TABLE.transitions, refuse)
    with pytest.raises(LocalProtocolError) as raised:
        table.next_state(Light.OFF, Direction.SEND, Pull)
    assert (raised.value.text, raised.value.code) == ("no Pull while off", 0x82)


def test_end_of_stream_between_frames_is_a_clean_close() -> None:
    assert end_of_stream(0) == ConnectionClosed()
    assert isinstance(end_of_stream(0), Event)


def test_end_of_stream_inside_a_frame_is_a_protocol_error_with_the_codecs_code() -> None:
    with pytest.raises(LocalProtocolError, match=r"middle of a frame \(3 bytes\)") as raised:
        end_of_stream(3, 501)
    assert raised.value.code == 501
