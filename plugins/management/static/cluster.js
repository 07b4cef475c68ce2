// The Cluster page: what `herald cluster status` prints, from /api/cluster. This node's own
// view (group, role, epoch, fenced, commit-log offset now, addresses), its replication (the
// group's epoch, master and sync set as etcd last told the node; a master's confirm offset,
// log end and each slave's ack and lag, now) and, from the first name server that answers,
// every group and node (role, epoch, last registration, commit-log offset as of that
// registration, client addresses), this node marked.
// A broker that is not a cluster node gets a short note on how to make it one.

import { get } from "./api.js";
import { h, table } from "./dom.js";

// Address columns in this order (cluster/addresses.py's keys), then any other key seen.
const PROTOCOLS = ["amqp", "amqps", "mqtt", "mqtts", "stomp", "stomps", "management"];

const text = (value) => (value === null || value === undefined ? "-" : String(value));
const ordered = (keys) => [...PROTOCOLS.filter((p) => keys.has(p)), ...[...keys].filter((p) => !PROTOCOLS.includes(p))];

function standalone(c) {
  return [
    h("p", { id: "cluster-standalone" }, `This broker (${c.node}) is not a cluster node.`),
    h("p", { class: "muted" },
      "To make it one, set ", h("code", {}, "[cluster] enabled = true"),
      " with its etcd endpoints and name servers, a unique ", h("code", {}, "broker.node_name"),
      " and the commit-log store: see ", h("code", {}, "docs/cluster.md"),
      ", \u201cRunning a node in a cluster\u201d. ", h("code", {}, "herald cluster dev --nodes 3"),
      " runs a whole cluster on one machine to try it."),
  ];
}

function addresses(addrs) {
  const keys = ordered(new Set(Object.keys(addrs || {})));
  if (!keys.length) return "-";
  return keys.map((k) => `${k} ${addrs[k]}`).join(", ");
}

function fencedText(fenced) {
  if (fenced === null) return "-";
  if (!fenced) return "no";
  return h("span", { class: "bad" }, "yes: etcd unreachable past the lease guard, publishers blocked");
}

function thisNode(c) {
  return table([
    ["Cluster", (x) => x.cluster], ["Node", (x) => x.node], ["Group", (x) => x.group],
    ["Role", (x) => text(x.role)], ["Epoch", (x) => text(x.epoch), "num"], ["Fenced", (x) => fencedText(x.fenced)],
    ["Offset", (x) => text(x.offset), "num"], // live: this node's store now
    ["Client addresses", (x) => addresses(x.addrs)], ["Name servers", (x) => x.nameservers.join(", ") || "none"],
  ], [c]);
}

const yesNo = (value) => (value ? "yes" : "no");

// The group's keys in etcd, as this node's watch last saw them.
function groupState(c) {
  const s = c.group_state;
  if (!s) return h("p", { id: "cluster-group-state", class: "muted" }, `Group ${c.group} has no state in etcd yet.`);
  const claim = c.master_claim;
  const alive = claim && claim.node === s.master
    ? "alive"
    : h("span", { class: "bad" }, claim ? `not alive (the claim is ${claim.node}'s)` : "not alive (no claim: an election is due)");
  return h("p", { id: "cluster-group-state" },
    `Group ${c.group} in etcd: epoch ${s.epoch}, master ${s.master} (`, alive, `), sync set ${s.sync_set.join(", ")}.`);
}

// A master's replication now: its confirm offset and log end, then one row per slave.
function masterReplication(r) {
  const slaves = Object.entries(r.slaves).map(([node, s]) => ({ node, ...s }))
    .sort((a, b) => a.node.localeCompare(b.node));
  return [
    table([
      ["Epoch", (x) => x.epoch, "num"], ["Sync set", (x) => x.sync_set.join(", ")],
      ["Confirmed offset", (x) => x.confirmed, "num"], ["Log end", (x) => x.log_end, "num"],
    ], [r]),
    h("div", { id: "cluster-slaves" }, table([
      ["Slave", (s) => s.node], ["Connected", (s) => yesNo(s.connected)],
      ["In sync set", (s) => (s.in_sync ? "yes" : h("span", { class: "bad" }, "no"))],
      ["Acked", (s) => s.acked, "num"], ["Lag (bytes)", (s) => s.lag_bytes, "num"],
      ["Lag (ms)", (s) => text(s.lag_ms), "num"], // null: disconnected, or never caught up
    ], slaves, "no slave has connected to this master")),
  ];
}

function slaveReplication(r) {
  return table([
    ["Master", (x) => x.master || "-"], ["Applied", (x) => x.applied, "num"], ["Flushed", (x) => x.flushed, "num"],
    ["Master's confirm offset", (x) => x.confirm_offset, "num"], ["Truncations", (x) => x.truncations, "num"],
    ["Problem", (x) => x.problem || "-"],
  ], [r]);
}

function replication(c) {
  const r = c.replication || {};
  const now = r.slaves ? masterReplication(r) : r.applied !== undefined ? slaveReplication(r) : [];
  return h("section", { id: "cluster-replication" }, h("h2", {}, "Replication"), groupState(c), now);
}

// One row per node of this node's cluster, groups in the name server's order (as the CLI's
// table; a name server may serve other clusters too).
const ownGroups = (c) => c.view.groups.filter((g) => g.cluster === c.cluster);

function nodeTable(c) {
  const rows = ownGroups(c).flatMap((g) => g.nodes.map((n) => ({ ...n, group: g.group })));
  const protocols = ordered(new Set(rows.flatMap((n) => Object.keys(n.addrs || {}))));
  const isThis = (n) => n.node === c.node; // node names are unique in a cluster
  return table([
    ["Group", (n) => n.group],
    ["Node", (n) => (isThis(n) ? [n.node, h("span", { class: "muted" }, " (this node)")] : n.node)],
    ["Role", (n) => n.role], ["Epoch", (n) => n.epoch, "num"],
    ["Last seen", (n) => `${(n.last_seen_ms_ago / 1000).toFixed(1)} s ago`, "num"],
    ["Offset", (n) => text(n.offset), "num"], // as of that registration; null: none sent
    ...protocols.map((p) => [p.toUpperCase(), (n) => text((n.addrs || {})[p])]),
  ], rows, "no node has registered with this name server", (n) => (isThis(n) ? "self" : undefined));
}

// A master's shared queues: each queue's slots cluster-wide (free, and who holds them), and
// what this node has of it now.
function sharedQueues(c) {
  const queues = Object.entries(c.shared || {}).map(([name, q]) => ({ name, ...q }));
  if (!queues.length) return [];
  const holders = (q) => {
    const count = {};
    for (const s of q.slots) if (s.owner) count[s.owner] = (count[s.owner] || 0) + 1;
    return Object.entries(count).sort().map(([n, k]) => `${n}: ${k}`).join(", ") || "-";
  };
  return [h("section", { id: "cluster-shared" }, h("h2", {}, "Shared queues"), table([
    ["Queue", (q) => q.name], ["Slots", (q) => q.slots.length, "num"], ["Free", (q) => q.free, "num"],
    ["Messages in slots", (q) => q.slots.reduce((n, s) => n + s.last - s.first + 1, 0), "num"],
    ["Held by", holders], ["Held here", (q) => q.held_here, "num"],
    ["Ready here", (q) => q.ready_here, "num"], ["Consumers here", (q) => q.consumers_here, "num"],
    ["Delivered here", (q) => q.delivered_here, "num"],
  ], queues))];
}

function member(c) {
  const out = [h("section", {}, h("h2", {}, "This node"), thisNode(c)), replication(c), ...sharedQueues(c)];
  if (c.nameserver_errors.length) {
    out.push(h("div", { id: "cluster-errors", class: "error" },
      h("p", {}, c.view ? "Name servers that did not answer:" : "No name server answered:"),
      h("ul", {}, c.nameserver_errors.map((e) => h("li", {}, e)))));
  }
  if (c.view) {
    const groups = ownGroups(c);
    const count = groups.reduce((sum, g) => sum + g.nodes.length, 0);
    const others = c.view.groups.length - groups.length;
    out.push(h("section", {},
      h("h2", {}, `Groups and nodes of cluster ${c.cluster}`),
      h("p", { class: "muted", id: "cluster-summary" },
        `name server ${c.nameserver}: ${count} node(s) in ${groups.length} group(s)`,
        others > 0 && ` (and ${others} group(s) of other clusters, not shown)`,
        !groups.some((g) => g.nodes.some((n) => n.node === c.node))
          && "; this node is not among them (not registered yet, or expired there)"),
      h("div", { id: "cluster-nodes" }, nodeTable(c)),
      h("p", { class: "muted", id: "cluster-offset-note" },
        "Offset: each node's commit-log offset as of its last registration (last seen); ",
        "this node's, above, is its offset now.")));
  } else if (!c.nameservers.length) {
    out.push(h("p", { class: "muted" }, "cluster.nameservers is empty: no name server to ask for the other nodes."));
  }
  return out;
}

export async function cluster(root) {
  const body = h("div", { id: "cluster" });
  root.replaceChildren(h("h1", {}, "Cluster"), body);
  let pending = null;
  const load = async () => {
    const c = await get("/api/cluster");
    body.replaceChildren(...(c.enabled ? member(c) : standalone(c)));
  };
  // A name server that does not answer costs the API up to 2 s: one request at a time.
  const refresh = () => {
    if (pending === null) pending = load().finally(() => { pending = null; });
    return pending;
  };
  await refresh();
  return refresh;
}
