// The management API as the console uses it: HTTP basic auth with credentials kept in
// sessionStorage (gone when the tab closes), JSON in and out. A 401 forgets the credentials
// and throws Unauthorized, which sends the console back to its login form.

const KEY = "herald.credentials";

export class Unauthorized extends Error {}

export class ApiError extends Error {
  constructor(status, reason) {
    super(`${status}: ${reason}`);
    this.status = status;
  }
}

export function remember(user, password) {
  // btoa takes bytes as a "binary string": encode UTF-8 first so any password works.
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  sessionStorage.setItem(KEY, btoa(String.fromCharCode(...bytes)));
}

export function forget() { sessionStorage.removeItem(KEY); }

export function loggedIn() { return sessionStorage.getItem(KEY) !== null; }

// A path segment: vhost "/" becomes %2F, as the API expects.
export const seg = encodeURIComponent;

export async function api(method, path, body, extraHeaders = {}) {
  const headers = {
    // Without this header a 401 carries WWW-Authenticate and the browser would open its own
    // password dialog instead of letting the console show its form.
    "X-Requested-With": "XMLHttpRequest",
    Authorization: `Basic ${sessionStorage.getItem(KEY) || ""}`,
    ...extraHeaders,
  };
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    forget();
    throw new Unauthorized("login required");
  }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = text; }
  if (!response.ok) throw new ApiError(response.status, (data && data.reason) || response.statusText);
  return data;
}

export const get = (path) => api("GET", path);
