"""A virtual host's bindings as a whole: the graph between its exchanges and destinations.

Each exchange keeps its own bindings, indexed for routing (core/exchange.py). What spans
exchanges is kept here, apart from the virtual host's names, declarations and publish path:

- which exchanges are bound to each destination, so that deleting a queue or an exchange
  removes every binding to it without scanning every exchange;
- how many exchange-to-exchange bindings there are, so that a publish follows them only
  when there are some;
- durable bindings (both ends durable) saved to and deleted from the metadata;
- an auto-delete exchange deleted with its last binding, as in RabbitMQ;
- a queue told of each binding made or removed to it (`Queue.binding_changed`: a shared
  queue makes its bindings cluster-wide).

The `VirtualHost` resolves names (with their 403 / 404 answers) and hands this the objects.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any, cast

from herald.core.exchange import Exchange

if TYPE_CHECKING:
    from herald.core.queue import Queue
    from herald.core.vhost import VirtualHost

__all__ = ["Bindings"]


class Bindings:
    """The bindings of one virtual host, held by it as `vhost.bindings`."""

    __slots__ = ("_metadata", "_sources", "_vhost", "exchange_to_exchange")

    def __init__(self, vhost: VirtualHost) -> None:
        self._vhost = vhost
        self._metadata = vhost.metadata
        self._sources: dict[Hashable, set[Exchange]] = {}  # destination -> exchanges bound to it
        self.exchange_to_exchange = 0
        """How many exchange-to-exchange bindings there are: a publish reads it every time."""

    def add(
        self,
        source: Exchange,
        destination: Queue | Exchange,
        routing_key: str,
        arguments: Mapping[str, Any] | None,
    ) -> None:
        """Bind `destination` to `source`; binding again what is bound changes nothing."""
        arguments = dict(arguments or {})
        if not source.bind(destination, routing_key, arguments):
            return
        self._sources.setdefault(destination, set()).add(source)
        if isinstance(destination, Exchange):
            self.exchange_to_exchange += 1
        else:
            destination.binding_changed(source, routing_key, arguments, bound=True)
        if source.durable and destination.durable:
            self._metadata.save_binding(
                self._vhost.name, source, destination, routing_key, arguments
            )

    def remove(
        self,
        source: Exchange,
        destination: Queue | Exchange,
        routing_key: str,
        arguments: Mapping[str, Any],
    ) -> None:
        """Unbind (a binding that is not there is no error); an auto-delete `source` that
        loses its last binding is deleted."""
        if not source.unbind(destination, routing_key, arguments):
            return
        if isinstance(destination, Exchange):
            self.exchange_to_exchange -= 1
        else:
            destination.binding_changed(source, routing_key, arguments, bound=False)
        if not source.is_bound(destination):
            sources = self._sources.get(destination)
            if sources is not None:
                sources.discard(source)
                if not sources:
                    del self._sources[destination]
        vhost = self._vhost
        if source.durable and destination.durable:
            self._metadata.delete_binding(vhost.name, source, destination, routing_key, arguments)
        if source.auto_delete and not source.has_bindings and source.name in vhost.exchanges:
            vhost.delete_exchange(source.name)

    def remove_all(self, node: Queue | Exchange) -> None:
        """`node` is being deleted: remove every binding to it, and from it if it is an
        exchange."""
        if isinstance(node, Exchange):
            for binding in list(node.bindings()):
                destination = cast("Queue | Exchange", binding.destination)  # what a vhost binds
                self.remove(node, destination, binding.routing_key, binding.arguments)
        for source in list(self._sources.get(node, ())):
            for binding in list(source.bindings()):
                if binding.destination is node:
                    self.remove(source, node, binding.routing_key, binding.arguments)
