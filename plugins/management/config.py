"""The `[management]` config section.

Defaults follow RabbitMQ's management plugin: port 15672 on every interface, HTTPS on 15671
(its `management.ssl.port`) once the broker's `[tls]` section has a certificate. The sampler
interval is RabbitMQ's default `collect_statistics_interval` (5 s).
"""

from __future__ import annotations

import attrs

from herald.core.config import InvalidValue


def _port(_inst: object, attribute: attrs.Attribute, value: int) -> None:
    if not 0 <= value <= 65535:
        raise InvalidValue(f"expected 0..65535, got {value!r}", attribute.name)


def _positive(_inst: object, attribute: attrs.Attribute, value: float) -> None:
    if not value > 0:
        raise InvalidValue(f"must be more than 0, got {value!r}", attribute.name)


@attrs.frozen
class ManagementConfig:
    """`[management]`: where the HTTP API listens and how it samples rates."""

    host: str = "0.0.0.0"
    port: int = attrs.field(default=15672, validator=_port)
    https_port: int = attrs.field(default=15671, validator=_port)
    """The HTTPS listener's port, served on `host` when `[tls]` has a certificate."""
    sample_interval: float = attrs.field(default=5.0, validator=_positive)
    """Seconds between samples of the publish / deliver / ack counters (message rates)."""
    max_page_size: int = attrs.field(default=500, validator=_positive)
    """The largest `page_size` a paged list accepts (RabbitMQ's limit is 500 too)."""
    max_body_bytes: int = attrs.field(default=16 * 1024 * 1024, validator=_positive)
    """Request bodies above this are refused with 413 (publish payloads, definitions)."""
    max_messages: int = attrs.field(default=1000, validator=_positive)
    """The most messages one get, browse or search returns."""
    graceful_timeout: float = attrs.field(default=1.0, validator=_positive)
    """Seconds in-flight requests get at shutdown."""
