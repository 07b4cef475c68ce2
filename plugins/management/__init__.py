"""herald's management plugin: a RabbitMQ-shaped REST/JSON API and Prometheus metrics.

Served by Starlette on hypercorn's Trio worker, inside the broker's own nursery, so every
request runs on the broker's Trio thread and reads the kernel's state directly, without locks
or copies. See docs/management.md for what is served and how it differs from RabbitMQ.
"""
