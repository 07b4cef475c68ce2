"""Builders and drivers for the STOMP codec tests (h11's `tr()` and a frame factory)."""

from __future__ import annotations

from collections.abc import Iterable

from herald.plugins.stomp.codec import (
    CLIENT_COMMANDS,
    SERVER_COMMANDS,
    ConnectionClosed,
    Event,
    Frame,
    FrameReader,
    StompConnection,
    StompLimits,
)

ALL_COMMANDS = CLIENT_COMMANDS | SERVER_COMMANDS
TRAILING = b"SEND\ndestination:/queue/next\n"
"""The start of a next frame: decoding must leave it buffered and report NEED_DATA."""


def frame(command: str, *headers: tuple[str, str], body: bytes = b"") -> Frame:
    """A frame with the content-length header the writer adds (and the reader reports)."""
    if body:
        headers = (*headers, ("content-length", str(len(body))))
    return Frame(command, headers, body)


def read_all(
    chunks: Iterable[bytes], version: str, limits: StompLimits | None = None
) -> tuple[list[Event], FrameReader]:
    """Every event a reader accepting all commands yields from `chunks`, fed one by one."""
    reader = FrameReader(limits or StompLimits(), ALL_COMMANDS, peer="peer")
    events: list[Event] = []
    for chunk in chunks:
        reader.feed(chunk)
        while isinstance(event := reader.next_event(version), Event):  # until NEED_DATA
            events.append(event)
    return events, reader


def tr(data: bytes, version: str, expected: list[Event]) -> None:
    """Decode `data` whole, byte by byte, and followed by a partial frame: same events."""
    assert read_all([data], version)[0] == expected
    assert read_all([data[i : i + 1] for i in range(len(data))], version)[0] == expected
    events, reader = read_all([data + TRAILING], version)
    assert events == expected
    assert reader.buffered == len(TRAILING)


def opened(version: str = "1.2", limits: StompLimits | None = None) -> StompConnection:
    """A server connection past CONNECT / CONNECTED, speaking `version`."""
    conn = StompConnection(limits=limits or StompLimits())
    conn.receive_data(b"CONNECT\naccept-version:" + version.encode() + b"\nhost:/\n\n\x00")
    event = conn.next_event()
    assert isinstance(event, Frame)
    assert event.command == "CONNECT"
    conn.version = version
    conn.send(Frame("CONNECTED", (("version", version),)))
    conn.data_to_send()
    return conn


def drain(conn: StompConnection) -> list[Event]:
    """Every event the connection can produce from what it has buffered, up to NEED_DATA or
    ConnectionClosed (which `next_event` then returns again on every call)."""
    events: list[Event] = []
    while isinstance(event := conn.next_event(), Event):
        events.append(event)
        if type(event) is ConnectionClosed:
            break
    return events
