// What a group's usage history says now: per dimension, how close usage and demand are to
// the limit, and in one word whether the group is saturated and why.
import { DIMENSIONS, isUnlimited, plural, shareOfLimit } from "./format.js";

/** At this share of its limit a dimension is saturated; at BUSY it is getting there. */
export const SATURATED = 0.95;
export const BUSY = 0.8;

const SEVERITY = { idle: 0, unlimited: 1, ok: 2, busy: 3, saturated: 4 };

/**
 * The figures of the last sample, or null while the group has none yet; usage is the last
 * complete one (a moment's usage is null until every report covering it has come), and
 * `usageTime` its moment (null while none is complete).
 */
export function lastSample(history) {
  const index = history.times.length - 1;
  if (index < 0) return null;
  const complete = lastComplete(history);
  const dimensions = {};
  for (const { key } of DIMENSIONS) {
    const series = history.dimensions[key];
    dimensions[key] = {
      limit: series.limit[index],
      usage: complete === null ? null : series.usage[complete],
      demand: series.demand[index],
      allocation: series.allocation[index],
      // Of the usage, what the allocations did not cover (null from a server without it).
      holdBack: complete === null ? null : (series.holdBack?.[complete] ?? null),
    };
  }
  const usageTime = complete === null ? null : history.times[complete];
  return { time: history.times[index], usageTime, reporters: history.reporters[index], dimensions };
}

function lastComplete(history) {
  for (let index = history.times.length - 1; index >= 0; index -= 1) {
    if (DIMENSIONS.every(({ key }) => history.dimensions[key].usage[index] !== null)) return index;
  }
  return null;
}

/**
 * One dimension's state: usage and demand as shares of the limit. `limit` is the group's
 * configured rate now (a change shows at once, before the next sample has it).
 */
export function dimensionState(figures, limit) {
  if (isUnlimited(limit)) return { level: "unlimited", ratio: null, demandRatio: null };
  const usage = figures?.usage ?? 0;
  const demand = figures ? figures.demand : 0;
  const ratio = usage / limit;
  const demandRatio = demand === null ? null : demand / limit;
  let level = "ok";
  if (ratio >= SATURATED || (demandRatio !== null && demandRatio > 1)) level = "saturated";
  else if (ratio >= BUSY) level = "busy";
  return { level, ratio, demandRatio };
}

/**
 * The group's state: the worst of its dimensions', and a reason an operator can act on
 * ("Publish msgs: demand 125% of limit · 3 reporters").
 */
export function groupState(history, limits) {
  const last = lastSample(history);
  const reporters = last?.reporters ?? 0;
  const dimensions = DIMENSIONS.map((dimension) => ({
    dimension,
    figures: last?.dimensions[dimension.key] ?? null,
    ...dimensionState(last?.dimensions[dimension.key], limits[dimension.key]),
  }));
  if (last === null) {
    return { level: "idle", reason: "no sample yet", reporters, dimensions };
  }
  if (reporters === 0) {
    return { level: "idle", reason: "no reporters", reporters, dimensions };
  }
  const level = dimensions.reduce(
    (worst, { level }) => (SEVERITY[level] > SEVERITY[worst] ? level : worst),
    "unlimited",
  );
  const causes = dimensions
    .filter((state) => state.level === level && (level === "saturated" || level === "busy"))
    .map(({ dimension, ratio, demandRatio }) =>
      demandRatio !== null && demandRatio > 1
        ? `${dimension.label}: demand ${shareOfLimit(demandRatio)}`
        : `${dimension.label}: usage ${shareOfLimit(ratio)}`,
    );
  const reason = [...causes, plural(reporters, "reporter")].join(" · ");
  return { level, reason, reporters, dimensions };
}

/**
 * In observe mode, the most any dimension would hold back (a share of its usage, 0-1), or
 * null: the group enforces, or no usage is complete yet. The history's `holdBack` is
 * max(0, usage - allocation) / usage per sample.
 */
export function wouldHoldBack(history) {
  if (history.mode !== "observe") return null;
  const last = lastSample(history);
  if (last === null) return null;
  const shares = DIMENSIONS.map(({ key }) => last.dimensions[key].holdBack).filter(
    (share) => share !== null,
  );
  return shares.length ? Math.max(...shares) : null;
}

/** "observe · would hold back 40%", or "observe" while nothing is known yet. */
export function modeText(history) {
  const share = wouldHoldBack(history);
  return share === null ? "observe" : `observe · would hold back ${Math.round(share * 100)}%`;
}

export const LEVEL_LABELS = {
  idle: "idle",
  unlimited: "unlimited",
  ok: "ok",
  busy: "busy",
  saturated: "saturated",
};
