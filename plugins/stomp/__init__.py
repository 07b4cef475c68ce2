"""herald's STOMP 1.0 / 1.1 / 1.2 protocol plugin.

`herald.plugins.stomp.codec` is the sans-IO wire codec (server role); the session that drives
it lives beside it, served by the kernel's one connection adapter (core/adapter.py).
"""
