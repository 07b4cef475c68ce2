"""The queue types a broker knows, by `x-queue-type` name (hook `herald_queue_types`).

There is no list of types in the kernel: the built-in `classic` and `quorum` types come from
the kernel's own plugin (core/queue_plugin.py) through the same hook as any other plugin's.
A declaration is checked against the chosen type here, with RabbitMQ's 406 wording.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from herald.core.errors import PreconditionFailed

if TYPE_CHECKING:
    from herald.core.plugin_types import QueueType
    from herald.core.queue_args import QueueArguments
    from herald.core.queue_services import QueueServices

__all__ = ["QueueTypes"]


class QueueTypes:
    """Queue types by name. Built once by the broker from the plugins' declarations."""

    def __init__(self, types: Iterable[QueueType]) -> None:
        self._types: dict[str, QueueType] = {t.name: t for t in types}

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._types)

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def available(self, name: str, services: QueueServices) -> bool:
        """Whether a queue of type `name` can be made on this broker now."""
        queue_type = self._types.get(name)
        if queue_type is None:
            return False
        return queue_type.available is None or queue_type.available(services)

    def resolve(
        self, args: QueueArguments, arguments: Mapping[str, Any], queue: str, vhost: str
    ) -> QueueType:
        """The type a declaration asks for (`args.queue_type`), once its arguments are
        checked against it.

        :raises PreconditionFailed: 406, naming the argument: an unknown type, or an argument
            the type refuses.
        """
        queue_type = self._types.get(args.queue_type)
        if queue_type is None:
            raise _invalid(queue, vhost, "x-queue-type", args.queue_type, "unsupported queue type")
        for name in queue_type.refused_arguments:
            if name in arguments:
                why = f"not supported by queue type '{queue_type.name}'"
                raise _invalid(queue, vhost, name, arguments[name], why)
        return queue_type


def _invalid(queue: str, vhost: str, name: str, value: Any, why: str) -> PreconditionFailed:
    return PreconditionFailed(
        f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': {why} ({value!r})"
    )
