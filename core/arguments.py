"""Frozen argument tables: the hashable, type-strict form of AMQP field tables.

Exchange bindings and queue declarations compare arguments the way RabbitMQ does: `{"a": 1}`,
`{"a": True}` and `{"a": 1.0}` are different tables, because AMQP keeps their types apart.
A `FrozenArguments` is a read-only `dict`, so JSON, cattrs and `to_json_safe` take it as is.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from herald.core.errors import PreconditionFailed


def freeze_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return value if isinstance(value, FrozenArguments) else FrozenArguments(value)
    if isinstance(value, list | tuple):
        return tuple(freeze_value(v) for v in value)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    hash(value)  # TypeError for values that cannot be part of a binding's identity
    return value


def identity(value: Any) -> Hashable:
    """A hashable key that, unlike ==, tells True from 1 and 1 from 1.0 (AMQP types differ)."""
    if isinstance(value, FrozenArguments):
        return (FrozenArguments, value._key)
    if isinstance(value, tuple):
        return (tuple, tuple(identity(v) for v in value))
    return (value.__class__, value)


class FrozenArguments(dict[str, Any]):
    """An immutable, hashable arguments table (nested tables frozen, lists made tuples).

    A read-only `dict`, so whatever takes a dict (JSON, cattrs, `to_json_safe`) takes it too.
    Equality and hash are type-strict, like RabbitMQ's binding identity: {"a": 1} is not
    {"a": True} nor {"a": 1.0}.
    """

    __slots__ = ("_hash", "_key")

    def __init__(self, source: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        for key, value in (source or {}).items():
            try:
                dict.__setitem__(self, key, freeze_value(value))
            except TypeError:
                raise PreconditionFailed(
                    f"argument {key!r} has a value of unsupported type {type(value).__name__}"
                ) from None
        self._key = frozenset((k, identity(v)) for k, v in dict.items(self))
        self._hash = hash(self._key)

    def __hash__(self) -> int:  # type: ignore[override]  # dict's __hash__ is None; this one hashes
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenArguments):
            return self._hash == other._hash and self._key == other._key
        if isinstance(other, Mapping):
            try:
                return self._key == FrozenArguments(other)._key
            except PreconditionFailed:
                return False
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def _immutable(self, *args: object, **kwargs: object) -> Any:
        raise TypeError("arguments are immutable once bound or declared")

    __setitem__ = __delitem__ = __ior__ = _immutable
    clear = pop = popitem = setdefault = update = _immutable

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenArguments, (dict(self),))

    def __repr__(self) -> str:
        return f"FrozenArguments({dict.__repr__(self)})"


EMPTY_ARGUMENTS = FrozenArguments()


def freeze_arguments(arguments: Mapping[str, Any] | None) -> FrozenArguments:
    """`arguments` as a `FrozenArguments` (shared empty instance for None / {})."""
    if isinstance(arguments, FrozenArguments):
        return arguments
    if not arguments:
        return EMPTY_ARGUMENTS
    return FrozenArguments(arguments)
