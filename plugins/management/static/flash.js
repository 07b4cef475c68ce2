// One status line under the header, for what an action did or why it failed.

export function flash(message, isError = false) {
  const el = document.getElementById("flash");
  el.textContent = message;
  el.className = isError ? "error" : "";
  el.hidden = !message;
}
