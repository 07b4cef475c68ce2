"""The STOMP hot path's shortcuts give exactly what the general paths give: MESSAGE frames
built from cached pieces against `encode_frame`, cached SEND heads against a fresh parse, the
unescaped `pack` against escaping every header, and the cached destinations and default
declarations against what the headers say."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.core.errors import LocalProtocolError
from herald.core.message import Message
from herald.plugins.stomp.codec import (
    NEED_DATA,
    VERSIONS,
    Frame,
    FrameReader,
    StompLimits,
    encode_frame,
    escape,
    header_line,
)
from herald.plugins.stomp.destinations import (
    Declaration,
    declaration,
    format_destination,
    parse_destination,
)
from herald.plugins.stomp.errors import FrameError
from herald.plugins.stomp.message_codec import SERVER_HEADERS, pack, split, stored_block
from herald.plugins.stomp.message_frames import (
    destination_line,
    message_frame,
    subscription_prefix,
)

# Text with every character the escapes, the writer's refusals and UTF-8 care about.
tricky = st.text(st.sampled_from("ab:\\\n\r\x00é✓ -/%"), max_size=6)
names = st.one_of(tricky, st.sampled_from(sorted(SERVER_HEADERS)))
stored_headers = st.lists(st.tuples(names, tricky), max_size=4)
MESSAGE_ID = "session-Ab_9-x@@12"


def general_message(
    version: str,
    sub_header: str | None,
    exchange: str,
    routing_key: str,
    redelivered: bool,
    ack: bool,
    stored: list[tuple[str, str]],
    body: bytes,
) -> bytes:
    """The MESSAGE frame as `Subscriptions.deliver` builds it without the fast path."""
    headers = []
    if sub_header is not None:
        headers.append(("subscription", sub_header))
    headers.append(("destination", format_destination(exchange, routing_key)))
    headers.append(("message-id", MESSAGE_ID))
    if redelivered:
        headers.append(("redelivered", "true"))
    if ack:
        headers.append(("ack", MESSAGE_ID))
    headers.extend(pair for pair in stored if pair[0] not in SERVER_HEADERS)
    return encode_frame(Frame("MESSAGE", tuple(headers), body), version)


def fast_message(
    version: str,
    sub_header: str | None,
    exchange: str,
    routing_key: str,
    redelivered: bool,
    ack: bool,
    stored: list[tuple[str, str]],
    body: bytes,
) -> bytes | None:
    message = Message("stomp", pack(stored, body), exchange, routing_key, len(body))
    prefix = subscription_prefix(sub_header, version)
    destination = destination_line(exchange, routing_key, version)
    parts = stored_block(message, version)
    if prefix is None or destination is None or parts is None:
        return None
    return message_frame(prefix, destination, MESSAGE_ID, redelivered, ack, *parts)


@given(
    st.sampled_from(VERSIONS),
    st.one_of(st.none(), tricky),
    tricky,
    tricky,
    st.booleans(),
    st.booleans(),
    stored_headers,
    st.binary(max_size=8),
)
def test_message_frames_from_cached_pieces_are_byte_identical(
    version: str,
    sub_header: str | None,
    exchange: str,
    routing_key: str,
    redelivered: bool,
    ack: bool,
    stored: list[tuple[str, str]],
    body: bytes,
) -> None:
    args = (version, sub_header, exchange, routing_key, redelivered, ack, stored, body)
    fast = fast_message(*args)
    if fast is not None:  # the fast path never vouches for what the writer refuses
        assert fast == general_message(*args)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "stored", [[], [("content-type", "text/plain"), ("x-app", "é✓")], [("a", ""), ("b", "c")]]
)
@pytest.mark.parametrize("body", [b"", b"x" * 100, b"\x00bin\x00"])
def test_plain_messages_take_the_fast_path(
    version: str, stored: list[tuple[str, str]], body: bytes
) -> None:
    for args in [
        (version, "1", "", "q", False, True, stored, body),
        (version, None, "amq.topic", "a.b", True, False, stored, body),
        (version, "sub-2", "ex", "", False, version == "1.2", stored, body),
    ]:
        fast = fast_message(*args)
        assert fast is not None
        assert fast == general_message(*args)


@pytest.mark.parametrize(
    "version, stored",
    [
        ("1.2", [("message-id", "mine")]),  # a header the server sets: left out
        ("1.2", [("content-length", "3")]),
        ("1.1", [("cr", "a\rb")]),  # 1.1 writes CR unescaped
        ("1.0", [("colon", "a:b")]),  # 1.0 writes no escapes
        ("1.0", [("lf", "a\nb")]),
    ],
)
def test_stored_headers_the_version_writes_otherwise_take_the_general_path(
    version: str, stored: list[tuple[str, str]]
) -> None:
    message = Message("stomp", pack(stored, b"x"), "", "q", 1)
    assert stored_block(message, version) is None


@pytest.mark.parametrize(
    "message",
    [
        Message("amqp", b"\x00\x00\x00\x00x", "", "q", 1),
        Message("stomp", b"\x00\x00\x00\x00x", "", "q", 1, annotations={"x-death": []}),
        Message("stomp", b"\x00\x00\x00\x05a:\\t\nx", "", "q", 1),  # an undefined escape
        Message("stomp", b"\x00\x00\x00\x04a:\\cx", "", "q", 1),  # no final LF
        Message("stomp", b"\x00\x00\x00\x04a:b:\nx", "", "q", 1),  # not pack's form
        Message("stomp", b"\x00\x00\x00\x09ab", "", "q", 1),  # longer than the record
        Message("stomp", b"\x00\x00", "", "q", 1),
    ],
)
def test_foreign_annotated_or_corrupt_messages_take_the_general_path(message: Message) -> None:
    assert stored_block(message, "1.2") is None


def test_server_header_lines_refuse_what_the_writer_refuses() -> None:
    assert header_line("MESSAGE", "subscription", "a:b\n", "1.2") == b"subscription:a\\cb\\n\n"
    assert subscription_prefix("a\nb", "1.0") is None
    assert subscription_prefix("a\x00b", "1.2") is None
    assert subscription_prefix("\ud800", "1.2") is None  # not encodable as UTF-8
    assert destination_line("", "a\rb", "1.0") is None
    with pytest.raises(LocalProtocolError):
        header_line("MESSAGE", "content-length", "1", "1.2")


# -- the stored form ----------------------------------------------------------------------------


def escaping_pack(headers: list[tuple[str, str]], body: bytes) -> bytes:
    block = "".join(f"{escape(n, '1.2')}:{escape(v, '1.2')}\n" for n, v in headers)
    encoded = block.encode()
    return len(encoded).to_bytes(4, "big") + encoded + body


@given(st.lists(st.tuples(tricky, tricky), max_size=5), st.binary(max_size=4))
def test_pack_skips_escaping_only_when_nothing_needs_it(
    headers: list[tuple[str, str]], body: bytes
) -> None:
    assert pack(headers, body) == escaping_pack(headers, body)
    assert pack(iter(headers), body) == escaping_pack(headers, body)
    if all(name for name, _ in headers):
        assert split(pack(headers, body)) == (tuple(headers), body)


# -- cached SEND heads -------------------------------------------------------------------------


def events(reader: FrameReader, version: str) -> list[Frame]:
    found = []
    while (event := reader.next_event(version)) is not NEED_DATA:
        assert isinstance(event, Frame)
        found.append(event)
    return found


def test_a_repeated_send_head_reads_as_the_first() -> None:
    reader = FrameReader(StompLimits())
    data = b"SEND\ndestination:/queue/a\ncontent-length:2\n\nhi\x00"
    reader.feed(data * 3 + b"SEND\ndestination:/queue/a\n\nbye\x00")
    frames = events(reader, "1.2")
    head = (("destination", "/queue/a"), ("content-length", "2"))
    assert frames == [Frame("SEND", head, b"hi")] * 3 + [
        Frame("SEND", (("destination", "/queue/a"),), b"bye")
    ]


def test_cached_heads_read_the_same_whole_and_byte_by_byte() -> None:
    frames = [
        b"SEND\ndestination:/queue/a\ncontent-length:1\n\nx\x00",
        b"SEND\ndestination:/queue/a\ncontent-length:1\n\ny\x00",
        b"SEND\ndestination:/queue/b\r\n\r\nz\x00",
        b"SEND\ndestination:/queue/a\ncontent-length:1\n\nw\x00",
        b"SEND\ndestination:/queue/a\ncontent-length:1\nx-more:1\n\nv\x00",
        b"SEND\ndestination:/queue/b\r\n\r\nu\x00",
    ]
    data = b"".join(frames) * 2
    whole = FrameReader(StompLimits())
    whole.feed(data)
    expected = events(whole, "1.2")
    assert [f.body for f in expected] == [b"x", b"y", b"z", b"w", b"v", b"u"] * 2
    assert expected[4].get("x-more") == "1"
    dribbled, got = FrameReader(StompLimits()), []
    for i in range(len(data)):
        dribbled.feed(data[i : i + 1])
        got += events(dribbled, "1.2")
    assert got == expected


def test_a_cached_head_is_read_again_under_a_new_version() -> None:
    reader = FrameReader(StompLimits())
    data = b"SEND\ndestination:/queue/a\\cb\n\n\x00"
    reader.feed(data)
    assert events(reader, "1.0") == [Frame("SEND", (("destination", "/queue/a\\cb"),))]
    reader.feed(data)
    assert events(reader, "1.2") == [Frame("SEND", (("destination", "/queue/a:b"),))]


def test_a_cached_head_still_has_its_body_checked() -> None:
    reader = FrameReader(StompLimits())
    reader.feed(b"SEND\ncontent-length:2\n\nhi\x00SEND\ncontent-length:2\n\nhiX\x00")
    assert reader.next_event("1.2") == Frame("SEND", (("content-length", "2"),), b"hi")
    with pytest.raises(LocalProtocolError, match="not followed by a NUL"):
        reader.next_event("1.2")


def test_many_heads_and_long_heads_read_correctly() -> None:
    reader = FrameReader(StompLimits())
    sent = [f"/queue/{i}" + "x" * (i * 60) for i in range(40)]  # up to 2.4 KB heads
    for name in sent * 2:
        reader.feed(b"SEND\ndestination:" + name.encode() + b"\n\n\x00")
    assert [frame.get("destination") for frame in events(reader, "1.2")] == sent * 2


def test_a_frame_is_still_frozen() -> None:
    reader = FrameReader(StompLimits())
    reader.feed(b"ACK\nid:1\n\n\x00")
    (frame,) = events(reader, "1.2")
    assert frame == Frame("ACK", (("id", "1"),)) and hash(frame) == hash(
        Frame("ACK", (("id", "1"),))
    )
    with pytest.raises(AttributeError):
        frame.body = b"x"  # type: ignore[misc]  # the point: a frozen Frame refuses it


# -- destinations and declarations ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["/queue/a", "a", "/topic/x.y", "/exchange/e/k", "/queue/" + "q" * 300]
)
def test_parsed_destinations_are_the_same_each_time(text: str) -> None:
    assert parse_destination(text) == parse_destination(text)
    assert str(parse_destination(text)) == str(parse_destination(text))


@pytest.mark.parametrize("text", ["", "/queue/", "/queue/a/b", "/nowhere/x"])
def test_invalid_destinations_are_refused_each_time(text: str) -> None:
    for _ in range(2):
        with pytest.raises(FrameError):
            parse_destination(text)


@pytest.mark.parametrize(
    "destination, headers, subscribe, expected",
    [
        ("/queue/a", [("content-length", "1")], False, Declaration(True, False, False)),
        ("/queue/a", [("persistent", "true")], False, Declaration(True, False, False)),
        ("/topic/a", [("id", "1"), ("ack", "auto")], True, Declaration(False, True, True)),
        ("/topic/a", [("persistent", "true")], True, Declaration(True, False, False, {}, True)),
        (
            "/queue/a",
            [("x-max-length", "5")],
            False,
            Declaration(True, False, False, {"x-max-length": 5}, True),
        ),
        ("/exchange/e", [("durable", "false")], True, Declaration(False, True, True, {}, True)),
    ],
)
def test_declarations_with_and_without_declaring_headers(
    destination: str, headers: list[tuple[str, str]], subscribe: bool, expected: Declaration
) -> None:
    got = declaration(parse_destination(destination), headers, subscribe=subscribe)
    assert got == expected
