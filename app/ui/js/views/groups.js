// The groups at a glance: limits, and live usage against them, saturated groups named.
import { api, mapLimit, paths } from "../api.js";
import { fill, h, notice } from "../dom.js";
import { DIMENSIONS, formatFigure, formatRate, plural } from "../format.js";
import { poll, refreshInterval } from "../poll.js";
import { groupState, LEVEL_LABELS, modeText } from "../usage.js";

// The server's rule (app/schemas.py): 1-255 of these characters, but not "." or "..".
const NAME_PATTERN =
  "[A-Za-z0-9_=:\\-][A-Za-z0-9_=:.\\-]{0,254}|\\.[A-Za-z0-9_=:\\-][A-Za-z0-9_=:.\\-]{0,253}|\\.\\.[A-Za-z0-9_=:.\\-]{1,253}";

export function render(root, { session }) {
  const status = notice();
  const summary = h("p", { class: "summary muted", id: "summary" }, "Loading…");
  const rows = h("tbody");
  fill(
    root,
    h(
      "div",
      { class: "page-head" },
      h("h1", {}, "Resource groups"),
      h("span", { class: "spacer" }),
      session.superuser ? createForm(status) : null,
    ),
    status.element,
    h(
      "section",
      { class: "panel" },
      summary,
      h(
        "table",
        { class: "groups" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            h("th", {}, "Group"),
            h("th", {}, "Status"),
            h("th", { class: "num" }, "Reporters"),
            DIMENSIONS.map((dimension) => h("th", {}, `${dimension.label}/s`)),
          ),
        ),
        rows,
      ),
    ),
  );

  // Only the last sample and the last complete usage are needed: a few resolutions' worth
  // past the time usage takes to be complete makes sure there are both.
  const since = Math.max(session.usageCompleteAfterSeconds + 3 * session.usageResolutionSeconds, 3);

  async function refresh() {
    let names;
    try {
      // Asked again each time: groups created or deleted since appear or go.
      names = (await api(paths.session)).resourceGroups;
    } catch (error) {
      status.error(error);
      return;
    }
    const groups = await mapLimit(names, 6, async (name) => {
      try {
        const [limits, history] = await Promise.all([
          api(paths.group(name)),
          api(paths.usage(name, since)),
        ]);
        return { name, limits, history, state: groupState(history, limits) };
      } catch (error) {
        return { name, error };
      }
    });
    const shown = groups.filter(({ error }) => error?.status !== 404); // deleted meanwhile
    status.clear();
    fill(rows, shown.length ? shown.map(row) : emptyRow(session));
    fill(summary, summarize(shown));
  }

  return poll(refresh, () => refreshInterval(session));
}

function row({ name, limits, history, state, error }) {
  const link = h("a", { href: `#/groups/${encodeURIComponent(name)}` }, name);
  if (error) {
    return h(
      "tr",
      { dataset: { group: name } },
      h("td", {}, link),
      h("td", { colspan: 2 + DIMENSIONS.length, class: "muted" }, error.reason),
    );
  }
  return h(
    "tr",
    { dataset: { group: name, status: state.level } },
    h("td", {}, h("strong", {}, link)),
    h(
      "td",
      {},
      h("span", { class: `badge ${state.level}` }, LEVEL_LABELS[state.level]),
      history.mode === "observe"
        ? [" ", h("span", { class: "badge observe", dataset: { mode: "observe" } }, modeText(history))]
        : null,
      h("div", { class: `reason ${state.level}` }, state.reason),
    ),
    h("td", { class: "num" }, String(state.reporters)),
    state.dimensions.map((dimensionState) =>
      h("td", {}, meter(dimensionState, limits[dimensionState.dimension.key])),
    ),
  );
}

/** Usage as a bar against the limit, demand as a tick on it. */
function meter({ dimension, figures, level, ratio, demandRatio }, limit) {
  const usage = figures?.usage ?? 0;
  const bar = h("div", { class: "bar" });
  const lines = [];
  if (level === "unlimited") {
    lines.push(`${formatRate(usage, dimension)} · unlimited`);
  } else {
    const used = h("div", { class: "fill" });
    used.style.width = `${Math.min(ratio, 1) * 100}%`;
    bar.append(used);
    if (demandRatio !== null && demandRatio > 0) {
      const demand = h("div", { class: "demand" });
      demand.style.left = `calc(${Math.min(demandRatio, 1) * 100}% - 1px)`;
      bar.append(demand);
    }
    lines.push(`${formatFigure(usage, dimension)} / ${formatRate(limit, dimension)}`);
    const demand = figures ? figures.demand : 0;
    if (demand === null) lines.push("demand unknown");
    else if (demand > 0) lines.push(`demand ${formatFigure(demand, dimension)}`);
  }
  return h(
    "div",
    {
      class: `meter ${level}`,
      title: lines.join(", "),
      dataset: { dimension: dimension.key, level },
    },
    bar,
    h("div", { class: "figures" }, lines.join(" · ")),
  );
}

function summarize(groups) {
  if (!groups.length) return "";
  const saturated = groups.filter(({ state }) => state?.level === "saturated");
  const live = groups.filter(({ state }) => state && state.reporters > 0);
  const parts = [
    plural(groups.length, "group"),
    `${live.length} with reporters`,
    saturated.length
      ? `saturated: ${saturated.map(({ name }) => name).join(", ")}`
      : "none saturated",
  ];
  return parts.join(" · ");
}

function emptyRow(session) {
  const text = session.superuser
    ? "No resource groups yet: create one above, or with PUT /admin/v2/resourcegroups/{name}."
    : "None of your tenants' namespaces is under a resource group.";
  return h("tr", {}, h("td", { colspan: 3 + DIMENSIONS.length, class: "muted" }, text));
}

function createForm(status) {
  const name = h("input", {
    type: "text",
    name: "name",
    placeholder: "new group name",
    required: true,
    pattern: NAME_PATTERN,
    title: "1-255 letters, digits and _-=:., but not . or ..",
    "aria-label": "New group name",
  });
  return h(
    "form",
    {
      class: "inline",
      onSubmit: async (event) => {
        event.preventDefault();
        const group = name.value.trim();
        try {
          const { resourceGroups } = await api(paths.session);
          if (resourceGroups.includes(group)) {
            status.error(`ResourceGroup ${group} already exists`);
            return;
          }
          // Omitted fields are -1 (unlimited) on create; limits are set on the group's page.
          await api(paths.group(group), { method: "PUT", body: {} });
          window.location.hash = `#/groups/${encodeURIComponent(group)}`;
        } catch (error) {
          status.error(error);
        }
      },
    },
    name,
    h("button", { type: "submit", class: "primary" }, "Create group"),
  );
}
