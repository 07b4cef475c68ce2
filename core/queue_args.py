"""Queue arguments (`x-...`), parsed and checked once at declaration.

RabbitMQ semantics: a bad value is a 406 PRECONDITION_FAILED naming the argument; arguments
herald does not know are kept and ignored, as RabbitMQ does, so clients written for newer
RabbitMQ versions still declare their queues. `x-queue-type` is only read here; whether the
type exists, and which arguments it refuses, is the queue types' business (core/queue_types.py).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from herald.core.errors import PreconditionFailed


class Overflow(enum.Enum):
    """What a queue does when a publish would take it over x-max-length(-bytes)."""

    DROP_HEAD = "drop-head"
    REJECT_PUBLISH = "reject-publish"
    REJECT_PUBLISH_DLX = "reject-publish-dlx"


DEFAULT_QUEUE_TYPE = "classic"
"""The `x-queue-type` of a declaration that names none. Which types exist is not decided here:
plugins declare them (hook `herald_queue_types`, core/queue_types.py)."""


@attrs.frozen
class QueueArguments:
    message_ttl: int | None = None  # ms
    expires: int | None = None  # ms
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: Overflow = Overflow.DROP_HEAD
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_priority: int | None = None
    single_active_consumer: bool = False
    queue_type: str = DEFAULT_QUEUE_TYPE

    @classmethod
    def parse(cls, arguments: Mapping[str, Any] | None, queue: str, vhost: str) -> QueueArguments:
        """Check and convert a declaration's arguments; raises PreconditionFailed."""
        if not arguments:
            return _DEFAULT

        def invalid(name: str, value: Any, why: str) -> PreconditionFailed:
            return PreconditionFailed(
                f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': {why} ({value!r})"
            )

        def integer(name: str, minimum: int) -> int | None:
            value = arguments.get(name)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int):
                raise invalid(name, value, "not an integer")
            if value < minimum:
                raise invalid(name, value, f"must be at least {minimum}")
            return value

        def text(name: str) -> str | None:
            value = arguments.get(name)
            if value is None:
                return None
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if not isinstance(value, str):
                raise invalid(name, value, "not a string")
            return value

        overflow_text = text("x-overflow")
        try:
            overflow = Overflow(overflow_text) if overflow_text else Overflow.DROP_HEAD
        except ValueError:
            raise invalid("x-overflow", overflow_text, "unknown overflow behaviour") from None
        max_priority = integer("x-max-priority", 0)
        if max_priority is not None and max_priority > 255:
            raise invalid("x-max-priority", max_priority, "must be at most 255")
        sac = arguments.get("x-single-active-consumer", False)
        if not isinstance(sac, bool):
            raise invalid("x-single-active-consumer", sac, "not a boolean")
        return cls(
            message_ttl=integer("x-message-ttl", 0),
            expires=integer("x-expires", 1),
            max_length=integer("x-max-length", 0),
            max_length_bytes=integer("x-max-length-bytes", 0),
            overflow=overflow,
            dead_letter_exchange=text("x-dead-letter-exchange"),
            dead_letter_routing_key=text("x-dead-letter-routing-key"),
            max_priority=max_priority or None,
            single_active_consumer=sac,
            queue_type=text("x-queue-type") or DEFAULT_QUEUE_TYPE,
        )


_DEFAULT = QueueArguments()
