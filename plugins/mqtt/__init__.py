"""herald's MQTT 3.1 / 3.1.1 / 5.0 protocol plugin.

`herald.plugins.mqtt.codec` is the sans-IO wire codec (server role); the session and the Trio
adapter that drive it live beside it.
"""
