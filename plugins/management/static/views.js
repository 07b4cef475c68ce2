// Read-mostly views: overview (with the live rate chart), queues, one queue, connections.
// A view renders into `root` and may return a refresh function the console polls.

import { api, get, seg } from "./api.js";
import { RateChart } from "./chart.js";
import { bytes, form, h, rate, table } from "./dom.js";
import { flash } from "./flash.js";

const SERIES = [
  { key: "publish", label: "publish", color: "#0b6bcb" },
  { key: "deliver_get", label: "deliver / get", color: "#2e9e5b" },
  { key: "ack", label: "ack", color: "#d97706" },
];

export async function overview(root) {
  const cards = h("div", { class: "cards", id: "totals" });
  const canvas = h("canvas", { id: "rates", width: 720, height: 220 });
  const legend = h("div", { class: "legend" },
    SERIES.map((s) => h("span", {}, h("i", { style: `background:${s.color}` }), s.label)));
  const listeners = h("div");
  const alarms = h("p", { id: "alarms" });
  root.replaceChildren(
    h("h1", {}, "Overview"), cards,
    h("section", {}, h("h2", {}, "Message rates (per second)"), canvas, legend),
    h("section", {}, h("h2", {}, "Alarms"), alarms),
    h("section", {}, h("h2", {}, "Listeners"), listeners),
  );
  const chart = new RateChart(canvas, SERIES);
  const refresh = async () => {
    const o = await get("/api/overview");
    const t = o.object_totals;
    const q = o.queue_totals;
    const card = (label, value) => h("div", { class: "card" }, label, h("b", {}, value));
    cards.replaceChildren(
      card("Queues", t.queues), card("Connections", t.connections),
      card("Consumers", t.consumers), card("Exchanges", t.exchanges),
      card("Ready", q.messages_ready), card("Unacked", q.messages_unacknowledged),
      card("Published", o.message_stats.publish),
    );
    const sample = {};
    for (const s of SERIES) sample[s.key] = Number(rate(o.message_stats, s.key));
    chart.push(sample);
    alarms.textContent = o.alarms.length ? o.alarms.join(", ") : "none";
    listeners.replaceChildren(table([
      ["Protocol", (l) => l.protocol], ["Transport", (l) => l.transport],
      ["Address", (l) => l.ip_address], ["Port", (l) => l.port, "num"],
    ], o.listeners));
  };
  await refresh();
  return refresh;
}

const queueLink = (q) => h("a", { href: `#/queue/${seg(q.vhost)}/${seg(q.name)}` }, q.name);

function swapText(swap) {
  if (!swap.enabled) return `loaded ${swap.loaded}`;
  return `loaded ${swap.loaded} / swapped ${swap.swapped} (${swap.ranges} ranges)`;
}

export async function queues(root) {
  const list = h("div", { id: "queue-list" });
  const filter = h("input", { name: "filter", placeholder: "filter by name (regex)" });
  const declare = form("declare-queue", [
    ["Vhost", "vhost", { value: "/" }], ["Name", "name", { required: true }],
    ["Durable", "durable", { type: "checkbox", checked: true }],
  ], "Declare queue", async (v) => {
    await api("PUT", `/api/queues/${seg(v.vhost)}/${seg(v.name)}`, { durable: v.durable });
    flash(`queue '${v.name}' declared`);
    await refresh();
  });
  root.replaceChildren(h("h1", {}, "Queues"), filter, list,
    h("section", {}, h("h2", {}, "Declare a queue"), declare));
  const refresh = async () => {
    const name = filter.value ? `&name=${seg(filter.value)}&use_regex=true` : "";
    const page = await get(`/api/queues?page=1&page_size=100${name}`);
    list.replaceChildren(table([
      ["Vhost", (q) => q.vhost], ["Name", queueLink],
      ["Ready", (q) => q.messages_ready, "num"], ["Unacked", (q) => q.messages_unacknowledged, "num"],
      ["Publish/s", (q) => rate(q.message_stats, "publish"), "num"],
      ["Deliver/s", (q) => rate(q.message_stats, "deliver_get"), "num"],
      ["Ack/s", (q) => rate(q.message_stats, "ack"), "num"],
      ["Consumers", (q) => q.consumers, "num"], ["Memory", (q) => bytes(q.memory), "num"],
      ["Swap", (q) => swapText(q.herald_swap)],
    ], page.items, "no queues"),
    h("p", { class: "muted" }, `${page.filtered_count} of ${page.total_count} queues`));
  };
  filter.addEventListener("change", () => refresh().catch((e) => flash(e.message, true)));
  await refresh();
  return refresh;
}

export function messageRows(items) {
  return table([
    ["Offset", (m) => m.queue_offset ?? "", "num"], ["Exchange", (m) => m.exchange],
    ["Routing key", (m) => m.routing_key], ["Redelivered", (m) => (m.redelivered ? "yes" : "")],
    ["Properties", (m) => h("pre", {}, JSON.stringify(m.properties))],
    ["Payload", (m) => h("pre", {}, m.payload)],
  ], items, "no messages");
}

export async function queue(root, vhost, name) {
  const path = `/api/queues/${seg(vhost)}/${seg(name)}`;
  const summary = h("div");
  const browsed = h("div", { id: "browse-result" });
  const browse = form("browse-queue", [
    ["Offset", "offset", { type: "number", value: 0, min: 0 }],
    ["Limit", "limit", { type: "number", value: 20, min: 1 }],
  ], "Browse", async (v) => {
    const page = await get(`${path}/messages?offset=${v.offset}&limit=${v.limit}`);
    browsed.replaceChildren(messageRows(page.items));
  });
  const publish = form("publish-to-queue", [
    ["Payload", "payload", { rows: 2, required: true }],
  ], "Publish", async (v) => {
    const body = { routing_key: name, payload: v.payload, payload_encoding: "string", properties: {} };
    const answer = await api("POST", `/api/exchanges/${seg(vhost)}/amq.default/publish`, body);
    flash(answer.routed ? "published" : "published, but not routed");
    await refresh();
  });
  const actions = h("p", {},
    h("button", { class: "danger", onclick: () => act("DELETE", `${path}/contents`, "purged") }, "Purge"), " ",
    h("button", { class: "danger", onclick: () => act("DELETE", path, "deleted", "#/queues") }, "Delete"));
  async function act(method, url, done, next) {
    try {
      await api(method, url);
      flash(`queue '${name}' ${done}`);
      if (next) window.location.hash = next; else await refresh();
    } catch (e) { flash(e.message, true); }
  }
  root.replaceChildren(h("h1", {}, `Queue ${name}`), h("p", { class: "muted" }, `vhost ${vhost}`),
    summary, actions,
    h("section", {}, h("h2", {}, "Browse (messages stay in the queue)"), browse, browsed),
    h("section", {}, h("h2", {}, "Publish to this queue"), publish));
  const refresh = async () => {
    const q = await get(path);
    const s = q.herald_swap;
    summary.replaceChildren(
      h("section", {}, table([["Ready", (x) => x.messages_ready, "num"],
        ["Unacked", (x) => x.messages_unacknowledged, "num"], ["Consumers", (x) => x.consumers, "num"],
        ["Durable", (x) => String(x.durable)], ["Memory", (x) => bytes(x.memory), "num"],
        ["Loaded", () => `${s.loaded} (${bytes(s.loaded_bytes)})`, "num"],
        ["Swapped", () => `${s.swapped} (${bytes(s.swapped_bytes)})`, "num"],
        ["Ranges", () => s.ranges, "num"]], [q])),
      h("section", {}, h("h2", {}, "Consumers"), table([
        ["Tag", (c) => c.consumer_tag], ["Ack required", (c) => String(c.ack_required)],
        ["Prefetch", (c) => c.prefetch_count, "num"], ["Unacked", (c) => c.herald_unacked, "num"],
        ["Status", (c) => c.activity_status]], q.consumer_details || [])));
  };
  await refresh();
  return refresh;
}

export async function connections(root) {
  const list = h("div", { id: "connection-list" });
  const reason = h("input", { name: "reason", value: "closed from the console" });
  root.replaceChildren(h("h1", {}, "Connections"),
    h("label", {}, "Reason given when closing", reason), list);
  const close = async (c) => {
    try {
      await api("DELETE", `/api/connections/${seg(c.name)}`, undefined, { "X-Reason": reason.value });
      flash(`connection ${c.name} closed`);
      await refresh();
    } catch (e) { flash(e.message, true); }
  };
  const refresh = async () => {
    const items = await get("/api/connections");
    list.replaceChildren(table([
      ["Id", (c) => c.name, "num"], ["Protocol", (c) => c.protocol], ["User", (c) => c.user],
      ["Vhost", (c) => c.vhost], ["Peer", (c) => `${c.peer_host}:${c.peer_port ?? ""}`],
      ["Client", (c) => c.client_properties.product || ""], ["Channels", (c) => c.channels, "num"],
      ["Since", (c) => new Date(c.connected_at).toLocaleTimeString()],
      ["", (c) => h("button", { class: "danger", onclick: () => close(c) }, "Close")],
    ], items, "no connections"));
  };
  await refresh();
  return refresh;
}
