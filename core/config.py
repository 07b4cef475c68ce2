"""herald's configuration: frozen attrs sections, structured from TOML by one cattrs converter.

The rules for turning foreign data into values live in the converter (`make_converter`), the
rules a value must keep in the model (attrs validators), as cattrs advises. Structuring is strict:
an unknown key, a string where a number belongs or a bool where a string belongs is an error, and
every error becomes one `ConfigError` whose message names the key, so a bad config fails at start
with something a user can act on. Each plugin owns its section's class; the section is structured
with that class (amqtt's per-plugin strict structuring), whether or not the plugin is enabled.
"""

from __future__ import annotations

import difflib
import math
import os
import tomllib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import cattrs
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, override

from herald.core.errors import ConfigError, InvalidValue, show_value
from herald.core.sizes import parse_watermark
from herald.core.tls import TLSSection
from herald.core.validators import not_negative as _not_negative
from herald.core.validators import optional_port
from herald.core.validators import positive as _positive

LOG_LEVELS = ("debug", "info", "warning", "error")
_show = show_value


# -- validators (the model's rules; they run on structuring, on init and on attrs.evolve) ------


def _not_empty(_inst: object, attribute: attrs.Attribute, value: str | tuple[str, ...]) -> None:
    if not value if isinstance(value, str) else not all(value or ()):
        raise InvalidValue(
            "must not be empty" if isinstance(value, str) else "a name is empty", attribute.name
        )


def _lower(value: str) -> str:
    """`str.lower` as a converter mypy's attrs plugin can type (a method descriptor)."""
    return str.lower(value)


def _log_level(_inst: object, attribute: attrs.Attribute, value: str) -> None:
    if value not in LOG_LEVELS:
        raise InvalidValue(
            f"expected one of {', '.join(LOG_LEVELS)}, got {_show(value)}", attribute.name
        )


def _fraction(_inst: object, attribute: attrs.Attribute, value: float) -> None:
    if not (math.isfinite(value) and 0 < value <= 1):
        raise InvalidValue(f"expected a fraction in (0, 1], got {_show(value)}", attribute.name)


def _watermark(_inst: object, attribute: attrs.Attribute, value: float) -> None:
    whole = isinstance(value, int) or (math.isfinite(value) and value.is_integer())
    if not (math.isfinite(value) and value > 0) or (value > 1 and not whole):
        raise InvalidValue(
            f"expected a fraction of RAM in (0, 1] or a whole number of bytes, got {_show(value)}",
            attribute.name,
        )


# -- sections ----------------------------------------------------------------------------------


@attrs.frozen
class BrokerSection:
    """`[broker]`: what the broker is and where it keeps its data."""

    data_dir: Path = Path("data")
    plugins: tuple[str, ...] | None = attrs.field(default=None, validator=_not_empty)
    """Protocol plugins to enable; None enables every installed one."""
    default_vhost: str = attrs.field(default="/", validator=_not_empty)
    graceful_timeout: float = attrs.field(default=5.0, validator=_positive)
    log_level: str = attrs.field(default="info", converter=_lower, validator=_log_level)
    node_name: str = attrs.field(default="herald@localhost", validator=_not_empty)
    max_connections: int = attrs.field(default=0, validator=_not_negative)
    """Open client connections at most, all protocols together (0: no limit); one more is
    closed as soon as it is accepted (RabbitMQ's `connection_max`)."""
    max_connections_per_user: int = attrs.field(default=0, validator=_not_negative)
    """Connections one user may have open at once (0: no limit); one more is refused at login
    with the protocol's "not allowed" (RabbitMQ's per-user `max-connections` limit)."""
    any_host: str = "0.0.0.0"
    any_port: int | None = attrs.field(default=None, validator=optional_port)
    """One port serving every protocol that can be told from its first bytes (AMQP 0-9-1,
    MQTT, STOMP: ActiveMQ Apollo's any-protocol port); None: off, 0: any free port."""
    any_tls_port: int | None = attrs.field(default=None, validator=optional_port)
    """The same over TLS (needs `[tls]` with a certificate); None: off."""


@attrs.frozen
class StoreSection:
    """`[store]`: which storage backend plugin keeps messages and metadata."""

    backend: str = attrs.field(default="commitlog", validator=_not_empty)


@attrs.frozen
class MemorySection:
    """`[memory]`: the memory high watermark above which publishers are blocked."""

    high_watermark: float = attrs.field(default=0.4, validator=_watermark)
    """A fraction of total RAM when 0 < x <= 1, else a number of bytes (an int when parsed)."""
    paging_ratio: float = attrs.field(default=0.5, validator=_fraction)
    """Queues page transient messages out to the store above this fraction of the high
    watermark (RabbitMQ's `vm_memory_high_watermark_paging_ratio`, same default)."""
    check_interval: float = attrs.field(default=1.0, validator=_positive)

    def high_watermark_bytes(self, total_ram: int) -> int:
        """The watermark in bytes on a machine with `total_ram` bytes of RAM."""
        if self.high_watermark <= 1:
            return int(total_ram * self.high_watermark)
        return int(self.high_watermark)


@attrs.frozen
class AuthSection:
    """`[auth]`: the user created on first start, and who may log in only from loopback."""

    default_user: str = attrs.field(default="guest", validator=_not_empty)
    default_password: str = attrs.field(default="guest", repr=lambda _: "'********'")
    loopback_users: tuple[str, ...] = attrs.field(default=("guest",), validator=_not_empty)


@attrs.frozen
class QueuesSection:
    """`[queues]`: how queues keep a backlog of stored messages out of memory (core/swap.py)."""

    swap: bool = True
    page_transient: bool = True  # page transient messages out too when memory is short
    tail_buffer: int = attrs.field(default=640 * 1024, validator=_not_negative)
    swap_range_size: int = attrs.field(default=10_000, validator=_positive)
    load_batch: int = attrs.field(default=1_000, validator=_positive)


CORE_SECTIONS: Mapping[str, type] = types.MappingProxyType(
    {
        "broker": BrokerSection,
        "store": StoreSection,
        "memory": MemorySection,
        "auth": AuthSection,
        "queues": QueuesSection,
        "tls": TLSSection,
    }
)


@attrs.frozen
class HeraldConfig:
    """The whole configuration: the core sections and each installed plugin's section."""

    broker: BrokerSection = BrokerSection()
    store: StoreSection = StoreSection()
    memory: MemorySection = MemorySection()
    auth: AuthSection = AuthSection()
    queues: QueuesSection = QueuesSection()
    tls: TLSSection = attrs.field(factory=TLSSection)
    plugins: Mapping[str, Any] = attrs.field(factory=dict)
    """Plugin sections by name, each an instance of the class its plugin declared."""

    def section(self, name: str) -> Any:
        """The structured section of plugin `name`."""
        try:
            return self.plugins[name]
        except KeyError:
            known = ", ".join(sorted(self.plugins)) or "none"
            raise KeyError(f"no config section {name!r} (plugin sections: {known})") from None

    def with_overrides(self, *overrides: str) -> HeraldConfig:
        """A copy with `KEY=VALUE` overrides applied, validated like a loaded file."""
        sections = {name: type(value) for name, value in self.plugins.items()}
        converter = make_converter()
        data: dict[str, Any] = {
            name: converter.unstructure(getattr(self, name)) for name in CORE_SECTIONS
        }
        data.update({name: converter.unstructure(value) for name, value in self.plugins.items()})
        apply_overrides(data, overrides, sections)
        return _structure(data, sections, converter)


Config = HeraldConfig
"""The name hookspecs use for the whole configuration."""


# -- the converter -----------------------------------------------------------------------------


def _strict(kind: type, expected: str) -> Callable[[Any, type], Any]:
    def structure(value: Any, _type: type) -> Any:
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            raise InvalidValue(f"expected {expected}, got {_show(value)}")
        return value

    return structure


def _structure_float(value: Any, _type: type) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidValue(f"expected a number, got {_show(value)}")
    if not math.isfinite(value):
        raise InvalidValue(f"expected a finite number, got {_show(value)}")
    return float(value)


def _structure_path(value: Any, _type: type) -> Path:
    if isinstance(value, os.PathLike) or (isinstance(value, str) and value):
        return Path(value)
    raise InvalidValue(f"expected a path (a non-empty string), got {_show(value)}")


def _is_sequence(type_: Any) -> bool:
    """list[X] and tuple[X, ...]."""
    args = typing.get_args(type_)
    origin = typing.get_origin(type_)
    return origin is list or (origin is tuple and args[1:] == (Ellipsis,))


def _sequence_hook(converter: cattrs.Converter) -> Callable[[Any], Callable[[Any, type], Any]]:
    def factory(type_: Any) -> Callable[[Any, type], Any]:
        item_type = typing.get_args(type_)[0]
        make = typing.get_origin(type_)
        handler = converter.get_structure_hook(item_type)

        def structure(value: Any, _type: type) -> Any:
            if isinstance(value, str) and item_type is str:
                # "amqp, mqtt" -> ("amqp", "mqtt"): what a `--set` of a list looks like.
                value = [part.strip() for part in value.split(",") if part.strip()]
            if not isinstance(value, list | tuple):
                raise InvalidValue(f"expected a list, got {_show(value)}")
            items, errors = [], []
            for index, item in enumerate(value):
                try:
                    items.append(handler(item, item_type))
                except Exception as exc:
                    note = f"Structuring {type_} @ index {index}"
                    exc.add_note(IterableValidationNote(note, index, item_type))
                    errors.append(exc)
            if errors:
                raise IterableValidationError(f"While structuring {type_!r}", errors, type_)
            return make(items)

        return structure

    return factory


def make_converter() -> cattrs.Converter:
    """The converter for every config section, herald's and plugins'.

    Strict on types (TOML is typed: no bool for a number, no number for a string), forbids
    unknown keys, and records errors against their field (detailed validation).
    """
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    converter.register_structure_hook(str, _strict(str, "a string"))
    converter.register_structure_hook(bool, _strict(bool, "true or false"))
    converter.register_structure_hook(int, _strict(int, "an integer"))
    converter.register_structure_hook(float, _structure_float)
    converter.register_structure_hook(Path, _structure_path)
    converter.register_unstructure_hook(Path, str)
    converter.register_structure_hook_factory(_is_sequence, _sequence_hook(converter))
    converter.register_structure_hook(
        MemorySection,
        make_dict_structure_fn(
            MemorySection,
            converter,
            high_watermark=override(struct_hook=lambda value, _: parse_watermark(value)),
        ),
    )
    return converter


# -- errors ------------------------------------------------------------------------------------

_SEP = "\x00"


def _format(exc: BaseException, type_: Any) -> str:
    """cattrs `format_exception`: "kind SEP sub-key SEP text", finished by `_error_lines`."""
    if isinstance(exc, ForbiddenExtraKeysError):
        known = [a.alias for a in attrs.fields(exc.cl)] if attrs.has(exc.cl) else []
        return _SEP.join(("unknown", ",".join(sorted(exc.extra_fields)), ", ".join(known)))
    if isinstance(exc, InvalidValue):
        return _SEP.join(("value", exc.field or "", exc.message))
    if isinstance(exc, KeyError):
        return _SEP.join(("value", "", "is required"))
    if isinstance(exc, AttributeError) and "items" in str(exc):
        return _SEP.join(("value", "", "expected a table"))
    text = cattrs.v.format_exception(exc, type_)
    return _SEP.join(("value", "", text))


def _unknown(keys: Sequence[str], parent: str, known: Sequence[str], what: str) -> str:
    full = [f"{parent}.{key}" if parent else key for key in keys]
    hint = ""
    if len(keys) == 1 and (close := difflib.get_close_matches(keys[0], known, n=1)):
        hint = f"did you mean {(parent + '.' if parent else '') + close[0]!r}? "
    noun = "key" if len(keys) == 1 else "keys"
    listed = ", ".join(repr(k) for k in full)
    return f"unknown {noun} {listed} ({hint}known {what}: {', '.join(known) or 'none'})"


def _error_lines(exc: BaseException, section: str) -> list[str]:
    lines = []
    for line in cattrs.transform_error(exc, path=section, format_exception=_format):
        description, _, path = line.rpartition(" @ ")
        kind, sub, text = description.split(_SEP, 2)
        if kind == "unknown":
            lines.append(_unknown(sub.split(","), path, text.split(", ") if text else [], "keys"))
        else:
            lines.append(f"{path}.{sub}: {text}" if sub else f"{path}: {text}")
    return lines


def _fail(lines: Sequence[str]) -> ConfigError:
    return ConfigError("config: " + "; ".join(lines))


# -- loading -----------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A private copy with every mapping a dict (overrides write into it)."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _merge(into: dict[str, Any], data: Mapping[str, Any]) -> None:
    for key, value in data.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = _plain(value)


def _field_type(sections: Mapping[str, type], keys: Sequence[str]) -> Any:
    """The declared type at a dotted key, or None when it is not a known attrs field."""
    type_: Any = {**sections, **CORE_SECTIONS}.get(keys[0])
    for key in keys[1:]:
        if type_ is None or not attrs.has(type_):
            return None
        try:
            hints = typing.get_type_hints(type_)
        except Exception:  # an annotation that names a TYPE_CHECKING-only import
            return None
        type_ = next((hints.get(a.name) for a in attrs.fields(type_) if a.alias == key), None)
    return type_


def _is_text(type_: Any) -> bool:
    if typing.get_origin(type_) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(type_) if arg is not type(None)]
        return all(arg in (str, Path) for arg in args)
    return type_ in (str, Path)


def _parse_value(text: str, keys: Sequence[str], sections: Mapping[str, type]) -> Any:
    """A TOML value, else the text itself; also the text itself where a string is declared."""
    try:
        value = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return text
    if list(value) != ["v"]:
        return text
    if not isinstance(value["v"], str) and _is_text(_field_type(sections, keys)):
        return text.strip()  # `--set auth.default_password=1234` means the string "1234"
    return value["v"]


def apply_overrides(
    data: dict[str, Any],
    overrides: Sequence[str],
    plugin_sections: Mapping[str, type] = types.MappingProxyType({}),
) -> None:
    """Apply `KEY=VALUE` overrides (KEY dotted, VALUE a TOML value or plain text) to `data`."""
    for item in overrides:
        key, eq, text = item.partition("=")
        keys = [part.strip() for part in key.split(".")]
        if not eq or not all(keys):
            raise ConfigError(f"config: override {item!r} is not KEY=VALUE (e.g. amqp.port=5673)")
        value = _parse_value(text, keys, plugin_sections)
        table = data
        for depth, part in enumerate(keys[:-1]):
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                dotted = ".".join(keys[: depth + 1])
                raise ConfigError(f"config: override {item!r}: {dotted!r} is not a table")
        table[keys[-1]] = value


def _structure(
    data: Mapping[str, Any], plugin_sections: Mapping[str, type], converter: cattrs.Converter
) -> HeraldConfig:
    clashes = sorted(set(plugin_sections) & set(CORE_SECTIONS))
    if clashes:
        raise ConfigError(f"config: plugin sections {clashes} clash with core sections")
    known = sorted({*CORE_SECTIONS, *plugin_sections})
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise _fail([_unknown(unknown, "", known, "sections")])
    structured: dict[str, Any] = {}
    lines: list[str] = []
    for name, cls in {**CORE_SECTIONS, **plugin_sections}.items():
        raw = data.get(name, {})
        if not isinstance(raw, Mapping):
            lines.append(f"{name}: expected a table, got {_show(raw)}")
            continue
        try:
            structured[name] = converter.structure(raw, cls)
        except (ClassValidationError, IterableValidationError) as exc:
            lines.extend(_error_lines(exc, name))
        except Exception as exc:  # a plugin's class cattrs cannot structure, or its own check
            lines.append(f"{name}: {exc}")
    if lines:
        raise _fail(lines)
    core = {name: structured.pop(name) for name in CORE_SECTIONS}
    return HeraldConfig(**core, plugins=types.MappingProxyType(structured))


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML document at `path`; unreadable or malformed files raise `ConfigError`."""
    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"config: cannot read {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config: {path}: invalid TOML: {exc}") from None


def load_config(
    path: Path | None = None,
    *,
    overrides: Sequence[str] = (),
    plugin_sections: Mapping[str, type] = types.MappingProxyType({}),
    data: Mapping[str, Any] | None = None,
) -> HeraldConfig:
    """Read `path` (TOML), merge `data` over it, apply `overrides`, and structure the result.

    `plugin_sections` maps each installed plugin's section name to its config class; any other
    top-level table is an error. Every problem raises one `ConfigError` naming the key(s).
    """
    merged: dict[str, Any] = read_toml(Path(path)) if path is not None else {}
    if data is not None:
        _merge(merged, data)
    apply_overrides(merged, overrides, plugin_sections)
    return _structure(merged, plugin_sections, make_converter())
