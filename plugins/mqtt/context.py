"""What every MQTT connection of one broker shares, and the one way MQTT messages enter the kernel.

`MQTTContext` is made by the plugin's `serve`, once per broker: the config, the session
registry, the retained messages, and `publish`, used for clients' PUBLISHes and for wills
alike. A publish becomes one kernel `Message` of protocol "mqtt" (stored form in
`message_codec`) on the configured topic exchange, with the topic as routing key
("a/b" -> "a.b"). Retained messages for a new subscription go to the subscriber's own queue
through the default exchange, marked with kernel annotations, so they get the same flow
control, acknowledgement and redelivery as any other message.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import TYPE_CHECKING, Final

import attrs

from herald.core.errors import ConfigError, KernelError
from herald.core.message import Message
from herald.core.vhost import PublishResult
from herald.plugins.mqtt.codec import NO_PROPERTIES, Properties
from herald.plugins.mqtt.message_codec import (
    PROTOCOL,
    Routing,
    StoredPublish,
    message_properties,
    pack,
    routing_key,
)
from herald.plugins.mqtt.registry import SessionRegistry, SessionState
from herald.plugins.mqtt.retained import RetainedMessage, RetainedStore
from herald.plugins.mqtt.subscriptions import SubscriptionSet

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.core.vhost import VirtualHost
    from herald.plugins.mqtt.codec import Will
    from herald.plugins.mqtt.config import MQTTConfig

log = logging.getLogger(__name__)
_new_tuple = tuple.__new__

PUBLISHER_KEY: Final = "x-mqtt-client-id"
"""Annotation: the publishing client id, for no-local subscriptions (set only while any exist)."""
TOPIC_KEY: Final = "x-mqtt-topic"
"""Annotation: the topic of a retained message sent to one queue through the default exchange."""
RETAINED_KEY: Final = "x-mqtt-retained"
"""Annotation: the message is a retained message sent because of a new subscription."""


class MQTTContext:
    """The MQTT plugin's state for one broker."""

    def __init__(self, broker: Broker, config: MQTTConfig) -> None:
        self.broker = broker
        self.config = config
        self.vhost_name = config.vhost
        self.store = broker.store
        self.codecs = broker.codecs
        persisted = broker.store if config.retain_store == "metadata" else None
        self.retained = RetainedStore(config.vhost, persisted)
        self.sessions = SessionRegistry(self)
        self.no_local_subscriptions = 0
        self.routing: Routing | None = None
        """The message `publish` is routing, for the deliveries made meanwhile (outbound.py)."""

    def start(self) -> None:
        """Check the config against the broker and read back retained messages and sessions."""
        if self.vhost_name not in self.broker.vhosts:
            raise ConfigError(f"mqtt.vhost: virtual host {self.vhost_name!r} does not exist")
        exchange = self.vhost.exchanges.get(self.config.exchange)
        if exchange is None or exchange.type != "topic":
            raise ConfigError(
                f"mqtt.exchange: {self.config.exchange!r} is not a topic exchange"
                f" in vhost {self.vhost_name!r}"
            )
        metadata = self.store.load_metadata()
        if self.config.retain_store == "metadata":
            self.retained.load(metadata)
        self.sessions.load(metadata)

    @property
    def vhost(self) -> VirtualHost:
        return self.broker.vhost(self.vhost_name)

    @property
    def retain_available(self) -> bool:
        return self.config.retain_store != "none"

    def count_no_local(self, subscriptions: SubscriptionSet, sign: int) -> None:
        self.no_local_subscriptions += sign * sum(1 for s in subscriptions if s.no_local)

    # -- into the kernel ---------------------------------------------------------------------
    def publish(
        self,
        client_id: str,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        properties: Properties,
    ) -> tuple[PublishResult, int | None]:
        """Route one PUBLISH (and retain it); returns the result and the ticket to wait for.

        Raises KernelError if the kernel refuses it (e.g. the exchange is gone).
        """
        if properties is NO_PROPERTIES:  # the usual case (all of MQTT 3.1.1): nothing to map
            headers = expiry = None
        else:
            properties = message_properties(properties)
            expiry = properties.message_expiry_interval
            headers = dict(properties.user_properties) if properties.user_properties else None
        # Positional arguments, the stored form's tuple without NamedTuple.__new__, the vhost
        # by dict: this runs once per PUBLISH.
        message = Message(
            PROTOCOL,
            pack(qos, retain, properties, payload),
            self.config.exchange,
            routing_key(topic),
            len(payload),
            headers,
            qos > 0,
            0,
            expiry * 1000 if expiry is not None else None,
            None,
            time.time(),
            {PUBLISHER_KEY: client_id} if self.no_local_subscriptions else None,
        )
        vhost = self.broker.vhosts.get(self.vhost_name)
        if vhost is None:
            vhost = self.vhost  # raises NotAllowed, as before
        outer = self.routing  # restored after: publishing may nest
        stored = _new_tuple(StoredPublish, (qos, retain, properties, payload))
        self.routing = Routing(message, stored)
        try:
            result = vhost.publish(message)
        finally:
            self.routing = outer
        ticket = result.ticket
        if retain and self.retain_available:
            expires_at = time.time() + expiry if expiry is not None else None
            retained = RetainedMessage(topic, payload, qos, properties, expires_at)
            retained_ticket = self.retained.put(retained)
            if retained_ticket is not None:
                ticket = max(ticket or 0, retained_ticket)
        return result, ticket

    def send_retained(self, queue_name: str, messages: list[RetainedMessage]) -> None:
        """Put retained messages into one subscriber's queue, in order."""
        vhost = self.vhost
        now = time.time()
        for retained in messages:
            message = Message(
                PROTOCOL,
                pack(retained.qos, True, retained.properties, retained.payload),
                "",
                queue_name,
                len(retained.payload),
                persistent=retained.qos > 0,
                expiration_ms=retained.remaining_ms(now),
                annotations={TOPIC_KEY: retained.topic, RETAINED_KEY: True},
            )
            vhost.publish(message)

    # -- wills -------------------------------------------------------------------------------
    def schedule_will(self, state: SessionState, will: Will, delay: float) -> None:
        """Publish `will` after `delay` seconds, unless the session is resumed before then."""
        self.cancel_will(state)
        state.pending_will = will
        if delay <= 0:
            self.fire_will(state)
        else:
            state.will_timer = self.broker.timers.call_later(delay, partial(self.fire_will, state))

    def cancel_will(self, state: SessionState) -> None:
        if state.will_timer is not None:
            state.will_timer.cancel()
            state.will_timer = None
        state.pending_will = None

    def fire_will(self, state: SessionState) -> None:
        """Publish the session's pending will now (its delay passed, or the session ended)."""
        will = state.pending_will
        self.cancel_will(state)
        if will is None:
            return
        properties = will.properties
        if properties.will_delay_interval is not None:
            properties = attrs.evolve(properties, will_delay_interval=None)
        try:
            self.publish(
                state.client_id, will.topic, will.payload, will.qos, will.retain, properties
            )
        except KernelError as exc:
            log.warning("will of MQTT client %r not published: %s", state.client_id, exc)
        else:
            log.debug("published the will of MQTT client %r to %r", state.client_id, will.topic)
