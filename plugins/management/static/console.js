// The console's entry point: login form, hash routes (#/queues, #/queue/<vhost>/<name>),
// polling the current view, and one place where errors end up (401: back to the login form).

import { Unauthorized, forget, get, loggedIn, remember } from "./api.js";
import { exchanges, messages, users } from "./admin_views.js";
import { cluster } from "./cluster.js";
import { flash } from "./flash.js";
import { connections, overview, queue, queues } from "./views.js";

const ROUTES = { overview, queues, queue, connections, exchanges, messages, cluster, users };
const POLL_MS = 2000;

const $ = (id) => document.getElementById(id);
let poller = null;
let rendering = 0;

function stopPolling() {
  if (poller !== null) clearInterval(poller);
  poller = null;
}

function showLogin(message = "") {
  stopPolling();
  forget();
  $("login").hidden = false;
  $("view").replaceChildren();
  for (const id of ["nav", "logout"]) $(id).hidden = true;
  $("whoami").textContent = "";
  flash(message, Boolean(message));
}

function failed(error) {
  if (error instanceof Unauthorized) showLogin("Please log in (wrong or expired credentials).");
  else flash(error.message || String(error), true);
}

async function route() {
  stopPolling();
  if (!loggedIn()) return showLogin();
  const [name, ...args] = window.location.hash.replace(/^#\/?/, "").split("/");
  const view = ROUTES[name] || overview;
  const turn = ++rendering;
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.getAttribute("href") === `#/${name || "overview"}`);
  }
  try {
    const me = await get("/api/whoami");
    $("login").hidden = true;
    $("nav").hidden = false;
    $("logout").hidden = false;
    $("nav-users").hidden = !me.tags.includes("administrator");
    // /api/cluster, like every plugin's GET route, asks for monitoring or administrator.
    $("nav-cluster").hidden = !me.tags.some((t) => t === "administrator" || t === "monitoring");
    $("whoami").textContent = `${me.name} (${me.tags.join(", ") || "no tags"})`;
    const refresh = await view($("view"), ...args.map(decodeURIComponent));
    if (typeof refresh === "function" && turn === rendering) {
      poller = setInterval(() => refresh().catch(failed), POLL_MS);
    }
  } catch (error) {
    failed(error);
  }
}

$("login").addEventListener("submit", (event) => {
  event.preventDefault();
  const data = new FormData(event.target);
  remember(data.get("user"), data.get("password"));
  flash("");
  route();
});
$("logout").addEventListener("click", () => showLogin());
window.addEventListener("hashchange", () => { flash(""); route(); });
// Form handlers are async: whatever they throw lands here.
window.addEventListener("unhandledrejection", (event) => {
  event.preventDefault();
  failed(event.reason);
});
route();
