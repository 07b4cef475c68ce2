"""Virtual hosts: exchanges, queues and bindings, and the publish path through them.

This is the RabbitMQ model every protocol maps onto (DESIGN.md "The kernel's model"): the
default exchange routes by queue name, `amq.*` exchanges are pre-declared, exchanges can be
bound to exchanges, and a message is routed once and shared by every queue it reaches.
Declarations answer like RabbitMQ does (404, 403, 405, 406 with RabbitMQ's wording), so
client libraries' error handling works unchanged. Binding and unbinding by name is here; what
keeps the bindings consistent as exchanges and queues come and go is core/bindings.py.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Collection, Hashable, Mapping
from typing import TYPE_CHECKING, Any

from herald.core.bindings import Bindings
from herald.core.dead_letter import death_annotations, is_cycle
from herald.core.errors import AccessRefused, NotFound, PreconditionFailed, ResourceLocked
from herald.core.exchange import Exchange, make_exchange
from herald.core.publish_result import PublishResult, RouteStatus
from herald.core.queue import DeadLetterReason, Queue, QueueEntry
from herald.core.queue_args import Overflow, QueueArguments
from herald.core.queue_services import QueueDeclaration
from herald.core.store import QueueTarget

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.core.message import Message
    from herald.core.plugin_types import QueueType

__all__ = ["DEFAULT_EXCHANGE", "PublishResult", "RouteStatus", "VirtualHost"]

log = logging.getLogger(__name__)

DEFAULT_EXCHANGE = ""
PREDECLARED = {
    "amq.direct": "direct",
    "amq.fanout": "fanout",
    "amq.topic": "topic",
    "amq.headers": "headers",
    "amq.match": "headers",
}


_UNROUTABLE = PublishResult(RouteStatus.UNROUTABLE)
_ROUTED_ONE = PublishResult(RouteStatus.ROUTED, 1)


class VirtualHost:
    """One virtual host. Not thread-safe: everything runs on the broker's Trio thread.

    It is the `QueueOwner` of its queues (core/queue_services.py), and makes each one with
    its type's factory and the broker's `QueueServices`.
    """

    def __init__(self, broker: Broker, name: str) -> None:
        self.broker = broker
        self.name = name
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        self.metadata = broker.definitions
        self.bindings = Bindings(self)
        self._store = broker.store
        self._interceptors = broker.interceptors
        self._queue_services = broker.queue_services
        self._queue_types = broker.queue_types
        self._default = make_exchange(
            DEFAULT_EXCHANGE, "direct", durable=True, auto_delete=False, internal=False
        )
        self.exchanges[DEFAULT_EXCHANGE] = self._default
        for exchange_name, exchange_type in PREDECLARED.items():
            self.exchanges[exchange_name] = make_exchange(
                exchange_name, exchange_type, durable=True, auto_delete=False, internal=False
            )

    def __repr__(self) -> str:
        return f"<VirtualHost {self.name!r}>"

    # -- exchanges -------------------------------------------------------------------------
    def get_exchange(self, name: str) -> Exchange:
        try:
            return self.exchanges[name]
        except KeyError:
            raise NotFound(f"no exchange '{name}' in vhost '{self.name}'") from None

    def declare_exchange(
        self,
        name: str,
        type: str = "direct",
        *,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, Any] | None = None,
        passive: bool = False,
    ) -> Exchange:
        arguments = dict(arguments or {})
        if name == DEFAULT_EXCHANGE:  # even passively, as RabbitMQ
            raise AccessRefused("operation not permitted on the default exchange")
        existing = self.exchanges.get(name)
        if passive:
            if existing is None:
                raise NotFound(f"no exchange '{name}' in vhost '{self.name}'")
            return existing
        if existing is not None:
            difference = existing.difference(type, durable, auto_delete, internal, arguments)
            if difference is not None:
                raise PreconditionFailed(f"{difference} in vhost '{self.name}'")
            return existing
        if name.startswith("amq."):
            raise AccessRefused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
        exchange = make_exchange(
            name,
            type,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
        )
        self.exchanges[name] = exchange
        if durable:
            self.metadata.save_exchange(self.name, exchange)
        return exchange

    def delete_exchange(self, name: str, *, if_unused: bool = False) -> None:
        if name == DEFAULT_EXCHANGE or name in PREDECLARED:
            raise AccessRefused(f"operation not permitted on exchange '{name or 'amq.default'}'")
        exchange = self.exchanges.get(name)
        if exchange is None:
            return  # RabbitMQ: deleting a missing exchange succeeds
        if if_unused and exchange.has_bindings:
            raise PreconditionFailed(f"exchange '{name}' in vhost '{self.name}' in use")
        del self.exchanges[name]  # first: an auto-delete one losing its last binding is gone
        self.bindings.remove_all(exchange)
        if exchange.durable:
            self.metadata.delete_exchange(self.name, exchange)

    def restore_exchange(self, record: Mapping[str, Any], arguments: Mapping[str, Any]) -> None:
        """Re-create a durable exchange from its metadata record (broker start)."""
        self.exchanges[record["name"]] = make_exchange(
            record["name"],
            record["type"],
            durable=True,
            auto_delete=record.get("auto_delete", False),
            internal=record.get("internal", False),
            arguments=arguments,
        )

    # -- queues ----------------------------------------------------------------------------
    def restore_queue(self, record: Mapping[str, Any], arguments: Mapping[str, Any]) -> Queue:
        """Re-create a durable queue from its metadata record; the broker refills it."""
        name = record["name"]
        queue_type, args = self._queue_type(name, arguments)
        auto_delete = record.get("auto_delete", False)
        declaration = QueueDeclaration(
            name, True, auto_delete, None, arguments, args, record["store_id"]
        )
        queue = queue_type.factory(self, self._queue_services, declaration)
        self.queues[name] = queue
        return queue

    def _queue_type(
        self, name: str, arguments: Mapping[str, Any]
    ) -> tuple[QueueType, QueueArguments]:
        """The parsed arguments of a declaration, and the type that makes its queue.

        :raises PreconditionFailed: 406, for a bad argument, an unknown `x-queue-type`, or an
            argument the type refuses.
        """
        args = QueueArguments.parse(arguments, name, self.name)
        return self._queue_types.resolve(args, arguments, name, self.name), args

    def queue_type_available(self, name: str) -> bool:
        """Whether this broker can make queues of type `name` now (hook `herald_queue_types`,
        `QueueType.available`)."""
        return self._queue_types.available(name, self._queue_services)

    def get_queue(self, name: str, *, owner: Hashable | None = None) -> Queue:
        try:
            queue = self.queues[name]
        except KeyError:
            raise NotFound(f"no queue '{name}' in vhost '{self.name}'") from None
        queue.check_owner(owner)
        return queue

    def declare_queue(
        self,
        name: str = "",
        *,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: Mapping[str, Any] | None = None,
        passive: bool = False,
        owner: Hashable | None = None,
        reserved: bool = False,
    ) -> Queue:
        """Declare (or with `passive`, look up) a queue; `owner` is the declaring connection.

        `reserved` lets a plugin create a queue whose name has the server-reserved prefix
        `amq.` (e.g. AMQP direct reply-to queues); clients never can.
        """
        arguments = dict(arguments or {})
        existing = self.queues.get(name) if name else None
        if passive:
            if existing is None:
                raise NotFound(f"no queue '{name}' in vhost '{self.name}'")
            existing.check_owner(owner)
            return existing
        if existing is not None:
            if existing.owner != (owner if exclusive else None):  # RabbitMQ's strict check
                raise ResourceLocked(
                    f"cannot obtain exclusive access to locked queue '{name}' in vhost"
                    f" '{self.name}'. It could be originally declared on another connection"
                    " or the exclusive property value does not match that of the original"
                    " declaration."
                )
            if not _same_queue(existing, durable, auto_delete, exclusive, arguments):
                raise PreconditionFailed(
                    f"inequivalent arg for queue '{name}' in vhost '{self.name}': received"
                    f" durable={durable} exclusive={exclusive} auto_delete={auto_delete}"
                    f" arguments={arguments!r} but current is durable={existing.durable}"
                    f" exclusive={existing.owner is not None}"
                    f" auto_delete={existing.auto_delete} arguments={dict(existing.arguments)!r}"
                )
            existing.touch()
            return existing
        if not name:
            name = "amq.gen-" + secrets.token_urlsafe(16)
        elif name.startswith("amq.") and not reserved:
            raise AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'")
        if exclusive and owner is None:
            raise PreconditionFailed("an exclusive queue needs an owning connection")
        queue_type, args = self._queue_type(name, arguments)
        store_id = self.metadata.allocate_queue_id() if durable else None
        declaration = QueueDeclaration(
            name, durable, auto_delete, owner if exclusive else None, arguments, args, store_id
        )
        queue = queue_type.factory(self, self._queue_services, declaration)
        self.queues[name] = queue
        if durable and not exclusive:
            self.metadata.save_queue(queue)
        return queue

    def delete_queue(
        self,
        name: str,
        *,
        if_unused: bool = False,
        if_empty: bool = False,
        owner: Hashable | None = None,
    ) -> int:
        """Delete a queue; returns the number of ready messages it dropped."""
        queue = self.queues.get(name)
        if queue is None:
            return 0  # RabbitMQ: deleting a missing queue succeeds
        queue.check_owner(owner)
        if if_unused and queue.consumers:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.name}' in use")
        if if_empty and queue.message_count:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.name}' is not empty")
        del self.queues[name]
        self.bindings.remove_all(queue)
        count = queue.close()
        if queue.swap.scratch_id:
            self._store.delete_queue(queue.swap.scratch_id)
        if queue.store_id is not None:
            self._store.delete_queue(queue.store_id)
            if queue.owner is None:
                self.metadata.delete_queue(queue)
        log.debug("queue %r deleted from vhost %r", name, self.name)
        return count

    def purge_queue(self, name: str, *, owner: Hashable | None = None) -> int:
        return self.get_queue(name, owner=owner).purge()

    def owner_closed(self, owner: Hashable) -> None:
        """The connection `owner` closed: its exclusive queues go with it."""
        for queue in [q for q in self.queues.values() if q.owner == owner]:
            self.delete_queue(queue.name, owner=owner)

    # -- bindings --------------------------------------------------------------------------
    def bind_queue(
        self,
        queue: str,
        exchange: str,
        routing_key: str = "",
        arguments: Mapping[str, Any] | None = None,
        *,
        owner: Hashable | None = None,
    ) -> None:
        destination = self.get_queue(queue, owner=owner)
        source = self._bindable(exchange)
        self.bindings.add(source, destination, routing_key, arguments)

    def unbind_queue(
        self,
        queue: str,
        exchange: str,
        routing_key: str = "",
        arguments: Mapping[str, Any] | None = None,
        *,
        owner: Hashable | None = None,
    ) -> None:
        """Remove a binding; as in RabbitMQ, a missing queue or exchange is no error."""
        try:
            destination = self.get_queue(queue, owner=owner)
            source = self._bindable(exchange)
        except NotFound:
            return
        self.bindings.remove(source, destination, routing_key, arguments or {})

    def bind_exchange(
        self,
        destination: str,
        source: str,
        routing_key: str = "",
        arguments: Mapping[str, Any] | None = None,
    ) -> None:
        self.bindings.add(
            self._bindable(source), self._bindable(destination), routing_key, arguments
        )

    def unbind_exchange(
        self,
        destination: str,
        source: str,
        routing_key: str = "",
        arguments: Mapping[str, Any] | None = None,
    ) -> None:
        """Remove a binding; as in RabbitMQ, a missing exchange is no error."""
        try:
            found = self._bindable(source), self._bindable(destination)
        except NotFound:
            return
        self.bindings.remove(*found, routing_key, arguments or {})

    def _bindable(self, name: str) -> Exchange:
        if name == DEFAULT_EXCHANGE:
            raise AccessRefused("operation not permitted on the default exchange")
        return self.get_exchange(name)

    # -- publishing ------------------------------------------------------------------------
    def publish(self, message: Message, *, mandatory: bool = False) -> PublishResult:
        """Route `message` to its queues. Never blocks; confirms wait on the result's ticket.

        Raises NotFound for an unknown exchange and AccessRefused for an internal one, like
        RabbitMQ's channel errors.
        """
        exchange = self.exchanges.get(message.exchange)
        if exchange is None:
            raise NotFound(f"no exchange '{message.exchange}' in vhost '{self.name}'")
        if exchange.internal:
            raise AccessRefused(f"cannot publish to internal exchange '{exchange.name}'")
        on_publish = self._interceptors.on_publish
        if on_publish is not None:
            on_publish(self.name, message)
        targets = self._route(exchange, message)
        if not targets:
            return _UNROUTABLE
        return self._deliver(message, targets)

    def _route(self, exchange: Exchange, message: Message) -> Collection[Queue]:
        if exchange is self._default:
            queue = self.queues.get(message.routing_key)
            return (queue,) if queue is not None else ()
        found: Collection[Hashable] = exchange.route(message.routing_key, message.headers)
        if self.bindings.exchange_to_exchange:
            found = self._route_through_exchanges(found, message, {exchange})
        if not found:
            alternate = exchange.arguments.get("alternate-exchange")
            if alternate:
                other = self.exchanges.get(alternate)
                if other is not None and other is not exchange:
                    return self._route(other, message)
        return found  # type: ignore[return-value]  # queues: no e2e binding, or filtered above

    def _route_through_exchanges(
        self, found: Collection[Any], message: Message, seen: set[Exchange]
    ) -> list[Queue]:
        queues: dict[Queue, None] = {}
        pending = list(found)
        while pending:
            destination = pending.pop()
            if isinstance(destination, Exchange):
                if destination not in seen:
                    seen.add(destination)
                    pending.extend(destination.route(message.routing_key, message.headers))
            else:
                queues[destination] = None
        return list(queues)

    def _deliver(self, message: Message, targets: Collection[Queue]) -> PublishResult:
        if len(targets) == 1:
            for queue in targets:
                # One queue: the publish fast path (stored there if need be), with the same
                # result as below.
                if queue.accepts(message):
                    ticket = queue.push(message)
                    if ticket is None:
                        return _ROUTED_ONE
                    return PublishResult(RouteStatus.ROUTED, 1, ticket)
        entries: list[QueueEntry] = []
        refused: list[Queue] = []
        for queue in targets:
            if queue.accepts(message):
                entries.append(queue.enqueue(message))
            else:
                refused.append(queue)
        ticket = None
        if message.persistent:
            stored = [(e, sid) for e in entries if (sid := e.queue.store_id) is not None]
            if stored:
                try:
                    ticket = self._store.append(
                        message, [QueueTarget(store_id, e.offset) for e, store_id in stored]
                    )
                except Exception:
                    for entry in entries:
                        entry.queue.unenqueue(entry)
                    raise
                for entry, store_id in stored:
                    entry.stored = store_id
        for entry in entries:
            queue = entry.queue
            queue.admit(entry)
            queue.dispatch()
            queue.enforce_limits()
        # Only once the publish itself has succeeded: a failed append dead-letters nothing.
        for queue in refused:
            if queue.args.overflow is Overflow.REJECT_PUBLISH_DLX:
                self.dead_letter(message, queue, DeadLetterReason.MAXLEN)
        if refused:
            return PublishResult(RouteStatus.REJECTED, len(entries), ticket)
        if ticket is None and len(entries) == 1:
            return _ROUTED_ONE
        return PublishResult(RouteStatus.ROUTED, len(entries), ticket)

    def dead_letter(self, message: Message, queue: Queue, reason: DeadLetterReason) -> bool:
        """Re-publish a message that left `queue` unacked, through its dead-letter exchange.

        Returns whether it reached a queue (RabbitMQ drops it silently otherwise).
        """
        exchange = self.exchanges.get(queue.args.dead_letter_exchange or "")
        if exchange is None or queue.args.dead_letter_exchange is None:
            return False
        routing_key = queue.args.dead_letter_routing_key or message.routing_key
        annotations = death_annotations(message, queue.name, reason.value)
        dead = message.with_route(exchange.name, routing_key, annotations)
        targets = [
            q
            for q in self._route(exchange, dead)
            if not is_cycle(annotations, q.name, reason.value)
        ]
        if not targets:
            return False
        return self._deliver(dead, targets).queues > 0


def _same_queue(
    queue: Queue, durable: bool, auto_delete: bool, exclusive: bool, arguments: Mapping[str, Any]
) -> bool:
    """Whether a redeclaration matches an existing queue (RabbitMQ answers 406 if not)."""
    return (
        durable == queue.durable
        and auto_delete == queue.auto_delete
        and exclusive == (queue.owner is not None)
        and QueueArguments.parse(arguments, queue.name, queue.vhost.name) == queue.args
    )
