"""STOMP destinations mapped onto exchanges and queues, as RabbitMQ's STOMP plugin maps them.

| destination      | SEND goes to                        | SUBSCRIBE reads from                   |
|------------------|-------------------------------------|----------------------------------------|
| `/queue/x`       | queue x via the default exchange    | queue x (both declare it, durable)     |
| `/topic/k`       | exchange `amq.topic`, key k         | a private queue bound to amq.topic, k  |
| `/exchange/e/k`  | exchange e, key k (k may be absent) | a private queue bound to e with k      |
| `/amq/queue/x`   | queue x via the default exchange    | existing queue x (never declared)      |
| `/reply-queue/x` | queue x via the default exchange    | — (replies arrive on their own)        |
| `/temp-queue/x`  | — (only valid in a `reply-to`)      | —                                      |

A name without a leading `/` is a queue name, as in RabbitMQ. Names are single path segments;
a `/` inside one is written `%2F` (and `%` as `%25`). Everything here is pure: parsing
destination headers, formatting the `destination` of a MESSAGE from the exchange and routing
key a message was published with, and turning SEND / SUBSCRIBE headers into a queue
declaration (`durable`, `auto-delete`, `exclusive`, and the `x-` queue arguments).
"""

from __future__ import annotations

import base64
import enum
import hashlib
from collections.abc import Iterable
from typing import Any, Final

import attrs

from herald.plugins.stomp.errors import FrameError

TOPIC_EXCHANGE: Final = "amq.topic"


class Kind(enum.Enum):
    QUEUE = "/queue/"
    TOPIC = "/topic/"
    EXCHANGE = "/exchange/"
    AMQ_QUEUE = "/amq/queue/"
    TEMP_QUEUE = "/temp-queue/"
    REPLY_QUEUE = "/reply-queue/"


PREFIXES: Final = tuple(kind.value for kind in Kind)
_TOPIC: Final = Kind.TOPIC  # an Enum member read from its class costs a lookup per frame
_EXCHANGE: Final = Kind.EXCHANGE


@attrs.frozen
class Destination:
    """A parsed destination header: what it names and where a SEND to it is routed."""

    kind: Kind
    name: str
    """The queue name, topic routing key, exchange name or temp-queue id."""
    routing_key: str = ""
    """For `/exchange/e/k`: k (empty when the destination has no key)."""

    @property
    def exchange(self) -> str:
        """The exchange a SEND to this destination publishes to."""
        kind = self.kind
        if kind is _TOPIC:
            return TOPIC_EXCHANGE
        if kind is _EXCHANGE:
            return self.name
        return ""

    @property
    def key(self) -> str:
        """The routing key a SEND to this destination publishes with."""
        if self.kind is _EXCHANGE:
            return self.routing_key
        return self.name

    @property
    def binds(self) -> bool:
        """Whether a subscription needs its own queue bound to an exchange."""
        kind = self.kind
        return kind is _TOPIC or kind is _EXCHANGE

    def __str__(self) -> str:
        if self.kind is Kind.EXCHANGE:
            tail = f"/{escape(self.routing_key)}" if self.routing_key else ""
            return f"{Kind.EXCHANGE.value}{escape(self.name)}{tail}"
        return f"{self.kind.value}{escape(self.name)}"


def unescape(segment: str) -> str:
    """A name segment as it is meant: `%2F` is `/`, `%25` is `%`."""
    if "%" not in segment:
        return segment
    return segment.replace("%2F", "/").replace("%2f", "/").replace("%25", "%")


def escape(name: str) -> str:
    """A name as one destination segment (the inverse of `unescape`)."""
    return name.replace("%", "%25").replace("/", "%2F")


_PARSED_CACHE_SIZE: Final = 4096
_PARSED_MAX: Final = 256  # characters: longer destinations are parsed every time
_parsed: dict[str, Destination] = {}
"""Destinations by header text: a client sends to the same few, frame after frame."""


def parse_destination(text: str | None, command: str = "SEND") -> Destination:
    """The destination a header names; FrameError for a missing, empty or unknown one."""
    if text is None:
        raise FrameError("Missing destination", f"{command} must include a 'destination' header")
    try:
        return _parsed[text]
    except KeyError:
        pass
    destination = _parse(text)
    if len(text) <= _PARSED_MAX:
        if len(_parsed) >= _PARSED_CACHE_SIZE:
            _parsed.clear()
        _parsed[text] = destination
    return destination


def _parse(text: str) -> Destination:
    if not text.startswith("/"):
        if not text:
            raise _invalid(text, "the destination is empty")
        return Destination(Kind.QUEUE, unescape(text))
    if text.startswith(Kind.REPLY_QUEUE.value):
        name = text[len(Kind.REPLY_QUEUE.value) :]  # reply queue names may hold slashes
        if not name:
            raise _invalid(text, "no queue name after /reply-queue/")
        return Destination(Kind.REPLY_QUEUE, name)
    for kind in (Kind.QUEUE, Kind.TOPIC, Kind.AMQ_QUEUE, Kind.TEMP_QUEUE):
        if text.startswith(kind.value):
            rest = text[len(kind.value) :]
            if not rest or "/" in rest:
                raise _invalid(text, f"expected one name after {kind.value} (write '/' as %2F)")
            return Destination(kind, unescape(rest))
    if text.startswith(Kind.EXCHANGE.value):
        parts = text[len(Kind.EXCHANGE.value) :].split("/")
        if not parts[0] or len(parts) > 2:
            raise _invalid(text, "expected /exchange/<name> or /exchange/<name>/<routing key>")
        key = unescape(parts[1]) if len(parts) == 2 else ""
        return Destination(Kind.EXCHANGE, unescape(parts[0]), key)
    raise FrameError(
        "Unknown destination",
        f"'{text}' is not a valid destination; valid destination types are: " + ", ".join(PREFIXES),
    )


def _invalid(text: str, why: str) -> FrameError:
    return FrameError("Invalid destination", f"'{text}' is not a valid destination: {why}")


def format_destination(exchange: str, routing_key: str) -> str:
    """The `destination` of a MESSAGE for a message published to (exchange, routing key)."""
    if not exchange:
        return Kind.QUEUE.value + escape(routing_key)
    if exchange == TOPIC_EXCHANGE:
        return Kind.TOPIC.value + escape(routing_key)
    if not routing_key:
        return Kind.EXCHANGE.value + escape(exchange)
    return f"{Kind.EXCHANGE.value}{escape(exchange)}/{escape(routing_key)}"


# -- queue declarations from headers ----------------------------------------------------------

_INTEGER_ARGUMENTS: Final = frozenset(
    {
        "x-message-ttl",
        "x-expires",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-priority",
        "x-delivery-limit",
    }
)
_TEXT_ARGUMENTS: Final = frozenset(
    {
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-overflow",
        "x-queue-type",
        "x-queue-mode",
        "x-queue-leader-locator",
    }
)
_BOOLEAN_ARGUMENTS: Final = frozenset({"x-single-active-consumer"})
QUEUE_ARGUMENTS: Final = _INTEGER_ARGUMENTS | _TEXT_ARGUMENTS | _BOOLEAN_ARGUMENTS
"""The headers that become queue arguments when a SEND or SUBSCRIBE declares a queue."""


@attrs.frozen
class Declaration:
    """How to declare the queue behind a destination."""

    durable: bool
    auto_delete: bool
    exclusive: bool
    arguments: dict[str, Any] = attrs.field(factory=dict)
    explicit: bool = False
    """Whether any header asked for something; an existing queue is then checked against it
    (406 on a difference), otherwise it is used as it is."""


def parse_boolean(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise FrameError("Invalid header", f"header '{name}' must be true or false, got '{value}'")


def is_durable_subscription(headers: Iterable[tuple[str, str]]) -> bool:
    """`durable:true` or `persistent:true` on a SUBSCRIBE / UNSUBSCRIBE (RabbitMQ accepts both)."""
    for name, value in headers:
        if name in ("durable", "persistent") and value.strip().lower() == "true":
            return True
    return False


_DECLARING: Final = {
    False: QUEUE_ARGUMENTS | {"durable", "auto-delete", "exclusive"},
    True: QUEUE_ARGUMENTS | {"durable", "persistent", "auto-delete", "exclusive"},
}
"""The headers `declaration` reads for a SEND (False) or SUBSCRIBE (True); a frame with none
of them gets a default declaration."""
_DEFAULTS: Final = {
    False: Declaration(durable=True, auto_delete=False, exclusive=False),
    True: Declaration(durable=False, auto_delete=True, exclusive=True),
}
"""The declarations of a frame without declaration headers, by `Destination.binds` (shared:
their `arguments` are only read, and declare_queue copies them)."""


def declaration(
    destination: Destination, headers: Iterable[tuple[str, str]], *, subscribe: bool
) -> Declaration:
    """The declaration a SEND (`subscribe` False) or SUBSCRIBE makes for `destination`.

    Defaults (RabbitMQ's): `/queue/` queues are durable; a subscription's own queue for
    `/topic/` or `/exchange/` is exclusive and auto-delete, unless the subscription is durable
    (then durable, shared and, unlike RabbitMQ, not auto-delete unless asked: a durable
    subscription must outlive its consumer). On SUBSCRIBE, `persistent` means `durable`.
    """
    pairs = list(headers)
    declaring = _DECLARING[subscribe]
    for name, _ in pairs:
        if name in declaring:
            break
    else:
        return _DEFAULTS[destination.binds]
    durable_names = ("durable", "persistent") if subscribe else ("durable",)
    seen: set[str] = set()
    flags: dict[str, bool] = {}
    arguments: dict[str, Any] = {}
    for name, value in pairs:
        if name in seen:
            continue  # STOMP 1.2: the first of repeated headers wins
        seen.add(name)
        if name in durable_names:
            flags["durable"] = flags.get("durable", False) or parse_boolean(name, value)
        elif name in ("auto-delete", "exclusive"):
            flags[name] = parse_boolean(name, value)
        elif name in QUEUE_ARGUMENTS:
            arguments[name] = _argument(name, value)
    if destination.binds:
        durable = flags.get("durable", False)
        default_auto_delete = not durable
        default_exclusive = not durable
    else:
        durable = flags.get("durable", True)
        default_auto_delete = default_exclusive = False
    return Declaration(
        durable=durable,
        auto_delete=flags.get("auto-delete", default_auto_delete),
        exclusive=flags.get("exclusive", default_exclusive),
        arguments=arguments,
        explicit=bool(flags or arguments),
    )


def _argument(name: str, value: str) -> Any:
    text = value.strip()
    if name in _INTEGER_ARGUMENTS:
        try:
            return int(text)
        except ValueError:
            raise FrameError(
                "Invalid header", f"header '{name}' must be an integer, got '{value}'"
            ) from None
    if name in _BOOLEAN_ARGUMENTS:
        return parse_boolean(name, value)
    return text


def subscription_queue_name(destination: str, subscription_id: str) -> str:
    """The queue of a durable subscription: the same for the same destination and id.

    As RabbitMQ: "stomp-subscription-" and a digest of both, which bounds the length and lets
    two durable subscriptions with one id on different destinations keep apart.
    """
    digest = hashlib.md5(f"{destination}\n{subscription_id}".encode(), usedforsecurity=False)
    return "stomp-subscription-" + base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")
