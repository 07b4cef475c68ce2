"""herald's MQTT 3.1 / 3.1.1 / 5.0 protocol plugin (docs/mqtt.md).

`herald.plugins.mqtt.codec` is the sans-IO wire codec (server role); `session.py` drives it,
`server.py` is the Trio adapter, `plugin.py` holds the hooks.
"""
