// One group: live charts of usage, demand and allocation against its limit, its namespaces
// with their reporters, and its limits (edited here by superusers).
import { api, paths } from "../api.js";
import { UsageChart } from "../chart.js";
import { fill, h, notice } from "../dom.js";
import { DIMENSIONS, formatLimit, formatRate, SOURCES } from "../format.js";
import { poll, refreshInterval } from "../poll.js";
import { groupState, LEVEL_LABELS, lastSample, modeText } from "../usage.js";
import { limitsPanel } from "./limits.js";

// 5 minutes to watch a change land; up to the hour the history keeps by default.
const RANGES_MINUTES = [5, 15, 30, 60];
const DEFAULT_RANGE_S = 15 * 60;

export function render(root, { session }, { name }) {
  const ranges = RANGES_MINUTES.map((minutes) => minutes * 60).filter(
    (seconds) => seconds <= session.usageRetentionSeconds,
  );
  if (!ranges.length) ranges.push(session.usageRetentionSeconds);
  let since = ranges.includes(DEFAULT_RANGE_S) ? DEFAULT_RANGE_S : ranges[ranges.length - 1];

  const status = notice();
  const badge = h("span", { class: "badge idle", id: "group-status" }, "…");
  const reason = h("span", { class: "reason" });
  const mode = modeControl(name, session, status, () => refresh());
  const rangeButtons = ranges.map((seconds) =>
    h(
      "button",
      {
        type: "button",
        "aria-pressed": String(seconds === since),
        onClick: (event) => {
          since = seconds;
          for (const button of rangeButtons) {
            button.setAttribute("aria-pressed", String(button === event.currentTarget));
          }
          refresh();
        },
      },
      `${Math.round(seconds / 60)} min`,
    ),
  );
  const stats = {
    reporters: h("div", { class: "value", id: "reporters-now" }, "–"),
    namespaces: h("div", { class: "value" }, "–"),
    sample: h("div", { class: "value" }, "–"),
  };
  const cards = DIMENSIONS.map((dimension) => {
    const readout = h("div", { class: "readout" });
    const plot = h("div", { class: "chart", dataset: { dimension: dimension.key } });
    return {
      dimension,
      readout,
      plot,
      card: h(
        "article",
        { class: "chart-card" },
        h("header", {}, h("h3", {}, `${dimension.label}/s`), readout),
        plot,
      ),
    };
  });
  const namespaceRows = h("tbody");
  const limits = limitsPanel(name, session);

  fill(
    root,
    h(
      "div",
      { class: "page-head" },
      h("a", { href: "#/" }, "← Groups"),
      h("h1", {}, name),
      badge,
      mode.badge,
      reason,
      h("span", { class: "spacer" }),
      mode.button,
      h("div", { class: "range", role: "group", "aria-label": "Time range" }, rangeButtons),
    ),
    status.element,
    h(
      "section",
      { class: "panel stats" },
      stat(stats.reporters, "Reporters now"),
      stat(stats.namespaces, "Namespaces"),
      stat(stats.sample, "Last sample"),
    ),
    h("section", { class: "charts" }, cards.map(({ card }) => card)),
    h(
      "div",
      { class: "columns" },
      limits.element,
      h(
        "section",
        { class: "panel" },
        h("h2", {}, "Namespaces"),
        h(
          "table",
          { class: "namespaces" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              h("th", {}, "Namespace"),
              h("th", {}, "Group from"),
              h("th", { class: "num" }, "Reporters"),
            ),
          ),
          namespaceRows,
        ),
      ),
    ),
  );
  // Charts are made once the cards are in the page, so they take its width.
  for (const card of cards) card.chart = new UsageChart(card.plot, card.dimension);

  // Answers may come back out of order (a range change during a refresh): the latest asked wins.
  let asked = 0;
  async function refresh() {
    const ticket = ++asked;
    const range = since;
    let group;
    let history;
    try {
      [group, history] = await Promise.all([
        api(paths.group(name)),
        api(paths.usage(name, range)),
      ]);
    } catch (error) {
      if (ticket === asked) status.error(error);
      return;
    }
    if (ticket !== asked) return;
    status.clear();
    const state = groupState(history, group);
    badge.className = `badge ${state.level}`;
    badge.textContent = LEVEL_LABELS[state.level];
    reason.className = `reason ${state.level}`;
    reason.textContent = state.reason;
    mode.show(history);
    const last = lastSample(history);
    stats.reporters.textContent = String(state.reporters);
    stats.namespaces.textContent = String(history.namespaces.length);
    stats.sample.textContent = last
      ? new Date(last.time * 1000).toLocaleTimeString()
      : `none yet (every ${history.resolutionSeconds} s)`;
    for (const { dimension, readout, chart } of cards) {
      chart.update(history, range);
      const sample = last?.dimensions[dimension.key];
      fill(readout, figures(sample, group[dimension.key], dimension, history.mode));
    }
    fill(
      namespaceRows,
      history.namespaces.length
        ? history.namespaces.map(namespaceRow)
        : h("tr", {}, h("td", { colspan: 3, class: "muted" }, "No namespace uses this group.")),
    );
    limits.show(group);
  }

  const stop = poll(refresh, () => refreshInterval(session));
  return () => {
    stop();
    for (const { chart } of cards) chart.destroy();
  };
}

function stat(value, label) {
  return h("div", { class: "stat" }, value, h("div", { class: "label" }, label));
}

/**
 * The group's mode: a badge while it observes ("observe · would hold back 40%"), and for
 * superusers a button that switches it (`PUT .../mode`; its workers follow within a second).
 */
function modeControl(name, session, status, refresh) {
  const badge = h("span", { class: "badge observe", id: "group-mode", hidden: true });
  let current = null;
  const button = session.superuser
    ? h(
        "button",
        {
          type: "button",
          id: "group-mode-switch",
          hidden: true,
          onClick: async () => {
            const next = current === "observe" ? "enforce" : "observe";
            try {
              await api(paths.mode(name), { method: "PUT", body: { mode: next } });
            } catch (error) {
              status.error(error);
              return;
            }
            refresh();
          },
        },
        "…",
      )
    : null;
  return {
    badge,
    button,
    show(history) {
      current = history.mode ?? "enforce";
      badge.hidden = current !== "observe";
      badge.textContent = modeText(history);
      if (button) {
        button.hidden = false;
        button.textContent = current === "observe" ? "Enforce" : "Observe only";
        button.title =
          current === "observe"
            ? "Hold the group's workers to their allocations"
            : "Let the group's workers send unheld, recording what enforcing would hold back";
      }
    },
  };
}

/** The last sample's figures, coloured as their lines are; the limit as configured now. */
function figures(sample, limit, dimension, mode) {
  const figure = (kind, value) => [
    h("span", { class: kind }, `${kind} `, h("b", {}, formatRate(value, dimension))),
    " · ",
  ];
  return [
    figure("usage", sample?.usage ?? null),
    figure("demand", sample ? sample.demand : null),
    figure("allocation", sample ? sample.allocation : null),
    h("span", { class: "limit" }, "limit ", h("b", {}, formatLimit(limit, dimension))),
    mode === "observe" && sample?.holdBack != null
      ? [
          " · ",
          h(
            "span",
            { class: "hold-back" },
            "would hold back ",
            h("b", {}, `${Math.round(sample.holdBack * 100)}%`),
          ),
        ]
      : null,
  ];
}

function namespaceRow({ namespace, source, reporters }) {
  return h(
    "tr",
    { dataset: { namespace } },
    h("td", { class: "mono" }, namespace),
    h("td", {}, h("span", { class: "badge source" }, SOURCES[source] ?? source)),
    h("td", { class: "num" }, String(reporters)),
  );
}
