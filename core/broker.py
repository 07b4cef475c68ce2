"""The broker: one Trio nursery holding the store, the kernel's services and the listeners.

Lifecycle (`run`):
1. open the store (recovering after a crash) and rebuild virtual hosts, durable exchanges,
   queues, bindings, users and un-acked messages from it;
2. start the kernel's services (timers, memory monitor) and plugins' services;
3. start every enabled protocol's listeners and report `started`;
4. on `stop()`: stop accepting, ask every connection to close, give them
   `broker.graceful_timeout` seconds, cancel what is left, run shutdown hooks, close the store.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from herald.core import definitions
from herald.core.any_protocol import serve_any_port
from herald.core.auth import DEFAULT_EXCHANGE_ALIAS, AccessControl
from herald.core.connection_deadlines import ConnectionDeadlines
from herald.core.connections import CloseReason, ConnectionRegistry
from herald.core.definitions import Definitions
from herald.core.errors import AccessRefused, ConfigError, NotAllowed, PreconditionFailed
from herald.core.flow import Alarms, MemoryMonitor, total_memory
from herald.core.message import CodecRegistry
from herald.core.queue_services import QueueServices
from herald.core.queue_types import QueueTypes
from herald.core.timers import Timers
from herald.core.tls import server_context
from herald.core.vhost import VirtualHost

if TYPE_CHECKING:
    from herald.core.adapter import ConnectionServer
    from herald.core.auth import User
    from herald.core.config import HeraldConfig
    from herald.core.plugin_types import Listener
    from herald.core.plugins import Plugins
    from herald.core.store import Store

log = logging.getLogger(__name__)

GC_YOUNG_THRESHOLD = 10_000
"""The collector's first threshold while a broker runs (CPython's default is 700).

A swapped queue loads its next 1,000 entries at once (a message and an entry each); at 700 the
collector ran four times per batch, walking the batch and promoting it, for about 1 µs per
message read back, yet almost nothing a broker makes is cyclic garbage: entries die by
reference counting when acked. At 10,000 a batch never triggers a collection, and the young
generation stays small enough that a collection costs well under a millisecond."""

_gc_users = 0
_gc_saved: tuple[int, int, int] | None = None


@contextlib.contextmanager
def tuned_gc() -> Iterator[None]:
    """Tune CPython's collector for a running broker; the last broker to stop restores it.

    What exists once the broker has recovered (modules, plugins, definitions, recovered
    queues) lives as long as the broker, so it is frozen: full collections no longer walk
    it. `gc.unfreeze` at the end hands it back to the collector (an embedding process's own
    garbage frozen meanwhile is collectable again).
    """
    global _gc_users, _gc_saved
    if _gc_users == 0:
        _gc_saved = gc.get_threshold()
        young, middle, old = _gc_saved
        gc.set_threshold(max(young, GC_YOUNG_THRESHOLD), middle, old)
    _gc_users += 1
    gc.freeze()
    try:
        yield
    finally:
        _gc_users -= 1
        if _gc_users == 0:
            gc.unfreeze()
            if _gc_saved is not None:
                gc.set_threshold(*_gc_saved)


class Broker:
    """A herald broker. Construct, then `await nursery.start(broker.run)`; `stop()` ends it."""

    def __init__(
        self,
        config: HeraldConfig | None = None,
        plugins: Plugins | None = None,
        *,
        store: Store | None = None,
    ) -> None:
        from herald.core.config import load_config
        from herald.core.plugins import get_plugin_manager

        self.plugins = plugins if plugins is not None else get_plugin_manager()
        self.config = (
            config
            if config is not None
            else load_config(plugin_sections=self.plugins.config_sections())
        )
        self.plugins.configure(self.config)
        self.interceptors = self.plugins
        self.codecs = CodecRegistry(converter=self.plugins.converter)
        for codec in self.plugins.message_codecs():
            self.codecs.register(codec)
        self.store: Store = store if store is not None else self._make_store()
        self.definitions = Definitions(self.store)
        self.timers = Timers()
        self.connection_deadlines = ConnectionDeadlines(self.timers)
        self.protocol_servers: dict[str, ConnectionServer] = {}
        """The running protocols' connection servers, by protocol (core/serving.py)."""
        self.alarms = Alarms()
        self.memory = MemoryMonitor(
            self.alarms,
            self.config.memory.high_watermark_bytes(total_memory()),
            interval=self.config.memory.check_interval,
            paging_ratio=self.config.memory.paging_ratio,
            on_paging=self.page_out,
        )
        # What every queue is given (core/queue_services.py), and the types it is made by.
        self.queue_services = QueueServices(
            store=self.store,
            timers=self.timers,
            memory=self.memory,
            policy=self.config.queues,
            interceptors=self.interceptors,
            allocate_store_id=self.definitions.allocate_queue_id,
        )
        self.queue_types = QueueTypes(self.plugins.queue_types())
        self.tls_context = server_context(self.config.tls)  # None until [tls] has a certificate
        self.users = AccessControl(
            loopback_users=self.config.auth.loopback_users,
            on_change=self.store.put_metadata,
        )
        self.vhosts: dict[str, VirtualHost] = {}
        self.connections = ConnectionRegistry(self)
        self.listeners: list[Listener] = []
        self._stop = trio.Event()
        self._stop_reason: CloseReason = "broker shutting down"
        self._stopped = trio.Event()

    def _make_store(self) -> Store:
        backends = self.plugins.storage_backends()
        name = self.config.store.backend
        backend = backends.get(name)
        if backend is None:
            known = ", ".join(sorted(backends)) or "none"
            raise ConfigError(f"config: store.backend: unknown store {name!r} (installed: {known})")
        section = self.config.plugins.get(name)
        return backend.factory(section, self.config.broker.data_dir)

    # -- virtual hosts ---------------------------------------------------------------------
    @property
    def default_vhost(self) -> VirtualHost:
        return self.vhost(self.config.broker.default_vhost)

    def vhost(self, name: str) -> VirtualHost:
        try:
            return self.vhosts[name]
        except KeyError:
            raise NotAllowed(f"vhost '{name}' not found") from None

    def add_vhost(self, name: str) -> VirtualHost:
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VirtualHost(self, name)
            self.definitions.save_vhost(name)
        return vhost

    def delete_vhost(self, name: str) -> None:
        vhost = self.vhosts.get(name)
        if vhost is None:
            raise NotAllowed(f"vhost '{name}' not found")
        if name == self.config.broker.default_vhost:
            raise PreconditionFailed(f"cannot delete the default vhost '{name}'")
        for connection in self.connections:
            if connection.vhost == name:
                connection.close(f"vhost '{name}' deleted")
        for queue in list(vhost.queues):
            vhost.delete_queue(queue, owner=vhost.queues[queue].owner)
        for exchange in [e for e in vhost.exchanges.values() if e.durable]:
            self.definitions.delete_exchange(name, exchange)
        del self.vhosts[name]
        self.definitions.delete_vhost(name)

    # -- security --------------------------------------------------------------------------
    async def authenticate(
        self, username: str, password: str | bytes, peer_host: str | None, mechanism: str = "PLAIN"
    ) -> User:
        """Plugins' backends first, then the built-in users; raises AccessRefused. A password
        that is not UTF-8 is never shown to the backends (they take text) and fails against
        the built-in users like any wrong password."""
        text: str | None
        if isinstance(password, bytes):
            try:
                text = password.decode()
            except UnicodeDecodeError:
                text = None
        else:
            text = password
        if text is not None:
            user = self.plugins.authenticate(username, text, peer_host or "")
            if user is not None:
                return user
        return await self.users.authenticate(username, password, peer_host, mechanism=mechanism)

    def authorize(
        self, user: User, vhost: str, permission: Any, resource_kind: str, resource_name: str
    ) -> None:
        """Raise AccessRefused unless `user` may do `permission` on the resource."""
        authorize(self.plugins, self.users, user, vhost, permission, resource_kind, resource_name)

    def page_out(self) -> int:
        """Memory is short: every queue swaps out its backlog past its tail buffer, paging
        transient messages to the store (core/swap.py). Returns the entries swapped out."""
        swapped = 0
        for vhost in list(self.vhosts.values()):
            for queue in list(vhost.queues.values()):
                swapped += queue.swap.page_out()
        if swapped:
            log.info("memory is short: swapped %d message(s) out to the store", swapped)
        return swapped

    # -- lifecycle -------------------------------------------------------------------------
    def stop(self, reason: CloseReason = "broker shutting down") -> None:
        """Ask the broker to shut down gracefully. Idempotent; never blocks. `reason` is what
        connections are closed with: a `NotMaster` at a cluster node's demotion, so each
        client is told where the master went."""
        if not self._stop.is_set():
            self._stop_reason = reason
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """`stop()` was called: the broker is closing connections or has stopped (readiness
        probes fail from here on, so load balancers stop sending clients)."""
        return self._stop.is_set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def run(self, *, task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED) -> None:
        await self.store.open(self.codecs)
        try:
            self._recover(self.store.load_metadata())
            with tuned_gc():
                await self._run_services(task_status)
        finally:
            with trio.CancelScope(shield=True):
                try:
                    self.plugins.shutdown(self)
                finally:
                    await self.store.close()
                    self._stopped.set()
                    log.info("herald stopped")

    async def _run_services(self, task_status: trio.TaskStatus[Broker]) -> None:
        async with trio.open_nursery() as services:
            await services.start(self.timers.run)
            await services.start(self.memory.run)
            await services.start(self.connections.watch_alarms, self.alarms)
            for service in self.plugins.services(self):
                await services.start(service.run, self)
            await self._serve(task_status)
            services.cancel_scope.cancel()

    async def _serve(self, task_status: trio.TaskStatus[Broker]) -> None:
        enabled = self.config.broker.plugins
        async with trio.open_nursery() as listeners:
            for spec in self.plugins.protocols(enabled):
                section = self.config.plugins.get(spec.name)
                bound = await listeners.start(spec.serve, self, section)
                self.listeners.extend(bound)
            broker_section = self.config.broker
            for tls, port in (
                (False, broker_section.any_port),
                (True, broker_section.any_tls_port),
            ):
                if port is not None:
                    any_port = partial(serve_any_port, self, tls=tls)
                    self.listeners.extend(await listeners.start(any_port))
            task_status.started(self)
            await self._stop.wait()
            log.info("herald stopping: closing %d connection(s)", len(self.connections))
            await self.connections.close_all(self._stop_reason, self.config.broker.graceful_timeout)
            listeners.cancel_scope.cancel()

    def _recover(self, metadata: Mapping[str, Mapping[str, Any]]) -> None:
        self.definitions.load_sequence(metadata)
        for name in metadata.get(definitions.VHOST, {}):
            self.vhosts[name] = VirtualHost(self, name)
        self.add_vhost(self.config.broker.default_vhost)
        self.users.load_metadata(metadata)
        auth = self.config.auth
        self.users.ensure_default_user(
            auth.default_user, auth.default_password, vhost=self.config.broker.default_vhost
        )
        recovered = 0
        range_size = self.config.queues.swap_range_size
        durable = definitions.restore(self.vhosts, metadata)
        # What no durable queue owns (paged transient messages, under scratch ids) is gone.
        kept = {queue.store_id for queue in durable}
        for queue_id in self.store.queue_ids():
            if queue_id not in kept:
                self.store.delete_queue(queue_id)
        for queue in durable:
            assert queue.store_id is not None
            if not queue.restores_entries:
                pass  # its type brings its messages back itself (a shared queue's slots)
            elif queue.swaps:  # ranges only: no message is read until a consumer needs it
                for stored_range in self.store.queue_ranges(queue.store_id, range_size):
                    queue.swap.restore_range(stored_range)
                    recovered += stored_range.count
            else:
                for stored in self.store.recover_queue(queue.store_id):
                    queue.swap.restore(stored)
                    recovered += 1
            # Offsets only grow, even past messages acked before the restart.
            queue.next_offset = max(queue.next_offset, self.store.queue_next_offset(queue.store_id))
        if recovered:
            log.info("recovered %d message(s) from the store", recovered)


def authorize(
    plugins: Plugins,
    users: AccessControl,
    user: User,
    vhost: str,
    permission: Any,
    resource_kind: str,
    resource_name: str,
) -> None:
    """AccessRefused unless a plugin (`herald_authorize`) or, when no plugin decides, the
    users' permissions allow `permission` on the resource: the broker's rule, also used by
    a slave's read-only management API, which has users but no broker."""
    verdict = plugins.authorize(user, vhost, str(permission), resource_kind, resource_name)
    if verdict is True:
        return
    if verdict is False:
        if resource_kind == "exchange" and not resource_name:
            resource_name = DEFAULT_EXCHANGE_ALIAS
        raise AccessRefused(
            f"access to {resource_kind} '{resource_name}' in vhost '{vhost}'"
            f" refused for user '{user.name}'"
        )
    users.authorize(user, vhost, permission, resource_kind, resource_name)
