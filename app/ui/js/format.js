// The enforced dimensions, as the admin API names them, and how their figures read.

export const DIMENSIONS = [
  { key: "publishRateInMsgs", label: "Publish msgs", bytes: false },
  { key: "publishRateInBytes", label: "Publish bytes", bytes: true },
  { key: "dispatchRateInMsgs", label: "Dispatch msgs", bytes: false },
  { key: "dispatchRateInBytes", label: "Dispatch bytes", bytes: true },
];

/** Every field of a group: the enforced ones, then replication's (stored, not enforced). */
export const LIMIT_FIELDS = [
  ...DIMENSIONS.map((dimension) => ({ ...dimension, enforced: true })),
  {
    key: "replicationDispatchRateInMsgs",
    label: "Replication dispatch msgs",
    bytes: false,
    enforced: false,
  },
  {
    key: "replicationDispatchRateInBytes",
    label: "Replication dispatch bytes",
    bytes: true,
    enforced: false,
  },
];

/** -1 and 0 both mean unlimited, as in Pulsar. */
export function isUnlimited(limit) {
  return limit === null || limit === undefined || limit <= 0;
}

const plain = new Intl.NumberFormat("en", { maximumFractionDigits: 1 });
const whole = new Intl.NumberFormat("en", { maximumFractionDigits: 0 });
const compact = new Intl.NumberFormat("en", { notation: "compact", maximumFractionDigits: 1 });
const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

export function formatCount(value) {
  const size = Math.abs(value);
  if (size < 100) return plain.format(value);
  return size < 10_000 ? whole.format(value) : compact.format(value);
}

export function formatBytes(value) {
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const digits = unit === 0 || Math.abs(value) >= 100 ? 0 : 1;
  return `${value.toFixed(digits)} ${BYTE_UNITS[unit]}`;
}

/** A figure of a dimension, without its unit ("1.2K", "3.5 MiB"); "–" when unknown. */
export function formatFigure(value, dimension) {
  if (value === null || value === undefined) return "–";
  return dimension.bytes ? formatBytes(value) : formatCount(value);
}

/** A rate of a dimension, with its unit ("1,990 msgs/s", "3.5 MiB/s"). */
export function formatRate(value, dimension) {
  if (value === null || value === undefined) return "–";
  return dimension.bytes ? `${formatBytes(value)}/s` : `${formatCount(value)} msgs/s`;
}

export function formatLimit(limit, dimension) {
  return isUnlimited(limit) ? "unlimited" : formatRate(limit, dimension);
}

/** A share of a limit: "95% of limit", or "12× the limit" once it is ten times over. */
export function shareOfLimit(ratio) {
  return ratio >= 10 ? `${Math.round(ratio)}× the limit` : `${Math.round(ratio * 100)}% of limit`;
}

export function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}

export const SOURCES = {
  namespace: "own",
  tenant: "tenant's",
  default: "default",
};
