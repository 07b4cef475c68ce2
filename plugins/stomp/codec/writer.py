"""Frames to bytes, per STOMP version.

The writer owns `content-length`: it drops any the frame carries (a MESSAGE built from a SEND
copies the client's, which may be stale) and writes the true length whenever the body is not
empty, so binary bodies that contain NUL arrive whole. Headers are escaped per version except in
CONNECT, STOMP and CONNECTED frames; a header that cannot be written in the frame's encoding
(an LF in a 1.0 value, a colon in an unescaped name, a NUL anywhere) is a LocalProtocolError
rather than a corrupt frame.
"""

from __future__ import annotations

from herald.core.codec_kit import LocalProtocolError
from herald.plugins.stomp.codec.events import UNESCAPED_COMMANDS, Frame


def encode_frame(frame: Frame, version: str) -> bytes:
    """The wire bytes of `frame` for a connection speaking `version`, NUL included."""
    parts = [frame.command]
    append = parts.append
    if version != "1.0" and frame.command not in UNESCAPED_COMMANDS:
        # escaping.escape() inlined: a call per name and value was a third of the encode time.
        cr = version == "1.2"
        for name, value in frame.headers:
            if name == "content-length":
                continue
            if not name:
                raise _empty_name(frame)
            name = name.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
            value = value.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
            if cr:
                name = name.replace("\r", "\\r")
                value = value.replace("\r", "\\r")
            append(f"\n{name}:{value}")
    else:
        for name, value in frame.headers:
            if name == "content-length":
                continue
            if not name:
                raise _empty_name(frame)
            if ":" in name or "\n" in name or "\r" in name or "\n" in value or "\r" in value:
                raise LocalProtocolError(
                    f"header {name!r}: {value!r} cannot be sent unescaped in a {frame.command} "
                    f"frame (STOMP {version}): no colon in names, no CR or LF anywhere"
                )
            append(f"\n{name}:{value}")
    body = frame.body
    if body:
        append(f"\ncontent-length:{len(body)}")
    append("\n\n")
    head = "".join(parts)
    if "\x00" in head:
        raise LocalProtocolError(f"a header of the {frame.command} frame contains a NUL")
    try:
        encoded = head.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(
            f"the {frame.command} frame's headers are not encodable as UTF-8: {exc.reason}"
        ) from None
    return b"".join((encoded, body, b"\x00"))


def header_line(command: str, name: str, value: str, version: str) -> bytes:
    """One header as `encode_frame` writes it in a `command` frame of `version`, as the bytes
    `name:value` and an LF: a piece for callers that cache the headers their frames repeat.

    Raises LocalProtocolError when `encode_frame` would refuse the header.
    """
    if name == "content-length":
        raise LocalProtocolError("content-length is the writer's own header")
    encoded = encode_frame(Frame(command, ((name, value),)), version)
    return encoded[len(command) + 1 : -2]


def _empty_name(frame: Frame) -> LocalProtocolError:
    return LocalProtocolError(f"a header of the {frame.command} frame has an empty name")
