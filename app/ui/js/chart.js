// A live chart of one dimension of a group: usage, demand and allocation against the limit,
// drawn by uPlot (served from vendor/, like every file the dashboard loads).
import uPlot from "../vendor/uplot/uPlot.esm.js";
import { formatFigure, isUnlimited } from "./format.js";

const HEIGHT = 230;
// Axis steps for bytes: 1, 2, 5, 10... of B, KiB, MiB and on, so ticks read "512 KiB".
const BYTE_INCREMENTS = [0, 1, 2, 3, 4, 5, 6].flatMap((power) =>
  [1, 2, 4, 8, 16, 32, 64, 128, 256, 512].map((step) => step * 1024 ** power),
);

/** A tick of the time axis: hours and minutes, and seconds where ticks are closer. */
function clock(seconds, step) {
  const options = { hour: "2-digit", minute: "2-digit", hourCycle: "h23" };
  if (step < 60) options.second = "2-digit";
  return new Date(seconds * 1000).toLocaleTimeString([], options);
}

function color(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(`--${name}`).trim();
}

export class UsageChart {
  /** A chart of `dimension` (an entry of DIMENSIONS) drawn into `container`. */
  constructor(container, dimension) {
    this.container = container;
    this.dimension = dimension;
    // The time window shown, whatever the samples cover: a fresh group's few samples sit
    // at the right end of an otherwise empty chart instead of being stretched across it.
    this.window = { start: Date.now() / 1000 - 900, end: Date.now() / 1000 };
    const figure = (_plot, value) => formatFigure(value, dimension);
    const usage = color("usage");
    this.plot = new uPlot(
      {
        width: Math.max(container.clientWidth, 320),
        height: HEIGHT,
        legend: { live: false },
        cursor: { drag: { x: false, y: false } },
        scales: {
          x: { time: true, range: () => [this.window.start, this.window.end] },
          y: { range: (plot) => [0, this.top(plot)] },
        },
        series: [
          {},
          { label: "usage", stroke: usage, fill: `${usage}26`, width: 2, value: figure },
          { label: "demand", stroke: color("demand"), dash: [7, 4], width: 1.5, value: figure },
          { label: "allocation", stroke: color("allocation"), dash: [2, 3], width: 1.5, value: figure },
          {
            label: "limit",
            stroke: color("limit"),
            width: 2,
            paths: uPlot.paths.stepped({ align: 1 }),
            value: figure,
          },
        ],
        axes: [
          { space: 70, values: (_plot, splits, _axis, _space, step) => splits.map((t) => clock(t, step)) },
          {
            size: 70,
            incrs: dimension.bytes ? BYTE_INCREMENTS : undefined,
            values: (_plot, splits) => splits.map((v) => figure(null, v)),
          },
        ],
      },
      [[], [], [], [], []],
      container,
    );
    this.resizer = new ResizeObserver(() => {
      const width = this.container.clientWidth;
      if (width > 0 && width !== this.plot.width) this.plot.setSize({ width, height: HEIGHT });
    });
    this.resizer.observe(container);
  }

  /**
   * The top of the y axis. A demand far above the limit (workers that would run unthrottled
   * many times faster) would flatten everything else: the axis stops at twice the highest
   * of usage, allocation and limit, and the readout above the chart gives the demand.
   */
  top(plot) {
    const highest = (index) => Math.max(0, ...plot.data[index].filter((v) => v !== null));
    const base = Math.max(highest(1), highest(3), highest(4));
    const demand = highest(2);
    const top = base > 0 ? Math.max(base, Math.min(demand, 2 * base)) : demand;
    return top > 0 ? top * 1.12 : this.dimension.bytes ? 1024 : 10;
  }

  /** Draw a usage history (the API's answer) over the last `sinceSeconds`. */
  update(history, sinceSeconds) {
    const series = history.dimensions[this.dimension.key];
    const times = history.times;
    const end = times.length ? times[times.length - 1] : Date.now() / 1000;
    this.window = { start: end - sinceSeconds, end };
    // Unlimited is -1 in the API; the chart draws no limit line for it.
    const limit = series.limit.map((value) => (isUnlimited(value) ? null : value));
    this.plot.setData([times, series.usage, series.demand, series.allocation, limit]);
    // For people and tests alike: how many samples the chart holds and when the last was.
    this.container.dataset.points = String(times.length);
    this.container.dataset.last = times.length ? String(end) : "";
  }

  destroy() {
    this.resizer.disconnect();
    this.plot.destroy();
  }
}
