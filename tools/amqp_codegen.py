"""Generate plugins/amqp/codec/methods.py from the hand-typed table in tools/amqp_spec.py.

    python tools/amqp_codegen.py           # rewrite methods.py
    python tools/amqp_codegen.py --check   # exit 1 if methods.py differs from what it would write

Like pika's utils/codegen.py and lsprotocol's generator: the output is frozen attrs classes
with straight-line encode/decode code. Consecutive fixed-size fields share one precompiled
`struct.Struct` (a string's length octet rides along with the fields before it), consecutive
bits are packed into octets low bit first (spec 4.2.5.2), and methods are found by
`(class_id << 16) | method_id` in one dict. The output is plain, lint-clean Python; it opts out
of `ruff format` so that the check does not depend on the formatter's version.
"""

from __future__ import annotations

import argparse
import difflib
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:  # mypy checks tools/amqp_spec.py under the name the tests import it by
    from tools.amqp_spec import (
        BASIC_PROPERTIES,
        BOTH,
        CLASSES,
        CLIENT,
        SERVER,
        AMQPClass,
        Field,
        Method,
    )
else:  # run as a script, whose folder is on sys.path
    from amqp_spec import BASIC_PROPERTIES, BOTH, CLASSES, CLIENT, SERVER, AMQPClass, Field, Method

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "plugins" / "amqp" / "codec" / "methods.py"

FIXED = {"octet": "B", "short": "H", "long": "I", "longlong": "Q", "timestamp": "Q"}
PY_TYPES = {
    "bit": "bool",
    "octet": "int",
    "short": "int",
    "long": "int",
    "longlong": "int",
    "timestamp": "int",
    "shortstr": "str",
    "longstr": "bytes",
    "table": "FieldTable",
}
ZERO = {"bit": False, "shortstr": "", "longstr": b""}

HEADER = '''\
"""GENERATED FILE, DO NOT EDIT: python tools/amqp_codegen.py

AMQP 0-9-1 methods (with RabbitMQ's extensions) and the basic properties, from the table in
tools/amqp_spec.py. Each method is a frozen attrs class with CLASS_ID, METHOD_ID, NAME,
SYNCHRONOUS, HAS_CONTENT, SENT_BY_CLIENT and SENT_BY_SERVER, and `encode()` returning the
method frame payload. `METHODS[(class_id, method_id)]` is the class; `DECODERS[(class_id << 16)
| method_id](buf, off, end)` decodes the arguments found between `off` and `end`.

Decoders raise LocalProtocolError 501 when the arguments don't fill their frame exactly, and let
struct.error / IndexError / UnicodeDecodeError escape on truncated input: callers (the
connection, `decode_method`) turn those into FRAME_ERROR 501 too. `encode()` raises
LocalProtocolError for a string longer than its domain allows and struct.error for an integer
out of range.
"""

# fmt: off
# ruff: noqa: E501
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import ClassVar

import attrs

from herald.core.errors import LocalProtocolError
from herald.plugins.amqp.codec.constants import ReplyCode
from herald.plugins.amqp.codec.fields import FieldTable, decode_table, encode_table

Decoder = Callable[[bytes | bytearray, int, int], "Method"]


def _malformed(name: str) -> LocalProtocolError:
    return LocalProtocolError(f"cannot decode {name} arguments", ReplyCode.FRAME_ERROR)


def _too_long(name: str, field: str) -> LocalProtocolError:
    return LocalProtocolError(f"{name}: {field} is longer than 255 bytes")


class Method:
    """Base of the generated method classes."""

    __slots__ = ()
    CLASS_ID: ClassVar[int]
    METHOD_ID: ClassVar[int]
    NAME: ClassVar[str]
    SYNCHRONOUS: ClassVar[bool]
    HAS_CONTENT: ClassVar[bool]
    SENT_BY_CLIENT: ClassVar[bool]
    SENT_BY_SERVER: ClassVar[bool]

    def encode(self) -> bytes:
        """The method frame payload: class id, method id, arguments."""
        raise NotImplementedError
'''


def camel(*parts: str) -> str:
    return "".join(p.capitalize() for part in parts for p in part.split("-"))


def snake(*parts: str) -> str:
    return "_".join(part.replace("-", "_") for part in parts)


class Structs:
    """The precompiled struct formats the generated code uses, named by format."""

    def __init__(self) -> None:
        self.formats: set[str] = set()

    def name(self, fmt: str) -> str:
        self.formats.add(fmt)
        return f"_S_{fmt}"

    def render(self) -> list[str]:
        return [f'_S_{fmt} = struct.Struct(">{fmt}")' for fmt in sorted(self.formats)]


def default_repr(field: Field) -> str:
    if field.domain == "table":
        return "attrs.field(factory=dict)"
    value = field.default if field.default is not attrs.NOTHING else ZERO.get(field.domain, 0)
    text = repr(value)
    if isinstance(value, str | bytes) and '"' not in text:  # ruff's quote style
        text = text.replace("'", '"')
    return text


def group_bits(fields: tuple[Field, ...]) -> list[Field | list[Field]]:
    """Consecutive bits become lists of at most 8, each packed into one octet."""
    out: list[Field | list[Field]] = []
    for field in fields:
        if field.domain == "bit":
            last = out[-1] if out else None
            if isinstance(last, list) and len(last) < 8:
                last.append(field)
            else:
                out.append([field])
        else:
            out.append(field)
    return out


def gen_decoder(cls: AMQPClass, method: Method, structs: Structs) -> list[str]:
    name = f"{cls.name}.{method.name}"
    fn = f"_decode_{snake(cls.name, method.name)}"
    cls_name = camel(cls.name, method.name)
    lines = [f"def {fn}(buf: bytes | bytearray, off: int, end: int) -> {cls_name}:"]
    fmt: list[str] = []
    targets: list[str] = []
    values: list[str] = []

    def flush() -> None:
        if not fmt:
            return
        if fmt == ["B"]:
            lines.append(f"    {targets[0]} = buf[off]")
            lines.append("    off += 1")
        else:
            joined = "".join(fmt)
            size = struct.calcsize(">" + joined)
            lhs = ", ".join(targets) + ("," if len(targets) == 1 else "")
            lines.append(f"    {lhs} = {structs.name(joined)}.unpack_from(buf, off)")
            lines.append(f"    off += {size}")
        fmt.clear()
        targets.clear()

    for index, item in enumerate(group_bits(method.fields)):
        if isinstance(item, list):
            fmt.append("B")
            targets.append(f"bits{index}")
            values.extend(f"bits{index} & {1 << bit} != 0" for bit in range(len(item)))
            continue
        field = item
        if field.domain in FIXED:
            fmt.append(FIXED[field.domain])
            targets.append(field.name)
            values.append(field.name)
        elif field.domain in ("shortstr", "longstr"):
            fmt.append("B" if field.domain == "shortstr" else "I")
            targets.append("n")
            flush()
            if field.domain == "shortstr":
                conv = "buf[off:off + n].decode()"
            else:
                conv = "bytes(buf[off:off + n])"
            lines.append(f"    {field.name} = {conv}")
            lines.append("    off += n")
            values.append(field.name)
        elif field.domain == "table":
            flush()
            lines.append(f"    {field.name}, off = decode_table(buf, off, end)")
            values.append(field.name)
        else:  # pragma: no cover - the spec's domains are checked on load
            raise ValueError(field.domain)
    flush()
    lines.append("    if off != end:")
    lines.append(f'        raise _malformed("{name}")')
    lines.append(f"    return {camel(cls.name, method.name)}({', '.join(values)})")
    return lines


def gen_encoder(cls: AMQPClass, method: Method, structs: Structs) -> list[str]:
    name = f"{cls.name}.{method.name}"
    body: list[str] = []
    parts: list[str] = []
    fmt: list[str] = ["H", "H"]
    args: list[str] = [str(cls.index), str(method.index)]

    def flush() -> None:
        if fmt:
            parts.append(f"{structs.name(''.join(fmt))}.pack({', '.join(args)})")
            fmt.clear()
            args.clear()

    for item in group_bits(method.fields):
        if isinstance(item, list):
            fmt.append("B")
            terms = [f"{1 << bit} if self.{f.name} else 0" for bit, f in enumerate(item)]
            args.append(terms[0] if len(terms) == 1 else " | ".join(f"({t})" for t in terms))
            continue
        field = item
        if field.domain in FIXED:
            fmt.append(FIXED[field.domain])
            args.append(f"self.{field.name}")
        elif field.domain == "shortstr":
            body.append(f"        {field.name} = self.{field.name}.encode()")
            body.append(f"        if len({field.name}) > 255:")
            body.append(f'            raise _too_long("{name}", "{field.name}")')
            fmt.append("B")
            args.append(f"len({field.name})")
            flush()
            parts.append(field.name)
        elif field.domain == "longstr":
            fmt.append("I")
            args.append(f"len(self.{field.name})")
            flush()
            parts.append(f"self.{field.name}")
        elif field.domain == "table":
            flush()
            parts.append(f"encode_table(self.{field.name})")
    flush()
    lines = ["    def encode(self) -> bytes:"]
    lines.extend(body)
    if len(parts) == 1:
        lines.append(f"        return {parts[0]}")
    else:
        lines.append('        return b"".join((')
        lines.extend(f"            {part}," for part in parts)
        lines.append("        ))")
    return lines


def gen_class(cls: AMQPClass, method: Method, structs: Structs) -> list[str]:
    name = camel(cls.name, method.name)
    lines = [
        "@attrs.frozen(slots=True)",
        f"class {name}(Method):",
        f'    """{cls.name}.{method.name} ({cls.index}.{method.index})."""',
        "",
        f"    CLASS_ID = {cls.index}",
        f"    METHOD_ID = {method.index}",
        f'    NAME = "{cls.name}.{method.name}"',
        f"    SYNCHRONOUS = {method.synchronous}",
        f"    HAS_CONTENT = {method.content}",
        f"    SENT_BY_CLIENT = {method.sender in (CLIENT, BOTH)}",
        f"    SENT_BY_SERVER = {method.sender in (SERVER, BOTH)}",
        "",
    ]
    for field in method.fields:
        lines.append(f"    {field.name}: {PY_TYPES[field.domain]} = {default_repr(field)}")
    if method.fields:
        lines.append("")
    lines.extend(gen_encoder(cls, method, structs))
    return lines


def gen_properties(structs: Structs) -> list[str]:
    lines = [
        "@attrs.frozen(slots=True)",
        "class BasicProperties:",
        '    """The 14 basic content properties; None = absent (its flag bit is clear)."""',
        "",
    ]
    for prop in BASIC_PROPERTIES:
        lines.append(f"    {prop.name}: {PY_TYPES[prop.domain]} | None = None")
    lines += [
        "",
        "",
        "def decode_basic_property_list(",
        "    flags: int, buf: bytes | bytearray, off: int, end: int",
        ") -> BasicProperties:",
        '    """Decode the property list after the flags word(s); it must end at `end`."""',
    ]
    for prop in BASIC_PROPERTIES:
        lines.append(f"    if flags & 0x{prop.flag:04X}:")
        if prop.domain == "shortstr":
            lines.append("        n = buf[off]")
            lines.append(f"        {prop.name} = buf[off + 1:off + 1 + n].decode()")
            lines.append("        off += 1 + n")
        elif prop.domain == "octet":
            lines.append(f"        {prop.name} = buf[off]")
            lines.append("        off += 1")
        elif prop.domain == "timestamp":
            lines.append(f"        {prop.name}, = {structs.name('Q')}.unpack_from(buf, off)")
            lines.append("        off += 8")
        elif prop.domain == "table":
            lines.append(f"        {prop.name}, off = decode_table(buf, off, end)")
        else:  # pragma: no cover
            raise ValueError(prop.domain)
        lines.append("    else:")
        lines.append(f"        {prop.name} = None")
    lines.append("    if off != end:")
    lines.append('        raise _malformed("basic properties")')
    names = ", ".join(p.name for p in BASIC_PROPERTIES)
    lines.append("    return BasicProperties(")
    lines.append(f"        {names},")
    lines.append("    )")
    lines += [
        "",
        "",
        "def encode_basic_property_list(props: BasicProperties) -> bytes:",
        '    """The flags word and the property list: a content header minus 12 bytes."""',
        "    flags = 0",
        '    parts = [b""]',
    ]
    for prop in BASIC_PROPERTIES:
        lines.append(f"    if props.{prop.name} is not None:")
        lines.append(f"        flags |= 0x{prop.flag:04X}")
        if prop.domain == "shortstr":
            lines.append(f"        raw = props.{prop.name}.encode()")
            lines.append("        if len(raw) > 255:")
            lines.append(f'            raise _too_long("basic properties", "{prop.name}")')
            lines.append(f"        parts.append({structs.name('B')}.pack(len(raw)))")
            lines.append("        parts.append(raw)")
        elif prop.domain == "octet":
            lines.append(f"        parts.append({structs.name('B')}.pack(props.{prop.name}))")
        elif prop.domain == "timestamp":
            lines.append(f"        parts.append({structs.name('Q')}.pack(props.{prop.name}))")
        elif prop.domain == "table":
            lines.append(f"        parts.append(encode_table(props.{prop.name}))")
    lines.append(f"    parts[0] = {structs.name('H')}.pack(flags)")
    lines.append('    return b"".join(parts)')
    return lines


def generate() -> str:
    structs = Structs()
    blocks: list[list[str]] = []
    decoders: list[list[str]] = []
    entries: list[tuple[AMQPClass, Method]] = []
    for cls in CLASSES:
        for method in cls.methods:
            blocks.append(gen_class(cls, method, structs))
            decoders.append(gen_decoder(cls, method, structs))
            entries.append((cls, method))
    props = gen_properties(structs)

    out: list[str] = [HEADER.rstrip("\n"), ""]
    out += ["", *structs.render()]
    for block in [*blocks, *decoders, props]:
        out += ["", "", *block]
    out += ["", "", "METHODS: dict[tuple[int, int], type[Method]] = {"]
    for cls, method in entries:
        out.append(f"    ({cls.index}, {method.index}): {camel(cls.name, method.name)},")
    out.append("}")
    out += ["", "DECODERS: dict[int, Decoder] = {"]
    for cls, method in entries:
        key = (cls.index << 16) | method.index
        decoder = f"_decode_{snake(cls.name, method.name)}"
        out.append(f"    0x{key:08X}: {decoder},  # {cls.name}.{method.name}")
    out.append("}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if methods.py is stale")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        current = TARGET.read_text() if TARGET.exists() else ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(True), text.splitlines(True), str(TARGET), "generated"
            )
            sys.stdout.writelines(list(diff)[:60])
            print(f"\n{TARGET} is stale: run python tools/amqp_codegen.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
