"""attrs validators for config sections, shared by the kernel's sections and every plugin's.

Each raises `InvalidValue` naming the attribute; the config loader turns that into an error
naming the whole key (`amqp.port: expected 0..65535, got 70000`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from herald.core.errors import InvalidValue, show_value

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def port(_inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
    """A TCP port; 0 picks a free one."""
    if not 0 <= value <= 65535:
        raise InvalidValue(f"expected 0..65535, got {show_value(value)}", attribute.name)


def optional_port(_inst: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    """A TCP port, or None for "no such listener"."""
    if value is not None:
        port(_inst, attribute, value)


def positive(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise InvalidValue(f"must be more than 0, got {show_value(value)}", attribute.name)


def not_negative(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value >= 0:
        raise InvalidValue(f"must be at least 0, got {show_value(value)}", attribute.name)


def at_least(minimum: int) -> Validator:
    def check(_inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
        if value < minimum:
            raise InvalidValue(
                f"must be at least {minimum}, got {show_value(value)}", attribute.name
            )

    return check


def between(low: int, high: int) -> Validator:
    def check(_inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
        if not low <= value <= high:
            raise InvalidValue(f"expected {low}..{high}, got {show_value(value)}", attribute.name)

    return check
