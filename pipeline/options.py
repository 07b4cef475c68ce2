"""Reader options: Spark hands every option over as text; they are parsed and checked once,
on the driver, into a frozen value that travels to the executors with each partition's reader.

A bad option fails the query at planning time with a message that names the option.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import attrs

MIB = 1 << 20
SPLIT_BYTES = 128 * MIB  # Spark's own default for files (spark.sql.files.maxPartitionBytes)
Default = TypeVar("Default", int, None)  # parse_int's result is an int unless its default is None


class OptionError(ValueError):
    """An option of `format("herald")` that cannot be used; the message names it."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    for key, value in options.items():  # Spark's options are case-insensitive
        if key.lower() == name.lower():
            return None if value is None else str(value)
    return None


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = _get(options, name)
    if text is None:
        return default
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}: expected true or false, not {text!r}")


def parse_int(
    options: Mapping[str, str], name: str, default: Default, low: int = 0
) -> int | Default:
    text = _get(options, name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"option {name}: expected an integer, not {text!r}") from None
    if value < low:
        raise OptionError(f"option {name}: must be at least {low}, not {value}")
    return value


def parse_time_ms(text: str, name: str) -> int:
    """Epoch milliseconds from an integer or an ISO-8601 time (UTC when it has no zone)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise OptionError(
            f"option {name}: expected epoch milliseconds or an ISO-8601 time, not {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _time(options: Mapping[str, str], name: str) -> int | None:
    text = _get(options, name)
    return None if text is None else parse_time_ms(text, name)


def _names(options: Mapping[str, str], name: str) -> frozenset[str]:
    text = _get(options, name)
    if not text:
        return frozenset()
    return frozenset(part.strip() for part in text.split(",") if part.strip())


@attrs.frozen
class ReadOptions:
    """What a read selects and how it splits the log."""

    path: Path
    destinations: frozenset[str] = frozenset()  # exchange or queue names (any target)
    vhost: str | None = None
    start_ms: int | None = None  # store time, inclusive
    end_ms: int | None = None  # store time, exclusive
    start_offset: int | None = None  # physical offset, inclusive
    end_offset: int | None = None  # physical offset, exclusive
    body_as_text: bool = False
    properties: bool = False  # decode each protocol's properties into the `properties` map
    split_bytes: int = SPLIT_BYTES
    batch_rows: int = 65536
    durable_only: bool = False  # stop at the newest checkpoint (fsynced) instead of the tail
    cluster: str | None = None  # read a cluster's groups instead (cluster_layout.py)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ReadOptions:
        path, cluster = _get(options, "path"), _get(options, "cluster")
        if path and cluster:
            raise OptionError(
                "format('herald') reads a data dir (.load(DATA_DIR)) or a cluster "
                "(.option('cluster', ...).load()), not both"
            )
        if not path and not cluster:
            raise OptionError(
                "format('herald') needs a data dir: .load(DATA_DIR), or a cluster: "
                ".option('cluster', 'DIR/cluster.json' or 'http://NAMESERVER').load()"
            )
        return cls(
            path=Path(path or ""),
            cluster=cluster,
            destinations=_names(options, "destination"),
            vhost=_get(options, "vhost"),
            start_ms=_time(options, "startTime"),
            end_ms=_time(options, "endTime"),
            start_offset=parse_int(options, "startOffset", None),
            end_offset=parse_int(options, "endOffset", None),
            body_as_text=parse_bool(options, "bodyAsText", False),
            properties=parse_bool(options, "decodeProperties", False),
            split_bytes=parse_int(options, "splitBytes", SPLIT_BYTES, low=4096),
            batch_rows=parse_int(options, "batchRows", 65536, low=1),
            durable_only=parse_bool(options, "durableOnly", False),
        )
