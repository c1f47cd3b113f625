// Request quotas (Kafka's KIP-124): requests per second per role, per server process.
// Superusers only, as the API is.
import { api, paths } from "../api.js";
import { fill, h, notice } from "../dom.js";

export function render(root, { session }) {
  const status = notice();
  const content = h("div");
  fill(
    root,
    h("div", { class: "page-head" }, h("h1", {}, "Request quotas")),
    h(
      "p",
      { class: "muted" },
      "Requests per second a role may send to each server process; superusers are exempt.",
    ),
    status.element,
    content,
  );
  if (!session.superuser) {
    status.error("Only superusers manage request quotas.");
    return;
  }

  async function act(request) {
    try {
      await request();
      status.clear();
      await load();
    } catch (error) {
      status.error(error);
    }
  }

  async function load() {
    const quotas = await api(paths.requestQuotas);
    const defaultInput = rateInput("Default requests per second", quotas.default);
    const role = h("input", {
      type: "text",
      name: "role",
      placeholder: "role",
      required: true,
      pattern: "[^\\s]{1,255}",
      "aria-label": "Role",
    });
    const roleRate = rateInput("Role requests per second", null);
    const roles = Object.entries(quotas.roles).sort(([a], [b]) => a.localeCompare(b));
    fill(
      content,
      h(
        "section",
        { class: "panel" },
        h("h2", {}, "Default"),
        h(
          "form",
          {
            class: "inline",
            onSubmit: (event) => {
              event.preventDefault();
              act(() =>
                api(paths.defaultRequestQuota, {
                  method: "PUT",
                  body: { requestsPerSecond: Number(defaultInput.value) },
                }),
              );
            },
          },
          h("span", {}, "Every role without its own: "),
          defaultInput,
          h("button", { type: "submit", class: "secondary" }, "Set"),
          quotas.default !== null
            ? h(
                "button",
                {
                  type: "button",
                  class: "danger",
                  onClick: () => act(() => api(paths.defaultRequestQuota, { method: "DELETE" })),
                },
                "Remove",
              )
            : h("span", { class: "muted" }, "(none: not limited)"),
        ),
      ),
      h(
        "section",
        { class: "panel" },
        h("h2", {}, "Roles"),
        h(
          "table",
          {},
          h(
            "thead",
            {},
            h("tr", {}, h("th", {}, "Role"), h("th", { class: "num" }, "Requests/s"), h("th", {}, "")),
          ),
          h(
            "tbody",
            {},
            roles.length
              ? roles.map(([name, rate]) =>
                  h(
                    "tr",
                    { dataset: { role: name } },
                    h("td", { class: "mono" }, name),
                    h("td", { class: "num" }, String(rate)),
                    h(
                      "td",
                      {},
                      h(
                        "button",
                        {
                          type: "button",
                          class: "danger",
                          onClick: () =>
                            act(() => api(paths.roleRequestQuota(name), { method: "DELETE" })),
                        },
                        "Remove",
                      ),
                    ),
                  ),
                )
              : h("tr", {}, h("td", { colspan: 3, class: "muted" }, "No role has its own quota.")),
          ),
        ),
        h(
          "form",
          {
            class: "inline",
            onSubmit: (event) => {
              event.preventDefault();
              act(() =>
                api(paths.roleRequestQuota(role.value.trim()), {
                  method: "PUT",
                  body: { requestsPerSecond: Number(roleRate.value) },
                }),
              );
            },
          },
          role,
          roleRate,
          h("button", { type: "submit", class: "secondary" }, "Set role quota"),
        ),
      ),
    );
  }

  load().catch((error) => status.error(error));
}

function rateInput(label, value) {
  return h("input", {
    type: "number",
    min: 1,
    step: 1,
    required: true,
    value: value === null ? "" : String(value),
    placeholder: "requests/s",
    "aria-label": label,
  });
}
