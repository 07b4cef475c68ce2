"""MQTT 5 properties: the table against the spec (and paho's copy of it), placement and
repetition rules, value bounds, hypothesis round trips, and byte equality with paho's
`Properties.pack` / `unpack`."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from herald.core.errors import LocalProtocolError
from herald.plugins.mqtt.codec import PacketType, Properties, ReasonCode
from herald.plugins.mqtt.codec.properties import (
    BY_ID,
    NO_PROPERTIES,
    SPECS,
    WILL,
    PropertySpec,
    PropertyType,
    decode_properties,
    encode_properties,
)

CONTEXTS = [*(t for t in PacketType if t not in (PacketType.PINGREQ, PacketType.PINGRESP)), WILL]
PAHO_NAMES = {ident: name.replace(" ", "") for name, ident in PahoProperties(1).names.items()}


def paho_type(context: int) -> int:
    return PacketTypes.WILLMESSAGE if context == WILL else context


def decode(data: bytes, context: int) -> Properties:
    props, end = decode_properties(data, 0, len(data), context)
    assert end == len(data)
    return props


def decode_error(data: bytes, context: int) -> int | None:
    with pytest.raises(LocalProtocolError) as info:
        decode_properties(data, 0, len(data), context)
    return info.value.code


# -- the table ---------------------------------------------------------------------------------


def test_every_identifier_of_mqtt5() -> None:
    assert sorted(BY_ID) == sorted(PAHO_NAMES)
    assert len(SPECS) == 27
    assert {spec.name for spec in SPECS} == {f.name for f in Properties.__attrs_attrs__}


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_table_agrees_with_paho(spec: PropertySpec) -> None:
    paho_type_id, paho_packets = PahoProperties(1).properties[spec.identifier]
    assert {paho_type(p) for p in spec.packets} == set(paho_packets)
    assert spec.type.value.split(" (")[0] == PahoProperties(1).types[paho_type_id]
    assert spec.repeatable == PahoProperties(1).allowsMultiple(PAHO_NAMES[spec.identifier])


# -- placement, repetition, bounds -----------------------------------------------------------

SAMPLE_VALUE = {
    PropertyType.BYTE: b"\x01",
    PropertyType.BOOL: b"\x01",
    PropertyType.U16: b"\x00\x01",
    PropertyType.U32: b"\x00\x00\x00\x01",
    PropertyType.VARINT: b"\x01",
    PropertyType.BINARY: b"\x00\x01x",
    PropertyType.STRING: b"\x00\x01x",
    PropertyType.PAIR: b"\x00\x01k\x00\x01v",
}


def block(*entries: bytes) -> bytes:
    body = b"".join(entries)
    assert len(body) < 128
    return bytes((len(body),)) + body


def entry(spec: PropertySpec) -> bytes:
    return bytes((spec.identifier,)) + SAMPLE_VALUE[spec.type]


PLACEMENTS = [(spec, ctx) for spec in SPECS for ctx in CONTEXTS]


@pytest.mark.parametrize(
    ("spec", "context"), PLACEMENTS, ids=[f"{s.name}-{c}" for s, c in PLACEMENTS]
)
def test_placement(spec: PropertySpec, context: int) -> None:
    """MQTT 5.0 section 2.2.2.2: an identifier not valid for its packet type is malformed."""
    data = block(entry(spec))
    if context in spec.packets:
        assert decode(data, context).present() != {}
    else:
        assert decode_error(data, context) == ReasonCode.MALFORMED_PACKET
        value = Properties(
            **{spec.name: decode(data, next(iter(spec.packets))).present()[spec.name]}
        )
        with pytest.raises(LocalProtocolError, match="not allowed"):
            encode_properties(value, context)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_repetition(spec: PropertySpec) -> None:
    context = next(iter(spec.packets))
    data = block(entry(spec), entry(spec))
    if spec.repeatable:
        value = decode(data, context).present()[spec.name]
        assert len(value) == 2
    else:
        assert decode_error(data, context) == ReasonCode.PROTOCOL_ERROR


@pytest.mark.parametrize(
    ("ident", "value"),
    [
        (0x01, b"\x02"),  # payload format indicator
        (0x17, b"\x02"),  # request problem information
        (0x19, b"\x02"),  # request response information
        (0x24, b"\x02"),  # maximum QoS
        (0x25, b"\x02"),  # retain available
        (0x28, b"\xff"),
        (0x29, b"\x02"),
        (0x2A, b"\x02"),
        (0x21, b"\x00\x00"),  # receive maximum 0
        (0x27, b"\x00\x00\x00\x00"),  # maximum packet size 0
        (0x0B, b"\x00"),  # subscription identifier 0
    ],
)
def test_values_out_of_range_are_protocol_errors(ident: int, value: bytes) -> None:
    spec = BY_ID[ident]
    data = block(bytes((ident,)) + value)
    assert decode_error(data, next(iter(spec.packets))) == ReasonCode.PROTOCOL_ERROR


def test_empty_block_is_the_shared_empty_value() -> None:
    assert decode(b"\x00", PacketType.PUBLISH) is NO_PROPERTIES
    assert encode_properties(NO_PROPERTIES, PacketType.PUBLISH) == b"\x00"
    assert encode_properties(Properties(), PacketType.PUBLISH) == b"\x00"


def test_user_properties_keep_order_and_repeats() -> None:
    pairs = [("b", "1"), ("a", "2"), ("b", "3")]
    props = Properties(user_properties=pairs)
    assert props.user_properties == (("b", "1"), ("a", "2"), ("b", "3"))
    assert decode(encode_properties(props, PacketType.PUBLISH), PacketType.PUBLISH) == props


def test_repr_shows_only_what_is_set() -> None:
    assert repr(Properties(topic_alias=3)) == "Properties(topic_alias=3)"


@pytest.mark.parametrize(
    "props",
    [
        Properties(topic_alias=70000),
        Properties(message_expiry_interval=-1),
        Properties(content_type="\ud800"),
        Properties(correlation_data=bytes(70000)),
        Properties(subscription_identifiers=[1 << 28]),
    ],
)
def test_values_the_wire_cannot_hold_are_refused_on_encode(props: Properties) -> None:
    with pytest.raises(LocalProtocolError):
        encode_properties(props, PacketType.PUBLISH)


# -- round trips and paho ----------------------------------------------------------------------

TEXT = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00\ufeff"), max_size=12
)


def value_strategy(spec: PropertySpec) -> st.SearchStrategy[Any]:
    kind = spec.type
    if kind is PropertyType.BOOL:
        return st.booleans()
    if kind is PropertyType.BYTE:
        return st.integers(0, 1)
    if kind is PropertyType.U16:
        return st.integers(1 if spec.name == "topic_alias" else spec.minimum, 0xFFFF)
    if kind is PropertyType.U32:
        upper = 268_435_455 if spec.name == "maximum_packet_size" else 0xFFFFFFFF  # paho's limit
        return st.integers(spec.minimum, upper)
    if kind is PropertyType.VARINT:
        return st.lists(st.integers(1, 268_435_455), min_size=1, max_size=3)
    if kind is PropertyType.BINARY:
        return st.binary(max_size=12)
    if kind is PropertyType.STRING:
        return TEXT
    return st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=3)


@st.composite
def properties_for(draw: st.DrawFn) -> tuple[int, Properties]:
    context = draw(st.sampled_from(CONTEXTS))
    allowed = [spec for spec in SPECS if context in spec.packets]
    chosen = draw(st.lists(st.sampled_from(allowed), unique=True))
    return context, Properties(**{spec.name: draw(value_strategy(spec)) for spec in chosen})


def to_paho(props: Properties, context: int) -> PahoProperties:
    paho = PahoProperties(paho_type(context))
    for name, value in props.present().items():
        spec = next(s for s in SPECS if s.name == name)
        plain = [*value] if spec.repeatable else int(value) if type(value) is bool else value
        setattr(paho, PAHO_NAMES[spec.identifier], plain)
    return paho


@given(properties_for())
def test_round_trip(case: tuple[int, Properties]) -> None:
    context, props = case
    assert decode(encode_properties(props, context), context) == props


@given(properties_for())
def test_encoding_equals_paho_pack(case: tuple[int, Properties]) -> None:
    context, props = case
    assert encode_properties(props, context) == bytes(to_paho(props, context).pack())


@given(properties_for())
def test_paho_unpacks_what_we_encode(case: tuple[int, Properties]) -> None:
    context, props = case
    data = encode_properties(props, context)
    paho, length = PahoProperties(paho_type(context)).unpack(data)
    assert length == len(data)
    got = {name: getattr(paho, name) for name in PAHO_NAMES.values() if hasattr(paho, name)}
    expected = {}
    for name, value in props.present().items():
        spec = next(s for s in SPECS if s.name == name)
        expected[PAHO_NAMES[spec.identifier]] = (
            [*value] if spec.repeatable else int(value) if type(value) is bool else value
        )
    assert got == expected


@given(properties_for())
def test_we_decode_what_paho_packs(case: tuple[int, Properties]) -> None:
    context, props = case
    assert decode(bytes(to_paho(props, context).pack()), context) == props
