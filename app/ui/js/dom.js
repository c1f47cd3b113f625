// A small element builder: text always goes in as text, never as HTML.

/**
 * h("a", { href: "#/", class: "x", onClick: fn, dataset: { group: "g" } }, "text", child)
 * Attributes are set as attributes, except: `class`, `dataset`, `on…` listeners, and
 * `value`, `checked`, `disabled`, `hidden`, `selected` (set as properties).
 */
export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null) continue;
    if (key === "class") element.className = value;
    else if (key === "dataset") Object.assign(element.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      element.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (PROPERTIES.has(key)) element[key] = value;
    else if (value !== false) element.setAttribute(key, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

const PROPERTIES = new Set(["value", "checked", "disabled", "hidden", "selected"]);

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace an element's children. */
export function fill(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

/** A `<select>` of names, with an optional first entry. */
export function select(names, { value, placeholder, ...props } = {}) {
  return h(
    "select",
    props,
    placeholder !== undefined ? h("option", { value: "" }, placeholder) : null,
    names.map((name) => h("option", { value: name, selected: name === value }, name)),
  );
}

/** An element showing the outcome of an action: an error's reason, or a short success. */
export function notice() {
  const element = h("div", { class: "notice", role: "status" });
  return {
    element,
    error(error) {
      element.className = "notice error";
      element.textContent = error?.reason ?? error?.message ?? String(error);
    },
    ok(text) {
      element.className = "notice ok";
      element.textContent = text;
    },
    clear() {
      element.className = "notice";
      element.textContent = "";
    },
  };
}
