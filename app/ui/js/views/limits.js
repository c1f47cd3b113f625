// A group's limits: a form for superusers, whose save sends only the fields changed (the
// API merges them into the group), and a plain table for everyone else.
import { api, paths } from "../api.js";
import { fill, h, notice } from "../dom.js";
import { formatLimit, LIMIT_FIELDS } from "../format.js";

const UNLIMITED_HINT = "-1 or 0: unlimited";

/** The panel, and `show(group)` to call with the group as the API answers it. */
export function limitsPanel(name, session) {
  return session.superuser ? limitsForm(name) : limitsTable();
}

function fieldLabel(field) {
  return [field.label, "/s", field.enforced ? null : h("div", { class: "small muted" }, "not enforced")];
}

function limitsTable() {
  const rows = h("tbody");
  const element = h(
    "section",
    { class: "panel limits" },
    h("h2", {}, "Limits"),
    h("table", {}, rows),
    h("p", { class: "small muted" }, "Only superusers change limits."),
  );
  return {
    element,
    show(group) {
      fill(
        rows,
        LIMIT_FIELDS.map((field) =>
          h(
            "tr",
            { dataset: { field: field.key } },
            h("th", { scope: "row" }, fieldLabel(field)),
            h("td", { class: "num" }, formatLimit(group[field.key], field)),
          ),
        ),
      );
    },
  };
}

function limitsForm(name) {
  const status = notice();
  const fields = LIMIT_FIELDS.map((field) => {
    const input = h("input", {
      type: "number",
      step: 1,
      min: -1,
      name: field.key,
      required: true,
      "aria-label": field.label,
      onInput: () => input.classList.toggle("changed", changed(field, input)),
    });
    return { field, input, now: h("td", { class: "num" }, "–") };
  });
  // The values the inputs were filled with: what "changed" means, so a save never sends a
  // field the operator did not touch (and never undoes someone else's change to it).
  let baseline = null;
  let latest = null;

  function changed(field, input) {
    return baseline !== null && input.value.trim() !== String(baseline[field.key]);
  }

  function reset(group) {
    baseline = { ...group };
    for (const { field, input } of fields) {
      input.value = String(group[field.key]);
      input.classList.remove("changed");
    }
  }

  async function save(event) {
    event.preventDefault();
    const changes = {};
    for (const { field, input } of fields) {
      const raw = input.value.trim();
      const value = Number(raw);
      if (raw === "" || !Number.isInteger(value) || value < -1) {
        status.error(`${field.label}: a whole number of units per second (${UNLIMITED_HINT})`);
        input.focus();
        return;
      }
      if (value !== baseline[field.key]) changes[field.key] = value;
    }
    if (!Object.keys(changes).length) {
      status.ok("Nothing to save: no field was changed.");
      return;
    }
    try {
      await api(paths.group(name), { method: "PUT", body: changes });
      const group = await api(paths.group(name));
      reset(group);
      show(group);
      const labels = LIMIT_FIELDS.filter(({ key }) => key in changes).map(({ label }) => label);
      status.ok(`Saved: ${labels.join(", ")}.`);
    } catch (error) {
      status.error(error);
    }
  }

  function show(group) {
    latest = group;
    if (baseline === null) reset(group);
    for (const { field, now } of fields) now.textContent = formatLimit(group[field.key], field);
  }

  const element = h(
    "section",
    { class: "panel limits" },
    h("h2", {}, "Limits"),
    status.element,
    h(
      "form",
      // Checked by `save`, which names the field and the rule in the panel's notice.
      { id: "limits-form", novalidate: true, onSubmit: save },
      h(
        "table",
        {},
        h(
          "thead",
          {},
          h("tr", {}, h("th", {}, "Per second"), h("th", { class: "num" }, "Now"), h("th", {}, "New")),
        ),
        h(
          "tbody",
          {},
          fields.map(({ field, input, now }) =>
            h(
              "tr",
              { dataset: { field: field.key } },
              h("th", { scope: "row" }, fieldLabel(field)),
              now,
              h("td", {}, input),
            ),
          ),
        ),
      ),
      h(
        "div",
        { class: "form-actions" },
        h("span", { class: "small muted" }, `${UNLIMITED_HINT}. Only changed fields are sent.`),
        h(
          "button",
          {
            type: "button",
            class: "secondary",
            onClick: () => {
              status.clear();
              if (latest) reset(latest);
            },
          },
          "Reset",
        ),
        h("button", { type: "submit", class: "primary" }, "Save limits"),
      ),
    ),
  );
  return { element, show };
}
