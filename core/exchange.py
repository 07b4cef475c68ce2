"""Exchanges: the four AMQP exchange types, and the bindings that feed their routing tables.

An exchange maps a publish (routing key, headers) to destinations. Destinations are opaque to
it (the virtual host passes queues and exchanges; only their identity and hash are used).

A binding's identity is (destination, routing key, arguments), as in RabbitMQ, but direct,
fanout and topic exchanges route by key alone. So each exchange keeps every binding for
listing and identity, and a count per (destination, routing fact): the routing table changes
only when the first binding for a fact arrives or the last one goes. `route()` is the hot path:
it returns a precomputed tuple wherever it can.

The default exchange ("" routing by queue name) is the virtual host's business, not this module's.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import Any, ClassVar

import attrs

from herald.core.arguments import (
    EMPTY_ARGUMENTS,
    FrozenArguments,
    freeze_arguments,
    freeze_value,
    identity,
)
from herald.core.errors import PreconditionFailed
from herald.core.topic_trie import TopicTrie

__all__ = [
    "EMPTY_ARGUMENTS",
    "EXCHANGE_TYPES",
    "Binding",
    "DirectExchange",
    "Exchange",
    "FanoutExchange",
    "FrozenArguments",
    "HeadersExchange",
    "TopicExchange",
    "freeze_arguments",
    "make_exchange",
]

Routed = tuple[Hashable, ...]
"""What `route` returns: distinct destinations, in a tuple that may be cached and shared."""

NO_DESTINATIONS: Routed = ()

EQUIVALENCE_ARGUMENTS = ("alternate-exchange",)
"""Arguments compared on redeclare; RabbitMQ ignores the others (rabbit_exchange)."""
_COMPARED = frozenset(EQUIVALENCE_ARGUMENTS)


@attrs.frozen
class Binding:
    """One binding, as listed (management API, metadata store)."""

    source: str
    destination: Hashable
    routing_key: str
    arguments: FrozenArguments = EMPTY_ARGUMENTS


# -- the base -------------------------------------------------------------------------------


def _text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "none" if value is None else str(value)


@attrs.define(slots=True, eq=False)
class Exchange:
    """Common bookkeeping: binding identity, per-fact counts, listing, redeclare checks.

    Subclasses say which fact of a binding routes (`_route_fact`) and keep their routing table
    in step through `_add_route` / `_remove_route`, called on a fact's first and last binding.
    """

    type: ClassVar[str]

    name: str
    durable: bool = attrs.field(default=False, kw_only=True)
    auto_delete: bool = attrs.field(default=False, kw_only=True)
    internal: bool = attrs.field(default=False, kw_only=True)
    arguments: FrozenArguments = attrs.field(
        default=EMPTY_ARGUMENTS, kw_only=True, converter=freeze_arguments
    )
    # destination -> {(routing key, arguments): None}, in binding order
    _by_destination: dict[Hashable, dict[tuple[str, FrozenArguments], None]] = attrs.field(
        init=False, repr=False, factory=dict
    )
    # (destination, routing fact) -> number of bindings sharing it
    _fact_counts: dict[tuple[Hashable, Hashable], int] = attrs.field(
        init=False, repr=False, factory=dict
    )
    _binding_count: int = attrs.field(init=False, repr=False, default=0)

    # -- subclass hooks --
    def _route_fact(self, routing_key: str, arguments: FrozenArguments) -> Hashable:
        """The part of a binding that routing uses; may raise for an invalid binding."""
        raise NotImplementedError

    def _add_route(self, destination: Hashable, fact: Any) -> None:
        raise NotImplementedError

    def _remove_route(self, destination: Hashable, fact: Any) -> None:
        raise NotImplementedError

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> Routed:
        """The distinct destinations of a publish. Do not mutate the result (it is shared)."""
        raise NotImplementedError

    # -- bindings --
    def bind(
        self, destination: Hashable, routing_key: str, arguments: Mapping[str, Any] | None = None
    ) -> bool:
        """Add a binding; True if it is new, False if the same binding existed.

        Raises `PreconditionFailed` for arguments this exchange type rejects.
        """
        args = freeze_arguments(arguments)
        fact = self._route_fact(routing_key, args)
        identity = (routing_key, args)
        keys = self._by_destination.get(destination)
        if keys is None:
            keys = self._by_destination[destination] = {}
        elif identity in keys:
            return False
        keys[identity] = None
        self._binding_count += 1
        counted = (destination, fact)
        count = self._fact_counts.get(counted, 0)
        self._fact_counts[counted] = count + 1
        if count == 0:
            self._add_route(destination, fact)
        return True

    def unbind(
        self, destination: Hashable, routing_key: str, arguments: Mapping[str, Any] | None = None
    ) -> bool:
        """Remove a binding; True if it existed."""
        try:
            args = freeze_arguments(arguments)
        except PreconditionFailed:
            return False  # such arguments could never have been bound
        keys = self._by_destination.get(destination)
        identity = (routing_key, args)
        if keys is None or identity not in keys:
            return False
        del keys[identity]
        if not keys:
            del self._by_destination[destination]
        self._release(destination, routing_key, args)
        return True

    def unbind_destination(self, destination: Hashable) -> int:
        """Remove every binding to `destination` (it was deleted); returns how many."""
        keys = self._by_destination.pop(destination, None)
        if not keys:
            return 0
        for routing_key, args in keys:
            self._release(destination, routing_key, args)
        return len(keys)

    def _release(self, destination: Hashable, routing_key: str, args: FrozenArguments) -> None:
        self._binding_count -= 1
        counted = (destination, self._route_fact(routing_key, args))
        count = self._fact_counts[counted] - 1
        if count:
            self._fact_counts[counted] = count
        else:
            del self._fact_counts[counted]
            self._remove_route(destination, counted[1])

    def bindings(self) -> Iterator[Binding]:
        """Every binding from this exchange, grouped by destination in binding order."""
        name = self.name
        for destination, keys in list(self._by_destination.items()):
            for routing_key, args in list(keys):
                yield Binding(name, destination, routing_key, args)

    def is_bound(self, destination: Hashable) -> bool:
        """Whether some binding leads to `destination`, in O(1)."""
        return destination in self._by_destination

    @property
    def has_bindings(self) -> bool:
        return self._binding_count > 0

    @property
    def binding_count(self) -> int:
        return self._binding_count

    # -- redeclare --
    def difference(
        self,
        type: str,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, Any] | None,
    ) -> str | None:
        """Why a redeclare with these properties is refused (RabbitMQ's 406 text), or None.

        As RabbitMQ does, only the arguments in `EQUIVALENCE_ARGUMENTS` are compared.
        """
        new = freeze_arguments({k: v for k, v in (arguments or {}).items() if k in _COMPARED})
        checks = [
            ("type", type, self.type),
            ("durable", durable, self.durable),
            ("auto_delete", auto_delete, self.auto_delete),
            ("internal", internal, self.internal),
            *((key, new.get(key), self.arguments.get(key)) for key in EQUIVALENCE_ARGUMENTS),
        ]
        for field, received, current in checks:
            if received != current:
                return (
                    f"inequivalent arg '{field}' for exchange '{self.name}': "
                    f"received '{_text(received)}' but current is '{_text(current)}'"
                )
        return None

    def equivalent(
        self,
        type: str,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, Any] | None,
    ) -> bool:
        """Whether redeclaring with these properties is accepted (see `difference`)."""
        return self.difference(type, durable, auto_delete, internal, arguments) is None


# -- the four types -------------------------------------------------------------------------


@attrs.define(slots=True, eq=False)
class DirectExchange(Exchange):
    """Routes to the destinations bound with exactly the publish's routing key."""

    type: ClassVar[str] = "direct"

    _members: dict[str, dict[Hashable, None]] = attrs.field(init=False, repr=False, factory=dict)
    # routing key -> destinations; filled lazily so a bind costs O(1) however many share a key
    _table: dict[str, Routed] = attrs.field(init=False, repr=False, factory=dict)

    def _route_fact(self, routing_key: str, arguments: FrozenArguments) -> Hashable:
        return routing_key

    def _add_route(self, destination: Hashable, fact: str) -> None:
        self._members.setdefault(fact, {})[destination] = None
        self._table.pop(fact, None)

    def _remove_route(self, destination: Hashable, fact: str) -> None:
        members = self._members[fact]
        del members[destination]
        if not members:
            del self._members[fact]
        self._table.pop(fact, None)

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> Routed:
        hit = self._table.get(routing_key)
        if hit is not None:
            return hit
        members = self._members.get(routing_key)
        if not members:
            return NO_DESTINATIONS
        result = self._table[routing_key] = tuple(members)
        return result


@attrs.define(slots=True, eq=False)
class FanoutExchange(Exchange):
    """Routes to every bound destination, whatever the key."""

    type: ClassVar[str] = "fanout"

    _members: dict[Hashable, None] = attrs.field(init=False, repr=False, factory=dict)
    _all: Routed | None = attrs.field(init=False, repr=False, default=NO_DESTINATIONS)

    def _route_fact(self, routing_key: str, arguments: FrozenArguments) -> Hashable:
        return None

    def _add_route(self, destination: Hashable, fact: None) -> None:
        self._members[destination] = None
        self._all = None

    def _remove_route(self, destination: Hashable, fact: None) -> None:
        del self._members[destination]
        self._all = None

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> Routed:
        result = self._all
        if result is None:
            result = self._all = tuple(self._members)
        return result


@attrs.define(slots=True, eq=False)
class TopicExchange(Exchange):
    """Routes by AMQP topic pattern (see `herald.core.topic_trie`), with a bounded result cache.

    The cache maps recent routing keys to their destinations; any bind or unbind clears it.
    `cache_size=0` disables it.
    """

    type: ClassVar[str] = "topic"

    cache_size: int = attrs.field(default=4096, kw_only=True)
    _trie: TopicTrie = attrs.field(init=False, repr=False, factory=TopicTrie)
    _cache: dict[str, Routed] = attrs.field(init=False, repr=False, factory=dict)

    def _route_fact(self, routing_key: str, arguments: FrozenArguments) -> Hashable:
        return routing_key

    def _add_route(self, destination: Hashable, fact: str) -> None:
        self._trie.add(fact, destination)
        self._cache.clear()

    def _remove_route(self, destination: Hashable, fact: str) -> None:
        self._trie.remove(fact, destination)
        self._cache.clear()

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> Routed:
        cache = self._cache
        hit = cache.get(routing_key)
        if hit is not None:
            return hit
        found = self._trie.match(routing_key)
        result = tuple(found) if found else NO_DESTINATIONS
        if self.cache_size > 0:
            if len(cache) >= self.cache_size:
                del cache[next(iter(cache))]  # evict the oldest entry
            cache[routing_key] = result
        return result


X_MATCH_KINDS = frozenset({"all", "any", "all-with-x", "any-with-x"})


def _x_match(arguments: FrozenArguments) -> str:
    value = arguments.get("x-match", "all")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        raise PreconditionFailed(
            f"invalid x-match field type {type(value).__name__} (value {value!r}); "
            "expected a string: all, any, all-with-x or any-with-x"
        )
    if value not in X_MATCH_KINDS:
        raise PreconditionFailed(
            f"invalid x-match field value {value!r}; expected all, any, all-with-x or any-with-x"
        )
    return value


_ABSENT = object()


def _same(header: Any, bound: Any) -> bool:
    """Header equality as RabbitMQ compares values: numbers by value, booleans only with
    booleans; str equals bytes holding it in UTF-8 (protocols hand over AMQP long strings
    either way); arrays and tables element by element, strictly typed."""
    if header == bound:
        return (header.__class__ is bool) == (bound.__class__ is bool)
    if header.__class__ is bytes and bound.__class__ is str:
        return header == bound.encode()
    if header.__class__ is str and bound.__class__ is bytes:
        return header.encode() == bound
    if isinstance(header, list) and isinstance(bound, tuple):
        try:
            return identity(freeze_value(header)) == identity(bound)
        except (TypeError, PreconditionFailed):
            return False
    return False


@attrs.frozen
class _HeadersMatcher:
    """One headers binding compiled: the pairs to test and whether all or any must hold.

    A pair whose bound value is None (AMQP void) only asks for the header to be present.
    """

    destination: Hashable
    pairs: tuple[tuple[str, Any], ...]
    match_any: bool

    @classmethod
    def compile(cls, destination: Hashable, arguments: FrozenArguments) -> _HeadersMatcher:
        kind = _x_match(arguments)
        with_x = kind.endswith("-with-x")
        pairs = tuple(
            (k, v)
            for k, v in arguments.items()
            if k != "x-match" and (with_x or not k.startswith("x-"))
        )
        return cls(destination, pairs, kind.startswith("any"))

    def matches(self, headers: Mapping[str, Any]) -> bool:
        if self.match_any:
            for key, bound in self.pairs:
                value = headers.get(key, _ABSENT)
                if value is not _ABSENT and (bound is None or _same(value, bound)):
                    return True
            return False
        for key, bound in self.pairs:
            value = headers.get(key, _ABSENT)
            if value is _ABSENT or (bound is not None and not _same(value, bound)):
                return False
        return True


@attrs.define(slots=True, eq=False)
class HeadersExchange(Exchange):
    """Routes by message headers against each binding's arguments (RabbitMQ 3.10 semantics).

    `x-match`: "all" (default) or "any" compare the binding's arguments not starting with
    "x-"; "all-with-x" / "any-with-x" compare those too. A binding with nothing to compare
    matches every message under all and none under any. The routing key is ignored.
    Matching is linear in the number of bindings, as in RabbitMQ.
    """

    type: ClassVar[str] = "headers"

    _matchers: dict[tuple[Hashable, FrozenArguments], _HeadersMatcher] = attrs.field(
        init=False, repr=False, factory=dict
    )

    def _route_fact(self, routing_key: str, arguments: FrozenArguments) -> Hashable:
        _x_match(arguments)  # reject an invalid binding before anything changes
        return arguments

    def _add_route(self, destination: Hashable, fact: FrozenArguments) -> None:
        self._matchers[(destination, fact)] = _HeadersMatcher.compile(destination, fact)

    def _remove_route(self, destination: Hashable, fact: FrozenArguments) -> None:
        del self._matchers[(destination, fact)]

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> Routed:
        if not self._matchers:
            return NO_DESTINATIONS
        if headers is None:
            headers = EMPTY_ARGUMENTS
        found: dict[Hashable, None] = {}
        for matcher in self._matchers.values():
            if matcher.destination not in found and matcher.matches(headers):
                found[matcher.destination] = None
        return tuple(found) if found else NO_DESTINATIONS


EXCHANGE_TYPES: Mapping[str, type[Exchange]] = {
    cls.type: cls for cls in (DirectExchange, FanoutExchange, TopicExchange, HeadersExchange)
}


def make_exchange(
    name: str,
    type: str,
    *,
    durable: bool = False,
    auto_delete: bool = False,
    internal: bool = False,
    arguments: Mapping[str, Any] | None = None,
) -> Exchange:
    """A new exchange of `type`; `PreconditionFailed` for a type herald does not know."""
    cls = EXCHANGE_TYPES.get(type)
    if cls is None:
        # A channel error since RabbitMQ 3.12.x (rabbitmq-server#11214); it was 503 before.
        raise PreconditionFailed(f"unknown exchange type '{type}'")
    return cls(
        name, durable=durable, auto_delete=auto_delete, internal=internal, arguments=arguments
    )
