"""The group's state in etcd: who is master, at which epoch, with which sync set (CLUSTER.md
§3.4, §4.3). etcd plays RocketMQ 5's controller; each group has two keys under
`P/groups/<g>/`:

- `state`, on no lease: `{"epoch","master","sync_set","master_addr"}`. It outlives every node,
  so the sync set (SSS) survives a whole-group restart and says who may become master.
- `master`, on the master's lease: `{"node","epoch"}`. Its presence says the master is alive;
  when the lease ends the key vanishes, and that DELETE is what starts an election.

Every change is one txn whose compares carry the rule, always including the state's mod
revision as read, so each change is made from the state it replaces and two racing changes
never both land. A lost compare returns None (re-read and decide again), never raises. A txn
that raises `EtcdUnavailable` has an unknown outcome: `read()` says what happened.

Only SSS members may campaign (RocketMQ's `enableElectUncleanMaster=false`): the master
changes the SSS in etcd before its confirm rule relies on it (§3.2), so every stored SSS
names nodes holding every confirmed message.

Operator handover (`promote(target, force=True)`): one txn deletes the live master's key
and puts state `{epoch+1, master: target, sync_set: [target]}`. The old master keeps its
lease but its SSS changes now fail (their compare names its master key), it sees the new
state on `changes()` and demotes; it cannot confirm meanwhile, since its SSS includes the
target, which stops acking once it sees itself named. The target sees itself as master in
state with no master key and claims it with `reclaim` (one more epoch, on its own lease);
nobody else can, since the new SSS is the target alone.

Bad JSON in either key makes `read()` raise `ControllerError` naming the key: the group's
state is unknown and guessing could elect a node missing confirmed messages.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from herald.cluster import keys
from herald.cluster.etcd import (
    Compare,
    DeleteOp,
    EtcdClient,
    KeyValue,
    PutOp,
    Watch,
    WatchEvent,
    WatchReset,
)
from herald.cluster.etcd_types import Json, b64, to_bytes
from herald.core.errors import HeraldError

log = logging.getLogger("herald.cluster.controller")


class ControllerError(HeraldError):
    """The group's state in etcd is unreadable, or an operator request was refused."""


def _dumps(data: dict[str, Any]) -> bytes:
    """Compact, sorted: the same claim always gives the same bytes (a VALUE compare)."""
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def _object(kv: KeyValue) -> dict[str, Any]:
    data = json.loads(kv.value)
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object: {kv.value[:100]!r}")
    return data


def _field(data: dict[str, Any], name: str, kind: type) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{name!r} must be {kind.__name__}, not {value!r}")
    return value


def _epoch(data: dict[str, Any]) -> int:
    epoch: int = _field(data, "epoch", int)
    if epoch < 1:
        raise ValueError(f"'epoch' must be >= 1, not {epoch}")
    return epoch


def _node(data: dict[str, Any], name: str) -> str:
    node: str = _field(data, name, str)
    if not node:
        raise ValueError(f"{name!r} is empty")
    return node


@attrs.frozen
class GroupState:
    """The `state` key. `sync_set` includes the master; `master_addr` is its cluster port."""

    epoch: int
    master: str
    sync_set: tuple[str, ...]
    master_addr: str
    revision: int = 0
    """Mod revision of the state key as read (0: not read from etcd)."""

    def to_json(self) -> bytes:
        return _dumps(
            {
                "epoch": self.epoch,
                "master": self.master,
                "sync_set": list(self.sync_set),
                "master_addr": self.master_addr,
            }
        )

    @classmethod
    def from_kv(cls, kv: KeyValue) -> GroupState:
        """:raises ValueError: not JSON, or not the shape `to_json` writes."""
        data = _object(kv)
        sync_set = data.get("sync_set")
        if not isinstance(sync_set, list) or not all(isinstance(n, str) and n for n in sync_set):
            raise ValueError(f"'sync_set' must be a list of node names, not {sync_set!r}")
        addr: str = _field(data, "master_addr", str)
        return cls(_epoch(data), _node(data, "master"), tuple(sync_set), addr, kv.mod_revision)


@attrs.frozen
class MasterClaim:
    """The `master` key: held on the master's lease. Never modified once put (a new claim is
    a new key), so `create_revision` identifies it."""

    node: str
    epoch: int
    lease: int = 0
    create_revision: int = 0

    def to_json(self) -> bytes:
        return _dumps({"node": self.node, "epoch": self.epoch})

    @classmethod
    def from_kv(cls, kv: KeyValue) -> MasterClaim:
        """:raises ValueError: not JSON, or not the shape `to_json` writes."""
        data = _object(kv)
        return cls(_node(data, "node"), _epoch(data), kv.lease, kv.create_revision)


@attrs.frozen
class GroupView:
    """Both keys as read at one etcd revision (None: the key is absent)."""

    state: GroupState | None
    master: MasterClaim | None
    revision: int
    """The etcd header revision of the read: watch from `revision + 1` to miss nothing."""


@attrs.frozen
class _LeaseCompare(Compare):
    """etcd's LEASE compare target (etcd >= 3.3), which `Compare` does not build: "the key
    is held on this lease"."""

    def to_json(self) -> Json:
        return {
            "target": "LEASE",
            "key": b64(self.key),
            "result": self.op.value,
            "lease": str(self.operand),
        }


def _check_lease(lease: int) -> None:
    if lease <= 0:
        raise ValueError("a master key needs a lease: without one it never vanishes")


class GroupController:
    """One node's handle on its group's keys; `node` is who this node is. Stateless: every
    call takes what it compares against from its arguments or a fresh read."""

    def __init__(self, etcd: EtcdClient, cluster: str, group: str, node: str) -> None:
        self.etcd = etcd
        self.cluster = cluster
        self.group = group
        self.node = node
        self.prefix = keys.groups_prefix(cluster, group)
        self.state_key = keys.group_state_key(cluster, group)
        self.master_key = keys.group_master_key(cluster, group)

    async def read(self) -> GroupView:
        """Both keys, by one linearizable prefix range.

        :raises ControllerError: a key holds a value this module did not write.
        """
        found = await self.etcd.range(self.prefix, prefix=True)
        state: GroupState | None = None
        master: MasterClaim | None = None
        for kv in found.kvs:
            key = kv.key.decode(errors="replace")
            try:
                if key == self.state_key:
                    state = GroupState.from_kv(kv)
                elif key == self.master_key:
                    master = MasterClaim.from_kv(kv)
            except ValueError as exc:
                raise ControllerError(
                    f"group {self.group!r}: etcd key {key} holds no valid value ({exc}); "
                    "fix or delete it"
                ) from exc
        return GroupView(state, master, found.revision)

    async def bootstrap(self, lease: int, addr: str) -> GroupState | None:
        """Make this node the first master of an empty group (epoch 1, SSS [me]). None when
        the state exists already, or a master key does (a claim left by a deleted state: it
        goes with its lease, then bootstrap can succeed)."""
        _check_lease(lease)
        state = GroupState(1, self.node, (self.node,), addr)
        compare = [Compare.create(self.state_key, 0), Compare.create(self.master_key, 0)]
        won = await self._claim(compare, state, lease)
        if won is not None:
            log.info("group %r: %s bootstrapped it as master, epoch 1", self.group, self.node)
        return won

    async def campaign(self, seen: GroupView, lease: int, addr: str) -> GroupState | None:
        """The election txn (§4.3): if there is no master key and the state is still
        `seen.state`, become master at epoch+1 with SSS [me] (the others join again once
        caught up). None when lost: someone else won, or the state changed since `seen`.

        :raises ValueError: no state yet, or this node is not in its sync set (it may miss
            confirmed messages: no unclean election).
        """
        _check_lease(lease)
        current = seen.state
        if current is None:
            raise ValueError(f"group {self.group!r} has no state to campaign on: bootstrap it")
        if self.node not in current.sync_set:
            raise ValueError(
                f"{self.node} is not in the sync set {list(current.sync_set)} of group "
                f"{self.group!r}: it may miss confirmed messages (no unclean election)"
            )
        state = GroupState(current.epoch + 1, self.node, (self.node,), addr)
        compare = [
            Compare.create(self.master_key, 0),
            Compare.mod(self.state_key, current.revision),
        ]
        won = await self._claim(compare, state, lease)
        if won is not None:
            log.info("group %r: %s won the election, epoch %d", self.group, self.node, won.epoch)
        return won

    async def reclaim(self, seen: GroupView, lease: int, addr: str) -> GroupState | None:
        """The state names me master but my master key is gone (my lease expired, or an
        operator promoted me): claim it on `lease`, at epoch+1, by the election txn.

        :raises ValueError: the state does not name me master.
        """
        if seen.state is None or seen.state.master != self.node:
            raise ValueError(f"{self.node} is not master of group {self.group!r} in {seen}")
        return await self.campaign(seen, lease, addr)

    async def step_down(self, seen: GroupState, sync_set: Iterable[str]) -> bool:
        """I won `seen.epoch` but cannot serve (my broker did not start): drop my claim and
        give the group back the sync set it had before my election, so another of its
        members can be elected. Safe: nothing was confirmed in my term, so every member of
        that set still holds every confirmed record. False if the compare failed.
        """
        if seen.master != self.node:
            raise ValueError(f"{self.node} is not master of group {self.group!r} in {seen}")
        members = tuple(sorted(set(sync_set) | {self.node}))
        state = attrs.evolve(seen, sync_set=members, revision=0)
        claim = MasterClaim(self.node, seen.epoch).to_json()
        result = await self.etcd.txn(
            [Compare.value(self.master_key, claim), Compare.mod(self.state_key, seen.revision)],
            [DeleteOp(self.master_key), PutOp(self.state_key, state.to_json())],
        )
        if result.succeeded:
            log.warning("group %r: %s steps down (epoch %d)", self.group, self.node, seen.epoch)
        return result.succeeded

    async def renew_claim(self, seen: GroupState, lease: int) -> bool:
        """I am master at `seen.epoch` but my master key went with my expired lease, and the
        state is still `seen` (nobody was elected meanwhile): put my claim back on `lease`,
        same epoch, so the master carries on without a new term. False when the compare
        failed (someone else claimed the group, or the state changed): demote.

        :raises ValueError: `seen` does not name me master.
        """
        _check_lease(lease)
        if seen.master != self.node:
            raise ValueError(f"{self.node} is not master of group {self.group!r} in {seen}")
        claim = MasterClaim(self.node, seen.epoch).to_json()
        result = await self.etcd.txn(
            [Compare.create(self.master_key, 0), Compare.mod(self.state_key, seen.revision)],
            [PutOp(self.master_key, claim, lease)],
        )
        if result.succeeded:
            log.info("group %r: %s claims it again (epoch %d)", self.group, self.node, seen.epoch)
        return result.succeeded

    async def set_sync_set(
        self, seen: GroupState, members: Iterable[str], lease: int
    ) -> GroupState | None:
        """As master, store a new sync set: `members` sorted and unique, me first (added if
        missing). Compares my master key's value (my claim at `seen.epoch`), its lease
        (`lease`; 0 skips that compare) and the state's mod revision. Returns the new state,
        or None: I am no longer master, or the state changed since `seen`.

        :raises ValueError: `seen` does not name me master.
        """
        if seen.master != self.node:
            raise ValueError(f"{self.node} is not master in {seen}")
        others = sorted(set(members) - {self.node})
        state = attrs.evolve(seen, sync_set=(self.node, *others), revision=0)
        claim = MasterClaim(self.node, seen.epoch).to_json()
        compare = [
            Compare.value(self.master_key, claim),
            Compare.mod(self.state_key, seen.revision),
        ]
        if lease:
            compare.append(_LeaseCompare("LEASE", to_bytes(self.master_key), lease))
        result = await self.etcd.txn(compare, [PutOp(self.state_key, state.to_json())])
        if not result.succeeded:
            return None
        log.info("group %r: sync set now %s", self.group, list(state.sync_set))
        return attrs.evolve(state, revision=result.revision)

    def changes(self, start_revision: int = 0) -> GroupChanges:
        """Views of the group as it changes, from `start_revision` (usually a read's
        `revision + 1`; 0: from when it is entered or first iterated). Both an async
        iterator and an async context manager: `async with controller.changes(rev) as
        views:` or `aclosing(controller.changes(rev))`, then `async for view in views:`;
        leaving closes the watch."""
        return GroupChanges(self, start_revision)

    async def promote(self, target: str, *, force: bool = False) -> GroupState:
        """`herald cluster promote TARGET`: name `target` master (see the module docstring
        for the handover). A no-op returning the state when it already names `target`.

        :raises ControllerError: no state, `target` not in the sync set, a live master and
            no `force`, or the group changed during the request (look again and retry).
        """
        view = await self.read()
        state, live = view.state, view.master
        if state is None:
            raise ControllerError(f"group {self.group!r} has no state in etcd: no node ran it")
        if target not in state.sync_set:
            raise ControllerError(
                f"{target} is not in the sync set {list(state.sync_set)} of group "
                f"{self.group!r}: it may miss confirmed messages"
            )
        if state.master == target and (live is None or live.node == target):
            return state
        if live is not None and not force:
            raise ControllerError(f"{live.node} is master and alive; use --force")
        new = GroupState(state.epoch + 1, target, (target,), await self._cluster_addr(target))
        compare = [
            Compare.mod(self.state_key, state.revision),
            # The claim is never modified, so its create revision pins it (0: still absent).
            Compare.create(self.master_key, live.create_revision if live else 0),
        ]
        result = await self.etcd.txn(
            compare, [DeleteOp(self.master_key), PutOp(self.state_key, new.to_json())]
        )
        if not result.succeeded:
            raise ControllerError(
                f"group {self.group!r} changed while promoting {target}; look again and retry"
            )
        log.warning(
            "group %r: operator promoted %s (epoch %d; was %s)",
            self.group,
            target,
            new.epoch,
            live.node if live else f"{state.master}, not alive",
        )
        return attrs.evolve(new, revision=result.revision)

    # -- internals ---------------------------------------------------------------------------

    async def _claim(
        self, compare: Sequence[Compare], state: GroupState, lease: int
    ) -> GroupState | None:
        """Put my master key on `lease` and `state`, if `compare` holds."""
        claim = MasterClaim(self.node, state.epoch).to_json()
        result = await self.etcd.txn(
            compare,
            [PutOp(self.master_key, claim, lease), PutOp(self.state_key, state.to_json())],
        )
        return attrs.evolve(state, revision=result.revision) if result.succeeded else None

    async def _cluster_addr(self, node: str) -> str:
        """The cluster port `node` publishes in its node key (`addrs.cluster`), else ""."""
        kv = await self.etcd.get(keys.node_key(self.cluster, node))
        try:
            addr = json.loads(kv.value)["addrs"]["cluster"] if kv is not None else ""
        except (ValueError, KeyError, TypeError):
            return ""
        return addr if isinstance(addr, str) else ""


class GroupChanges:
    """A watch on the group's prefix that re-reads both keys after each change and yields
    the view. One view may cover several events (a txn's two puts, or a burst): an event
    at or below the last view's revision is already in it and yields nothing.

    Safe to cancel: if a read is cancelled or fails (`EtcdError`) after its event was taken
    from the watch, the next `__anext__` reads again at once, so no change is lost.
    """

    def __init__(self, controller: GroupController, start_revision: int) -> None:
        self._controller = controller
        self._watch: Watch = controller.etcd.watch(controller.prefix, start_revision)
        self._covered = start_revision - 1  # the newest revision a yielded view includes
        self._stale = False  # an event came that no view includes yet

    async def __aenter__(self) -> GroupChanges:
        await self._watch.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __aiter__(self) -> GroupChanges:
        return self

    async def __anext__(self) -> GroupView:
        while not self._stale:
            item: WatchEvent | WatchReset = await self._watch.__anext__()
            self._stale = item.revision > self._covered
        view = await self._controller.read()
        self._stale = False
        self._covered = max(self._covered, view.revision)
        return view

    async def aclose(self) -> None:
        await self._watch.aclose()
