"""MQTT sessions by client id: which connection has each, and what outlives the connection.

A session (MQTT 5.0 section 4.1) is the state a client id keeps across connections: its
subscriptions, the packet ids of messages in flight in either direction, and its queue. The
queue itself is a kernel queue ("mqtt-subscription-<client id>", durable when the session
outlives its connection), so the messages it holds survive like any durable queue's. The
subscriptions are saved in the store's metadata (kind "mqtt.session"), so after a broker
restart a returning client finds its session, bindings and queued messages again. Packet ids
in flight are kept in memory only: after a restart, unacknowledged messages come back from
the queue and are sent again with new ids.

A session that is not connected expires after its Session Expiry Interval (one timer on the
kernel's `Timers`); at expiry its queue and record are deleted.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Set
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import attrs

from herald.plugins.mqtt.config import SESSION_NEVER_EXPIRES
from herald.plugins.mqtt.subscriptions import Subscription, SubscriptionSet

if TYPE_CHECKING:
    from herald.core.timers import TimerHandle
    from herald.plugins.mqtt.codec import Will
    from herald.plugins.mqtt.context import MQTTContext

log = logging.getLogger(__name__)

KIND: Final = "mqtt.session"
QUEUE_PREFIX: Final = "mqtt-subscription-"
SHARED_QUEUE_PREFIX: Final = "mqtt-shared-"
NO_IDS: frozenset[int] = frozenset()
"""The packet id sets of `SessionState` (and `Outbound`) until their first id: most sessions
never use QoS 2. Changed only through `with_id` and `discard_id`."""


def queue_name(client_id: str) -> str:
    return QUEUE_PREFIX + client_id


def shared_queue_name(group: str, binding_key: str) -> str:
    """One kernel queue per (share group, filter), consumed by every member."""
    return f"{SHARED_QUEUE_PREFIX}{group}-{binding_key}"


@attrs.define(slots=True, eq=False)
class SessionState:
    """What a client id keeps between connections."""

    client_id: str
    expiry: int
    """The granted Session Expiry Interval, seconds: 0 ends the session with its connection,
    SESSION_NEVER_EXPIRES never ends it."""
    subscriptions: SubscriptionSet = attrs.field(factory=SubscriptionSet)
    pending_ids: dict[tuple[str, int], int] = attrs.field(factory=dict)
    """Packet ids of deliveries the client had not acked, by (queue name, queue offset):
    a redelivery after reconnecting reuses the original id (MQTT 3.1.1 section 4.4)."""
    awaiting_pubcomp: Set[int] = NO_IDS
    """Outbound QoS 2 ids whose PUBREL was sent: resent on reconnect until PUBCOMP. Changed
    only by `pubrel_sent` and `pubcomp_received` (read-only here: it may be the shared
    empty set)."""
    inbound_qos2: Set[int] = NO_IDS
    """Inbound QoS 2 ids routed and PUBREC'd, waiting for PUBREL: a resent PUBLISH with one of
    these ids is not routed again (exactly once). Changed only by `qos2_routed` and
    `qos2_released`."""
    live: Any = None
    """The connected `Session`, or None."""
    disconnected_at: float | None = None
    expiry_timer: TimerHandle | None = None
    pending_will: Will | None = None
    """A will waiting for its delay (MQTT 5 Will Delay Interval) to pass."""
    will_timer: TimerHandle | None = None

    def pubrel_sent(self, packet_id: int) -> None:
        self.awaiting_pubcomp = with_id(self.awaiting_pubcomp, packet_id)

    def pubcomp_received(self, packet_id: int) -> None:
        discard_id(self.awaiting_pubcomp, packet_id)

    def qos2_routed(self, packet_id: int) -> None:
        self.inbound_qos2 = with_id(self.inbound_qos2, packet_id)

    def qos2_released(self, packet_id: int) -> None:
        discard_id(self.inbound_qos2, packet_id)

    @property
    def persistent(self) -> bool:
        return self.expiry > 0

    @property
    def queue_name(self) -> str:
        return queue_name(self.client_id)

    def to_json(self, vhost: str) -> dict[str, Any]:
        return {
            "vhost": vhost,
            "client_id": self.client_id,
            "expiry": self.expiry,
            "subscriptions": [s.to_json() for s in self.subscriptions],
            "disconnected_at": self.disconnected_at,
        }


def with_id(ids: Set[int], packet_id: int) -> set[int]:
    """`ids` with `packet_id` added: a set of its own in place of the shared empty one."""
    owned = ids if isinstance(ids, set) else set(ids)
    owned.add(packet_id)
    return owned


def discard_id(ids: Set[int], packet_id: int) -> None:
    if isinstance(ids, set):
        ids.discard(packet_id)


class SessionRegistry:
    """Every session of one MQTT listener set (one virtual host)."""

    def __init__(self, context: MQTTContext) -> None:
        self.context = context
        self.states: dict[str, SessionState] = {}

    def __len__(self) -> int:
        return len(self.states)

    def get(self, client_id: str) -> SessionState | None:
        return self.states.get(client_id)

    def load(self, metadata: Mapping[str, Mapping[str, Any]]) -> None:
        """Read back the persistent sessions (broker start); start their expiry clocks."""
        vhost = self.context.vhost_name
        now = time.time()
        for key, record in metadata.get(KIND, {}).items():
            if record.get("vhost") != vhost:
                continue
            try:
                state = SessionState(
                    record["client_id"],
                    record["expiry"],
                    SubscriptionSet(
                        {s["filter"]: Subscription.from_json(s) for s in record["subscriptions"]}
                    ),
                    disconnected_at=record.get("disconnected_at") or now,
                )
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("ignoring unreadable MQTT session %r: %s", key, exc)
                continue
            self.states[state.client_id] = state
            self.context.count_no_local(state.subscriptions, +1)
            assert state.disconnected_at is not None
            self._start_expiry(state, max(state.disconnected_at + state.expiry - now, 0))

    def open(self, client_id: str, *, clean: bool, expiry: int) -> tuple[SessionState, bool]:
        """The state a CONNECT gets, and whether an old session was resumed ("session present").

        The caller has already taken the session from any connection that had it.
        """
        state = self.states.get(client_id)
        if state is not None and clean:
            self.discard(state)
            state = None
        present = state is not None
        if state is None:
            state = self.states[client_id] = SessionState(client_id, expiry)
        else:
            if state.expiry_timer is not None:
                state.expiry_timer.cancel()
                state.expiry_timer = None
            state.expiry = expiry
        state.disconnected_at = None
        return state, present

    def save(self, state: SessionState) -> int | None:
        """Write a persistent session's record (a transient one has none); returns the ticket."""
        if not state.persistent:
            return None
        return self.context.store.put_metadata(
            KIND, self._key(state), state.to_json(self.context.vhost_name)
        )

    def closed(self, state: SessionState) -> None:
        """The session's connection ended: keep the session until it expires, or end it."""
        state.live = None
        if not state.persistent:
            self.discard(state)
            return
        state.disconnected_at = time.time()
        self.save(state)
        self._start_expiry(state, state.expiry)

    def discard(self, state: SessionState) -> None:
        """End a session: its queue, record and subscriptions go."""
        if self.states.get(state.client_id) is state:
            del self.states[state.client_id]
        if state.expiry_timer is not None:
            state.expiry_timer.cancel()
            state.expiry_timer = None
        context = self.context
        context.fire_will(state)
        context.count_no_local(state.subscriptions, -1)
        vhost = context.vhost
        queue = vhost.queues.get(state.queue_name)
        if queue is not None and queue.owner is None:
            vhost.delete_queue(state.queue_name)
        context.store.put_metadata(KIND, self._key(state), None)

    def _start_expiry(self, state: SessionState, delay: float) -> None:
        if state.expiry >= SESSION_NEVER_EXPIRES:
            return
        timers = self.context.broker.timers
        state.expiry_timer = timers.call_later(delay, partial(self._expire, state))

    def _expire(self, state: SessionState) -> None:
        state.expiry_timer = None
        if state.live is None and self.states.get(state.client_id) is state:
            log.info("MQTT session %r expired", state.client_id)
            self.discard(state)

    def _key(self, state: SessionState) -> str:
        return json.dumps([self.context.vhost_name, state.client_id], ensure_ascii=False)
