// Views that mostly change things: exchanges and bindings, the message forms (publish,
// browse, search), users and permissions.

import { api, get, seg } from "./api.js";
import { form, h, table } from "./dom.js";
import { flash } from "./flash.js";
import { messageRows } from "./views.js";

const exchangeName = (name) => name || "amq.default";

export async function exchanges(root) {
  const list = h("div", { id: "exchange-list" });
  const bindings = h("div", { id: "binding-list" });
  const declare = form("declare-exchange", [
    ["Vhost", "vhost", { value: "/" }], ["Name", "name", { required: true }],
    ["Type", "type", { options: ["direct", "fanout", "topic", "headers"] }],
    ["Durable", "durable", { type: "checkbox", checked: true }],
  ], "Declare exchange", async (v) => {
    await api("PUT", `/api/exchanges/${seg(v.vhost)}/${seg(v.name)}`, { type: v.type, durable: v.durable });
    flash(`exchange '${v.name}' declared`);
    await refresh();
  });
  const bind = form("add-binding", [
    ["Vhost", "vhost", { value: "/" }], ["Source exchange", "source", { required: true }],
    ["Destination", "destination_type", { options: ["queue", "exchange"] }],
    ["Destination name", "destination", { required: true }], ["Routing key", "routing_key"],
  ], "Bind", async (v) => {
    const kind = v.destination_type === "queue" ? "q" : "e";
    const url = `/api/bindings/${seg(v.vhost)}/e/${seg(v.source)}/${kind}/${seg(v.destination)}`;
    await api("POST", url, { routing_key: v.routing_key, arguments: {} });
    flash(`bound ${v.destination} to ${v.source}`);
    await refresh();
  });
  const unbind = async (b) => {
    const kind = b.destination_type === "queue" ? "q" : "e";
    const url = `/api/bindings/${seg(b.vhost)}/e/${seg(b.source)}/${kind}/${seg(b.destination)}/${b.properties_key}`; // properties_key is URL-safe already
    await api("DELETE", url);
    flash("binding deleted");
    await refresh();
  };
  root.replaceChildren(h("h1", {}, "Exchanges"), list,
    h("section", {}, h("h2", {}, "Declare an exchange"), declare),
    h("h1", {}, "Bindings"), bindings,
    h("section", {}, h("h2", {}, "Add a binding"), bind));
  const refresh = async () => {
    const items = await get("/api/exchanges");
    list.replaceChildren(table([
      ["Vhost", (e) => e.vhost], ["Name", (e) => exchangeName(e.name)], ["Type", (e) => e.type],
      ["Durable", (e) => String(e.durable)], ["Internal", (e) => String(e.internal)],
    ], items));
    const bound = (await get("/api/bindings")).filter((b) => b.source !== "");
    bindings.replaceChildren(table([
      ["Vhost", (b) => b.vhost], ["Source", (b) => b.source], ["Destination", (b) => b.destination],
      ["Type", (b) => b.destination_type], ["Routing key", (b) => b.routing_key],
      ["", (b) => h("button", { class: "danger", onclick: () => unbind(b) }, "Unbind")],
    ], bound, "no bindings (besides the default exchange's)"));
  };
  await refresh();
  return refresh;
}

export async function messages(root) {
  const published = h("p", { id: "publish-result" });
  const browsed = h("div", { id: "browse-result" });
  const found = h("div", { id: "search-result" });
  const publish = form("publish", [
    ["Vhost", "vhost", { value: "/" }], ["Exchange", "exchange", { value: "amq.default" }],
    ["Routing key", "routing_key"], ["Payload", "payload", { rows: 3 }],
    ["Message id", "message_id"], ["Persistent", "persistent", { type: "checkbox" }],
  ], "Publish", async (v) => {
    const properties = { delivery_mode: v.persistent ? 2 : 1 };
    if (v.message_id) properties.message_id = v.message_id;
    const body = { routing_key: v.routing_key, payload: v.payload, payload_encoding: "string", properties };
    const answer = await api("POST", `/api/exchanges/${seg(v.vhost)}/${seg(v.exchange)}/publish`, body);
    published.textContent = answer.routed ? "routed" : "not routed (no queue matched)";
  });
  const browse = form("browse", [
    ["Vhost", "vhost", { value: "/" }], ["Queue", "queue", { required: true }],
    ["Offset", "offset", { type: "number", value: 0, min: 0 }],
    ["Limit", "limit", { type: "number", value: 20, min: 1 }],
  ], "Browse", async (v) => {
    const page = await get(`/api/queues/${seg(v.vhost)}/${seg(v.queue)}/messages?offset=${v.offset}&limit=${v.limit}`);
    browsed.replaceChildren(h("p", { class: "muted" }, `${page.messages_ready} ready`), messageRows(page.items));
  });
  const toMs = (text, fallback) => (text ? new Date(text).getTime() : fallback);
  const search = form("search", [
    ["Message key / id", "key", { required: true }],
    ["From", "from", { type: "datetime-local" }], ["To", "to", { type: "datetime-local" }],
  ], "Search", async (v) => {
    const query = `key=${seg(v.key)}&from=${toMs(v.from, 0)}&to=${toMs(v.to, Date.now() + 60000)}`;
    const result = await get(`/api/messages?${query}`);
    found.replaceChildren(messageRows(result.items));
  });
  root.replaceChildren(h("h1", {}, "Messages"),
    h("section", {}, h("h2", {}, "Publish"), publish, published),
    h("section", {}, h("h2", {}, "Browse a queue (without consuming)"), browse, browsed),
    h("section", {}, h("h2", {}, "Search the store (administrators)"), search, found));
}

export async function users(root) {
  const list = h("div", { id: "user-list" });
  const permissions = h("div", { id: "permission-list" });
  const add = form("add-user", [
    ["Name", "name", { required: true }], ["Password", "password", { type: "password", required: true }],
    ["Tags (comma separated)", "tags", { value: "management" }],
  ], "Add user", async (v) => {
    await api("PUT", `/api/users/${seg(v.name)}`, { password: v.password, tags: v.tags });
    flash(`user '${v.name}' saved`);
    await refresh();
  });
  const permit = form("set-permission", [
    ["User", "user", { required: true }], ["Vhost", "vhost", { value: "/" }],
    ["Configure", "configure", { value: ".*" }], ["Write", "write", { value: ".*" }],
    ["Read", "read", { value: ".*" }],
  ], "Set permissions", async (v) => {
    const { user, vhost, ...patterns } = v;
    await api("PUT", `/api/permissions/${seg(vhost)}/${seg(user)}`, patterns);
    flash(`permissions of '${user}' in '${vhost}' set`);
    await refresh();
  });
  const remove = async (u) => {
    await api("DELETE", `/api/users/${seg(u.name)}`);
    flash(`user '${u.name}' deleted`);
    await refresh();
  };
  root.replaceChildren(h("h1", {}, "Users"), list,
    h("section", {}, h("h2", {}, "Add or update a user"), add),
    h("h1", {}, "Permissions"), permissions,
    h("section", {}, h("h2", {}, "Set permissions"), permit));
  const refresh = async () => {
    list.replaceChildren(table([
      ["Name", (u) => u.name], ["Tags", (u) => u.tags.join(", ")],
      ["", (u) => h("button", { class: "danger", onclick: () => remove(u) }, "Delete")],
    ], await get("/api/users")));
    permissions.replaceChildren(table([
      ["User", (p) => p.user], ["Vhost", (p) => p.vhost], ["Configure", (p) => p.configure],
      ["Write", (p) => p.write], ["Read", (p) => p.read],
    ], await get("/api/permissions")));
  };
  await refresh();
}
