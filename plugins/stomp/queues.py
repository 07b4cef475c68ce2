"""The queues behind STOMP destinations: declared on first use, as RabbitMQ's STOMP plugin does.

A SEND or SUBSCRIBE to `/queue/x` declares queue x (durable unless headers say otherwise); a
subscription to `/topic/k` or `/exchange/e/k` gets a queue of its own bound to the exchange;
a `reply-to: /temp-queue/t` gets the connection an exclusive reply queue. One deliberate
difference from RabbitMQ: a frame without declaration headers uses an existing queue as it is,
so a SEND to `/queue/x` works whatever x was declared with (RabbitMQ answers 406 when, say, an
AMQP client declared x transient); declaration headers that disagree with it are still 406.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from herald.core.auth import PermissionKind
from herald.plugins.stomp.destinations import (
    Declaration,
    Destination,
    subscription_queue_name,
)

if TYPE_CHECKING:
    from herald.core.queue import Queue
    from herald.plugins.stomp.session import Session


def ensure_queue(session: Session, name: str, declaration: Declaration) -> Queue:
    """Queue `name`, declared with `declaration` unless it exists and nothing was asked."""
    vhost, owner = session.vhost, session.connection
    existing = vhost.queues.get(name)
    if existing is not None and not declaration.explicit:
        existing.check_owner(owner)  # another connection's exclusive queue: 405
        return existing
    session.authorize(PermissionKind.CONFIGURE, "queue", name)
    return vhost.declare_queue(
        name,
        durable=declaration.durable,
        exclusive=declaration.exclusive,
        auto_delete=declaration.auto_delete,
        arguments=declaration.arguments,
        owner=owner,
    )


def existing_queue(session: Session, name: str) -> Queue:
    """Queue `name` as it is (`/amq/queue/`): 404 if it does not exist."""
    return session.vhost.get_queue(name, owner=session.connection)


def subscription_queue(
    session: Session,
    destination: Destination,
    declaration: Declaration,
    subscription_id: str,
    queue_name: str | None,
) -> Queue:
    """The queue a `/topic/` or `/exchange/` subscription reads from, bound to its exchange.

    A durable subscription's queue is named by `queue_name` (the `x-queue-name` header) or
    derived from the destination and id, so it is found again after a disconnect or restart;
    any other subscription gets a fresh server-named exclusive queue.
    """
    vhost = session.vhost
    exchange = destination.exchange
    vhost.get_exchange(exchange)  # 404 before anything is declared
    if declaration.durable:
        name = queue_name or subscription_queue_name(str(destination), subscription_id)
        queue = ensure_queue(session, name, declaration)
    else:
        queue = vhost.declare_queue(
            queue_name or "",
            durable=False,
            exclusive=declaration.exclusive,
            auto_delete=declaration.auto_delete,
            arguments=declaration.arguments,
            owner=session.connection,
        )
        session.authorize(PermissionKind.CONFIGURE, "queue", queue.name)
    # Binding needs what queue.bind needs in RabbitMQ: write on the queue, read on the exchange.
    session.authorize(PermissionKind.WRITE, "queue", queue.name)
    session.authorize(PermissionKind.READ, "exchange", exchange)
    vhost.bind_queue(queue.name, exchange, destination.key, owner=session.connection)
    return queue


def reply_queue(session: Session) -> Queue:
    """A new exclusive, server-named queue for a `/temp-queue/` reply-to."""
    queue = session.vhost.declare_queue("", exclusive=True, owner=session.connection)
    session.authorize(PermissionKind.CONFIGURE, "queue", queue.name)
    return queue
