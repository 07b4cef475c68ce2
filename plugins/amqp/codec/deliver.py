"""basic.deliver without events: `AMQPConnection.send_deliver`, the outbound path that runs
once per delivered message, apart from the general `send`.

The method payload's consumer-tag part and exchange + routing-key part are cached (they repeat
delivery after delivery); whatever the cached parts cannot say takes `send(Delivery(...))`,
whose bytes and errors the fast path gives too (tests/amqp/test_fast_paths.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from herald.plugins.amqp.codec.events import Delivery
from herald.plugins.amqp.codec.frames import deliver_frames
from herald.plugins.amqp.codec.methods import BasicDeliver
from herald.plugins.amqp.codec.state import ConnectionState

if TYPE_CHECKING:
    from herald.core.codec_kit import Event

_DELIVER_CACHE = 256  # entries per basic.deliver part cache; cleared when full
_MAX_TAG = 1 << 64


class DeliverFastPath:
    """A base class of AMQPConnection rather than an object it calls, so a delivery costs no
    extra call; it reads the connection's state, body frame limit and output list."""

    _state: ConnectionState
    _max_body_frame: int
    _out: list[bytes]

    if TYPE_CHECKING:

        def send(self, event: Event) -> None: ...

    def __init__(self) -> None:
        # basic.deliver payload parts: by consumer tag, and by (exchange, routing key)
        self._deliver_prefixes: dict[str, bytes] = {}
        self._deliver_tails: dict[tuple[str, str], bytes] = {}

    def send_deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        raw_properties: bytes,
        body: bytes,
    ) -> None:
        """`send(Delivery(channel, BasicDeliver(...), raw_properties, body))`, the same bytes
        and errors, without building either event: this runs once per delivered message.

        The method payload's consumer-tag part and exchange + routing-key part are cached
        (they repeat delivery after delivery); a body that needs several frames, a state or
        value the general path would refuse, all take the general path.
        """
        size = len(body)
        prefix = self._deliver_prefixes.get(consumer_tag)
        tail = self._deliver_tails.get((exchange, routing_key))
        if (
            prefix is None
            or tail is None
            or self._state is not ConnectionState.OPEN
            or not channel
            or (self._max_body_frame and size > self._max_body_frame)
            or type(raw_properties) is not bytes
            or not 0 <= delivery_tag < _MAX_TAG
        ):
            method = BasicDeliver(consumer_tag, delivery_tag, redelivered, exchange, routing_key)
            self._send_deliver_slowly(channel, method, raw_properties, body)
            return
        self._out.append(
            deliver_frames(channel, prefix, delivery_tag, redelivered, tail, raw_properties, body)
        )

    def _send_deliver_slowly(
        self, channel: int, method: BasicDeliver, raw: bytes, body: bytes
    ) -> None:
        self.send(Delivery(channel, method, raw, body))
        if self._state is not ConnectionState.OPEN:
            return
        # It went out, so the strings encode: cache their parts for the next deliveries.
        payload = method.encode()
        prefix_size = 5 + payload[4]  # ids and the consumer tag; then tag and redelivered
        prefixes, tails = self._deliver_prefixes, self._deliver_tails
        if len(prefixes) >= _DELIVER_CACHE or len(tails) >= _DELIVER_CACHE:
            prefixes.clear()
            tails.clear()
        prefixes[method.consumer_tag] = payload[:prefix_size]
        tails[(method.exchange, method.routing_key)] = payload[prefix_size + 9 :]
