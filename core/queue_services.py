"""What a queue is given when it is made: its declaration, the kernel's services, its owner.

A queue reaches nothing through its virtual host's broker (STYLE.md: no `a.b.c.d` chains).
The broker builds one `QueueServices` when it starts and every virtual host hands that same
object to each queue it makes; the queue reads what it needs from it once, at construction,
so the hot path pays no more attribute lookups than before. What the queue calls back into
(deleting itself, dead-lettering) is its owner, the `QueueOwner` protocol a `VirtualHost`
implements.

These three are what a queue type's factory receives (hook `herald_queue_types`): a queue
type of another plugin (a queue shared by cluster nodes, say) is built from exactly the same
services as the built-in classic queue.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from herald.core.queue_args import QueueArguments

if TYPE_CHECKING:
    from herald.core.config import QueuesSection
    from herald.core.flow import MemoryMonitor
    from herald.core.message import Message
    from herald.core.plugins import QueueInterceptor
    from herald.core.queue import Queue
    from herald.core.queue_entry import DeadLetterReason
    from herald.core.store import Store
    from herald.core.timers import Timers

__all__ = ["QueueDeclaration", "QueueInterceptors", "QueueOwner", "QueueServices"]


class QueueInterceptors(Protocol):
    """The interceptor hooks a queue calls (`Plugins` is one): each is None while no plugin
    implements it, so delivering and acking pay one `is not None` test. Read at each call,
    not copied, so a plugin registered later is seen."""

    @property
    def on_deliver(self) -> QueueInterceptor | None: ...

    @property
    def on_ack(self) -> QueueInterceptor | None: ...


@attrs.frozen
class QueueServices:
    """The kernel services every queue of a broker shares. Built once, by the broker."""

    store: Store
    """Appends, acks, delivery counts and reads of swapped ranges."""
    timers: Timers
    """Message TTLs, x-expires, and retries of failed reads."""
    memory: MemoryMonitor
    """Whether memory is short (`paging`): transient messages are then paged out."""
    policy: QueuesSection
    """The `[queues]` config: swapping, tail buffer, range size, load batch."""
    interceptors: QueueInterceptors
    """`on_deliver` / `on_ack` hooks."""
    allocate_store_id: Callable[[], int]
    """A new store queue id, never reused (a queue's scratch id when it first pages)."""


@attrs.frozen
class QueueDeclaration:
    """A queue as declared: what a queue type's factory makes a queue from.

    `args` are the `x-` arguments as parsed and checked (`QueueArguments.parse`), `arguments`
    the table as the client sent it (kept for redeclarations and the management API).
    `owner` is the connection of an exclusive queue (None otherwise); `store_id` the store
    queue id of a durable queue (None for a transient one).
    """

    name: str
    durable: bool = False
    auto_delete: bool = False
    owner: Hashable | None = None
    arguments: Mapping[str, Any] = attrs.field(factory=dict)
    args: QueueArguments = attrs.field(factory=QueueArguments)
    store_id: int | None = None

    @property
    def queue_type(self) -> str:
        """The declared `x-queue-type` ("classic" when none was given)."""
        return self.args.queue_type


class QueueOwner(Protocol):
    """What a queue calls back into: the virtual host that holds it."""

    @property
    def name(self) -> str:
        """The virtual host's name (errors, logs, interceptors)."""
        ...

    def delete_queue(
        self,
        name: str,
        *,
        if_unused: bool = False,
        if_empty: bool = False,
        owner: Hashable | None = None,
    ) -> int:
        """Delete the queue `name` (auto-delete, x-expires); returns the messages dropped."""
        ...

    def dead_letter(self, message: Message, queue: Queue, reason: DeadLetterReason) -> bool:
        """Re-publish `message`, which left `queue` unacked, through the queue's dead-letter
        exchange; whether it reached a queue."""
        ...
