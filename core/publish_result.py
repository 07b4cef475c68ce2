"""What became of a publish: the answer every protocol turns into its own acknowledgement
(AMQP confirm or basic.return, MQTT PUBACK reason code, STOMP receipt or ERROR)."""

from __future__ import annotations

import enum

import attrs


class RouteStatus(enum.Enum):
    ROUTED = "routed"
    UNROUTABLE = "unroutable"  # no queue: basic.return if mandatory
    REJECTED = "rejected"  # a queue refused it (x-overflow reject-publish): nack


@attrs.frozen
class PublishResult:
    """What became of a publish; `ticket` is the store ticket to await before confirming."""

    status: RouteStatus
    queues: int = 0
    ticket: int | None = None
