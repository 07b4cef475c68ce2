"""herald's AMQP 0-9-1 protocol plugin."""
