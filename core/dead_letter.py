"""Dead-letter history (RabbitMQ's `x-death` header) and cycle detection.

The history lives in the message's kernel annotations, not in its raw bytes: protocols that
have headers merge it into what they send (AMQP `x-death`, STOMP headers, MQTT 5 user
properties), and the stored bytes stay as the publisher sent them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from herald.core.message import Message


def death_annotations(message: Message, queue: str, reason: str) -> dict[str, Any]:
    """The annotations of `message` dead-lettered from `queue` for `reason`.

    As RabbitMQ: one x-death record per (queue, reason) with a count, most recent first, and
    x-first-death-* set once, x-last-death-* each time.
    """
    old = message.annotations or {}
    deaths: list[dict[str, Any]] = [dict(d) for d in old.get("x-death", ())]
    record = None
    for index, death in enumerate(deaths):
        if death.get("queue") == queue and death.get("reason") == reason:
            record = deaths.pop(index)
            record["count"] = int(record.get("count", 1)) + 1
            break
    if record is None:
        record = {
            "count": 1,
            "reason": reason,
            "queue": queue,
            "exchange": message.exchange,
            "routing-keys": [message.routing_key],
        }
        if message.expiration_ms is not None:
            record["original-expiration"] = str(message.expiration_ms)
    record["time"] = int(time.time())
    deaths.insert(0, record)
    annotations = dict(old)
    annotations["x-death"] = deaths
    annotations.setdefault("x-first-death-queue", queue)
    annotations.setdefault("x-first-death-reason", reason)
    annotations.setdefault("x-first-death-exchange", message.exchange)
    annotations["x-last-death-queue"] = queue
    annotations["x-last-death-reason"] = reason
    annotations["x-last-death-exchange"] = message.exchange
    return annotations


def is_cycle(annotations: dict[str, Any], target_queue: str, reason: str) -> bool:
    """Whether dead-lettering into `target_queue` would loop with no client involved.

    RabbitMQ drops a message that would return to a queue it already died in, unless a
    rejection (a client decision) is part of the cycle; otherwise an expiry loop would spin
    forever. Only the records back to the target queue's form the cycle (most recent first):
    a rejection older than that does not make a later expiry loop safe.
    """
    if reason == "rejected":
        return False
    for death in annotations.get("x-death", ()):
        if death.get("reason") == "rejected":
            return False
        if death.get("queue") == target_queue:
            return True
    return False
