"""herald's version, read once: protocols announce it on every connection (AMQP server
properties, STOMP CONNECTED), and reading package metadata costs milliseconds each time."""

from __future__ import annotations

import functools
from importlib import metadata


@functools.cache
def herald_version() -> str:
    """The installed heraldmq version, or "0+unknown" when running from an uninstalled tree."""
    try:
        return metadata.version("heraldmq")
    except metadata.PackageNotFoundError:
        return "0+unknown"
