"""Sizes as people write them in config files: "40%", "512MiB", "2GB", 1073741824.

RabbitMQ reads K/M/G as powers of 1024 and kB/MB/GB as powers of 1000; so does herald.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from herald.core.errors import InvalidValue
from herald.core.errors import show_value as _show


def parse_watermark(value: str | float) -> float:
    """A watermark as stored: a fraction of RAM (float) or a whole number of bytes (int).

    0.4 and "40%" -> 0.4; "512MiB" -> 536870912; "2GB" -> 2000000000; 1073741824 stays.
    Units: B; K, KiB, M, MiB, G, GiB, T, TiB (powers of 1024, as RabbitMQ reads them); kB, MB,
    GB, TB (powers of 1000). Case does not matter. Arithmetic is exact (no float rounding).
    """
    if not isinstance(value, bool) and isinstance(value, int | float):
        return _fraction_or_bytes(value)
    match = _SIZE.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise InvalidValue(f"expected a number or a size like '40%' or '2GiB', got {_show(value)}")
    number, unit = Fraction(match["number"]), match["unit"].lower()
    if unit == "%":
        if not 0 < number <= 100:
            raise InvalidValue(f"a percentage must be in (0%, 100%], got {_show(value)}")
        return float(number / 100)
    if unit == "":
        return _fraction_or_bytes(number)
    size = math.floor(number * _UNITS[unit])
    if size <= 1:
        raise InvalidValue(f"a byte size must be more than 1 byte, got {_show(value)}")
    return size


def _fraction_or_bytes(number: float | Fraction) -> float:
    """Above 1 a whole number is a byte count (kept exact as an int); else a float."""
    if number > 1 and math.isfinite(number) and int(number) == number:
        return int(number)
    return float(number)


_SIZE = re.compile(r"(?P<number>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>%|[a-zA-Z]*)")
_UNITS = {"b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4}
_UNITS.update({p: 1024**n for n, p in enumerate("kmgt", 1)})
_UNITS.update({p + "ib": 1024**n for n, p in enumerate("kmgt", 1)})
