// Tiny DOM helpers. Everything shown is built with text nodes (never innerHTML), so queue
// names and message payloads cannot inject markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

// A table: columns are [heading, row => cell, "num"?]; a cell may be text or a node.
// `rowClass(row)` may give a row a class (undefined: none).
export function table(columns, rows, empty = "none", rowClass = () => undefined) {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  const head = h("tr", {}, columns.map(([title, , kind]) => h("th", { class: kind }, title)));
  const body = rows.map((row) =>
    h("tr", { class: rowClass(row) }, columns.map(([, cell, kind]) => h("td", { class: kind }, cell(row)))));
  return h("table", {}, h("thead", {}, head), h("tbody", {}, body));
}

// A form whose fields are [label, name, attrs]; `submit` gets the values as an object.
export function form(id, fields, buttonText, submit) {
  const inputs = fields.map(([label, name, attrs = {}]) => {
    const { options, ...rest } = attrs;
    const input = options
      ? h("select", { name, ...rest }, options.map((o) => h("option", { value: o }, o)))
      : h(attrs.rows ? "textarea" : "input", { name, ...rest });
    return h("label", {}, label, input);
  });
  const el = h("form", { id, class: "inline" }, inputs, h("button", { type: "submit" }, buttonText));
  el.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = {};
    for (const input of el.elements) {
      if (!input.name) continue;
      values[input.name] = input.type === "checkbox" ? input.checked : input.value;
    }
    submit(values, el);
  });
  return el;
}

export function bytes(n) {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = -1;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(1)} ${units[unit]}`;
}

export const rate = (stats, name) => ((stats || {})[`${name}_details`] || { rate: 0 }).rate.toFixed(1);
