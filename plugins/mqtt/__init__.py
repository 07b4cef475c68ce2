"""herald's MQTT 3.1 / 3.1.1 / 5.0 protocol plugin (docs/mqtt.md).

`herald.plugins.mqtt.codec` is the sans-IO wire codec (server role); `session.py` drives it,
`server.py` declares the listeners the kernel's adapter (core/adapter.py) serves it on,
`plugin.py` holds the hooks.
"""
