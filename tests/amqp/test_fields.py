"""Field tables: every value type, the Python types they map to, and malformed input."""

from __future__ import annotations

import datetime
import decimal
import math
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.core.errors import LocalProtocolError
from herald.plugins.amqp.codec import Timestamp, decode_table, encode_table


def table_of(entries: bytes) -> bytes:
    return struct.pack(">I", len(entries)) + entries


def entry(name: str, tag: str, value: bytes) -> bytes:
    key = name.encode()
    return bytes([len(key)]) + key + tag.encode() + value


def decode(data: bytes) -> dict[str, Any]:
    table, end = decode_table(data, 0, len(data))
    assert end == len(data)
    return table


@pytest.mark.parametrize(
    "tag, raw, expected",
    [
        ("t", b"\x01", True),
        ("t", b"\x00", False),
        ("b", b"\xff", -1),
        ("B", b"\xff", 255),
        ("s", b"\xff\xfe", -2),
        ("U", b"\xff\xfe", -2),
        ("u", b"\xff\xfe", 65534),
        ("I", b"\xff\xff\xff\xfd", -3),
        ("i", b"\xff\xff\xff\xfd", 4294967293),
        ("l", b"\xff" * 8, -1),
        ("L", b"\xff" * 8, -1),  # signed too, as RabbitMQ reads it
        ("f", struct.pack(">f", 1.5), 1.5),
        ("d", struct.pack(">d", -2.25), -2.25),
        ("D", b"\x02\x00\x00\x04\xd2", decimal.Decimal("12.34")),
        ("D", b"\x01\xff\xff\xff\xf6", decimal.Decimal("-1.0")),
        ("S", b"\x00\x00\x00\x03h\xc3\xa9", "hé"),
        ("S", b"\x00\x00\x00\x02\xff\xfe", b"\xff\xfe"),  # not UTF-8: kept as bytes
        ("x", b"\x00\x00\x00\x02\x00\x01", b"\x00\x01"),
        ("T", b"\x00\x00\x00\x00\x65\x53\xf1\x00", Timestamp(1700000000)),
        ("V", b"", None),
        ("A", b"\x00\x00\x00\x07I\x00\x00\x00\x01V\x56", [1, None, None]),
        ("F", table_of(entry("k", "t", b"\x01")), {"k": True}),
    ],
)
def test_each_type_decodes(tag: str, raw: bytes, expected: Any) -> None:
    value = decode(table_of(entry("key", tag, raw)))["key"]
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    "value, wire",
    [
        (True, b"t\x01"),
        (7, b"I\x00\x00\x00\x07"),
        (-(2**31), b"I\x80\x00\x00\x00"),
        (2**31, b"l\x00\x00\x00\x00\x80\x00\x00\x00"),
        (0.5, b"d" + struct.pack(">d", 0.5)),
        ("é", b"S\x00\x00\x00\x02\xc3\xa9"),
        (b"\x00", b"x\x00\x00\x00\x01\x00"),
        (bytearray(b"\x01"), b"x\x00\x00\x00\x01\x01"),
        (None, b"V"),
        (Timestamp(5), b"T\x00\x00\x00\x00\x00\x00\x00\x05"),
        (
            datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC),
            b"T\x00\x00\x00\x00\x65\x53\xf1\x00",
        ),
        (decimal.Decimal("-1.50"), b"D\x02\xff\xff\xff\x6a"),
        (decimal.Decimal("1E+3"), b"D\x00\x00\x00\x03\xe8"),
        ([1, "a"], b"A\x00\x00\x00\x0bI\x00\x00\x00\x01S\x00\x00\x00\x01a"),
        ((True,), b"A\x00\x00\x00\x02t\x01"),
        ({"a": None}, b"F\x00\x00\x00\x03\x01aV"),
    ],
)
def test_python_values_encode_to_their_tags(value: Any, wire: bytes) -> None:
    assert encode_table({"k": value}) == table_of(b"\x01k" + wire)


def test_empty_tables() -> None:
    assert encode_table({}) == encode_table(None) == b"\x00\x00\x00\x00"
    assert decode(b"\x00\x00\x00\x00") == {}


@pytest.mark.parametrize(
    "value",
    [
        2**63,
        Timestamp(-1),
        decimal.Decimal("NaN"),
        decimal.Decimal("1E-256"),
        decimal.Decimal(2**31),
        object(),
        {1: "non-str key"},
        {"k" * 256: "key too long"},
        "\ud800",  # a lone surrogate can't be UTF-8
    ],
)
def test_values_the_wire_cannot_carry_are_refused(value: Any) -> None:
    with pytest.raises(LocalProtocolError):
        encode_table({"k": value})


def nested(depth: int) -> bytes:
    inner = b""
    for _ in range(depth):
        inner = table_of(entry("n", "F", table_of(inner) if inner else b"\x00\x00\x00\x00"))[4:]
    return table_of(inner)


@pytest.mark.parametrize(
    "data, code",
    [
        (b"\x00\x00\x00\x09", 501),  # size beyond the buffer
        (b"\x00\x00", 501),  # size itself truncated
        (table_of(entry("k", "?", b"")), 502),  # unknown type
        (table_of(entry("k", "I", b"\x00\x00")), 501),  # value overruns the table
        (table_of(entry("k", "S", b"\x00\x00\x00\x09ab")), 501),  # string overruns
        (table_of(b"\x05ab"), 501),  # name overruns
        (table_of(b"\x01\xffV"), 501),  # name is not UTF-8
        (table_of(entry("k", "F", b"\x00\x00\x00\x09")), 501),  # nested table overruns
        (table_of(entry("k", "A", b"\x00\x00\x00\x02I\x00")), 501),  # array item overruns
        (nested(100), 501),  # nested deeper than MAX_DEPTH
    ],
)
def test_malformed_tables_are_frame_or_syntax_errors(data: bytes, code: int) -> None:
    with pytest.raises(LocalProtocolError) as info:
        decode_table(data, 0, len(data))
    assert info.value.code == code


def test_a_table_must_end_by_the_given_end() -> None:
    data = table_of(entry("k", "V", b""))
    with pytest.raises(LocalProtocolError) as info:
        decode_table(data + b"more", 0, len(data) - 1)
    assert info.value.code == 501


# -- properties ----------------------------------------------------------------------------

keys = st.text(max_size=20)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(),
    st.binary(),
    st.builds(Timestamp, st.integers(0, 2**64 - 1)),
    st.builds(
        lambda unscaled, scale: decimal.Decimal(unscaled).scaleb(-scale),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(0, 255),
    ),
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=20,
)


def typed(value: Any) -> Any:
    """`value` with every leaf tagged by its type, so True != 1 and str != bytes."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    if isinstance(value, float) and math.copysign(1, value) < 0 and value == 0:
        return (float, "-0.0")
    return (type(value), value)


@given(st.dictionaries(keys, values, max_size=6))
def test_tables_round_trip(table: dict[str, Any]) -> None:
    wire = encode_table(table)
    assert typed(decode(wire)) == typed(table)
    assert encode_table(decode(wire)) == wire


@given(st.binary(max_size=200))
def test_garbage_tables_raise_only_protocol_errors(data: bytes) -> None:
    try:
        decode_table(data, 0, len(data))
    except LocalProtocolError as exc:
        assert exc.code in (501, 502)
