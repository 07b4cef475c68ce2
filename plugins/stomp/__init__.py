"""herald's STOMP 1.0 / 1.1 / 1.2 protocol plugin.

`herald.plugins.stomp.codec` is the sans-IO wire codec (server role); the session and the Trio
adapter that drive it live beside it.
"""
