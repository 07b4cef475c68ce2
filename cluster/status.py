"""`NodeStatus`: what this node is in its cluster, shared by its node runner (node.py).

Membership (membership.py) publishes it in the node key, registration (registration.py)
sends it to the name servers. A role change wakes both at once: the name servers must learn
of a new master within one round trip, not one register period (CLUSTER.md §4.2). Until the
HA issue each group has one node and that node is its master, at epoch 0.
"""

from __future__ import annotations

import attrs
import trio

from herald.cluster.nameserver.registry import Role


@attrs.define(eq=False)
class NodeStatus:
    cluster: str
    group: str
    node: str
    role: Role = Role.MASTER
    epoch: int = 0
    _changed: trio.Event = attrs.field(factory=trio.Event, init=False, repr=False)

    def set_role(self, role: Role, epoch: int) -> None:
        """Record a new role or epoch; wakes every `wait_changed` if it is one."""
        if (role, epoch) == (self.role, self.epoch):
            return
        self.role, self.epoch = role, epoch
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self) -> None:
        """Return at the next change of role or epoch."""
        await self._changed.wait()
