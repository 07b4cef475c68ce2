"""Queue types come from the `herald_queue_types` hook: a plugin's type is made by its factory
when a queue is declared (or recovered) with its `x-queue-type`; the built-in `classic` and
`quorum` types are declared the same way, by the kernel's own plugin; an unknown type, or an
argument a type refuses, is a 406. Real kernels throughout (embedded broker, memory store)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from herald.core import hookimpl
from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.errors import PluginError, PreconditionFailed
from herald.core.plugin_types import QueueType
from herald.core.plugins import DEFAULT_PLUGINS, get_plugin_manager
from herald.core.queue import Queue
from herald.core.queue_services import QueueDeclaration, QueueOwner, QueueServices
from herald.storage.memory import MemoryStore, MemoryStoreData
from tests.sinks import RecordingSink, msg


class AuditedQueue(Queue):
    """A queue type of a test plugin: a classic queue that counts what it was given."""


class AuditedQueuePlugin:
    """Declares the `audited` queue type; its factory records every call."""

    def __init__(self) -> None:
        self.made: list[tuple[QueueOwner, QueueServices, QueueDeclaration]] = []

    def make(
        self, owner: QueueOwner, services: QueueServices, declaration: QueueDeclaration
    ) -> Queue:
        self.made.append((owner, services, declaration))
        return AuditedQueue(owner, services, declaration)

    @hookimpl
    def herald_queue_types(self) -> list[QueueType]:
        return [
            QueueType(
                "audited", "a classic queue, counted", self.make, ["x-max-priority", "x-expires"]
            )
        ]


@asynccontextmanager
async def kernel_with(
    tmp_path: Path, plugins: Iterable[object], data: MemoryStoreData | None = None
) -> AsyncIterator[Broker]:
    """A real broker without entry points: the kernel's own plugins plus `plugins`."""
    async with embedded(
        data_dir=tmp_path,
        plugins=[],
        load_entrypoints=False,
        extra_plugins=plugins,
        store=MemoryStore(data if data is not None else MemoryStoreData()),
    ) as broker:
        yield broker


async def test_a_plugins_queue_type_is_made_by_its_factory(tmp_path: Path) -> None:
    plugin = AuditedQueuePlugin()
    async with kernel_with(tmp_path, [plugin]) as broker:
        vhost = broker.default_vhost
        queue = vhost.declare_queue("q", arguments={"x-queue-type": "audited"})

        assert isinstance(queue, AuditedQueue)
        [(owner, services, declaration)] = plugin.made
        assert owner is vhost
        assert services is broker.queue_services  # the same services as every classic queue
        assert declaration.name == "q"
        assert declaration.queue_type == queue.queue_type == "audited"
        assert vhost.queues["q"] is queue

        # It is a working queue: routed to, consumed from.
        sink = RecordingSink(auto_ack=True)
        queue.add_consumer("c", sink, prefetch_count=10)
        vhost.publish(msg("hello", routing_key="q"))
        assert sink.bodies == [b"hello"]

        # A classic declaration does not reach the plugin's factory.
        classic = vhost.declare_queue("plain")
        assert type(classic) is Queue
        assert classic.queue_type == "classic"
        assert len(plugin.made) == 1


async def test_a_durable_queue_of_a_plugin_type_is_made_by_it_again_at_restart(
    tmp_path: Path,
) -> None:
    data = MemoryStoreData()
    first = AuditedQueuePlugin()
    async with kernel_with(tmp_path, [first], data) as broker:
        broker.default_vhost.declare_queue(
            "kept", durable=True, arguments={"x-queue-type": "audited"}
        )
        broker.default_vhost.publish(msg("stored", routing_key="kept", delivery_mode=2))

    again = AuditedQueuePlugin()
    async with kernel_with(tmp_path, [again], data) as broker:
        queue = broker.default_vhost.queues["kept"]
        assert isinstance(queue, AuditedQueue)
        [(_, _, declaration)] = again.made
        assert declaration.durable and declaration.store_id == queue.store_id
        assert queue.message_count == 1


async def test_an_unknown_queue_type_is_refused(tmp_path: Path) -> None:
    async with kernel_with(tmp_path, []) as broker:
        vhost = broker.default_vhost
        with pytest.raises(PreconditionFailed) as caught:
            vhost.declare_queue("q", arguments={"x-queue-type": "audited"})
        assert caught.value.reply_code == 406
        assert caught.value.reply_text == (
            "invalid arg 'x-queue-type' for queue 'q' in vhost '/': unsupported queue type"
            " ('audited')"
        )
        assert "q" not in vhost.queues


async def test_an_argument_the_type_refuses_is_a_406_naming_it(tmp_path: Path) -> None:
    plugin = AuditedQueuePlugin()
    async with kernel_with(tmp_path, [plugin]) as broker:
        vhost = broker.default_vhost
        arguments = {"x-queue-type": "audited", "x-max-priority": 5}
        with pytest.raises(PreconditionFailed) as caught:
            vhost.declare_queue("q", arguments=arguments)
        assert caught.value.reply_code == 406
        assert "'x-max-priority'" in caught.value.reply_text
        assert "not supported by queue type 'audited'" in caught.value.reply_text
        assert plugin.made == [] and "q" not in vhost.queues
        # The same argument is fine for a type that does not refuse it.
        vhost.declare_queue("p", arguments={"x-max-priority": 5})


async def test_the_builtin_types_come_from_the_kernels_own_plugin(tmp_path: Path) -> None:
    async with kernel_with(tmp_path, []) as broker:
        assert broker.queue_types.names == {"classic", "quorum"}
        vhost = broker.default_vhost
        quorum = vhost.declare_queue("qq", durable=True, arguments={"x-queue-type": "quorum"})
        assert quorum.queue_type == "quorum"  # served as a classic queue, reported as declared
        assert vhost.declare_queue("cq").queue_type == "classic"
        with pytest.raises(PreconditionFailed, match="inequivalent arg"):
            vhost.declare_queue("qq", durable=True, arguments={"x-queue-type": "classic"})

    plugins = get_plugin_manager(load_entrypoints=False)
    assert plugins.names() == list(DEFAULT_PLUGINS)
    assert {t.name for t in plugins.queue_types()} == {"classic", "quorum"}
    blocked = get_plugin_manager(load_entrypoints=False, blocked=list(DEFAULT_PLUGINS))
    assert blocked.queue_types() == []


def test_two_plugins_declaring_one_type_name_is_an_error() -> None:
    plugins = get_plugin_manager(load_entrypoints=False)
    plugins.register(AuditedQueuePlugin(), "one")
    plugins.register(AuditedQueuePlugin(), "two")
    with pytest.raises(PluginError, match=r"queue type 'audited' is declared more than once"):
        plugins.queue_types()


async def test_the_management_api_reports_the_declared_type(tmp_path: Path) -> None:
    from herald.plugins.management.shapes import queue_json

    async with kernel_with(tmp_path, [AuditedQueuePlugin()]) as broker:
        vhost = broker.default_vhost
        for name in ("classic", "quorum", "audited"):
            queue = vhost.declare_queue(name, arguments={"x-queue-type": name})
            assert queue_json(queue, broker, None)["type"] == name
