"""Free TCP ports for servers started in other processes and restarted on the same port
(`herald cluster dev`'s nodes, etcd and name server; the tests' brokers, proxies, etcds).

`free_port(host)` picks a port below the kernel's ephemeral range and checks that it binds
on `host`. Below that range because those servers are restarted, or bind later (a slave's
client ports when it is promoted): a port the kernel hands out for `bind(0)` is an ephemeral
one, which a client's outgoing socket or a socket in TIME_WAIT could hold meanwhile.
It is free when checked; another process may still take it before the server binds it, so
callers that bind later retry with a new one.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Collection

SPAN = 12000
"""How far below the ephemeral range ports are drawn from."""


def free_port(host: str = "127.0.0.1", avoid: Collection[int] = ()) -> int:
    """A TCP port free on `host` right now, below the ephemeral range, and not in `avoid`
    (ports handed out already but not bound yet: a draw can repeat one, since nothing holds
    it between the check and the server's bind)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    high = ephemeral_low()
    low = max(1024, high - SPAN)
    for _ in range(1000 if low < high else 0):
        port = random.randrange(low, high)
        if port in avoid:
            continue
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on {host} in [{low}, {high}), below the ephemeral range")


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when unknown)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
