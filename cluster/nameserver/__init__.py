"""The name server (RocketMQ's NameServer): routes from vhost + queue to a group's master.

`registry` holds the rules (pure), `wire` the JSON, `server` the HTTP service
(`run_nameserver`, what `herald nameserver` runs), `client` the node and application side
(`register_all`, `resolve`).
"""
