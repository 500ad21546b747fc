// Line charts (uPlot, loaded by index.html as a classic script) and small sparklines (SVG).
import {h, svg} from './dom.js';

export const palette = [
  '#2f6fdf',
  '#d9480f',
  '#2b8a3e',
  '#862e9c',
  '#e67700',
  '#0b7285',
  '#c2255c',
  '#5c940d',
  '#364fc7',
  '#a61e4d',
  '#087f5b',
  '#495057',
];

function hasUplot() {
  return typeof window.uPlot === 'function';
}

function chartBox(title, width) {
  const box = h('div', {class: 'chart'}, h('div', {class: 'chart-title', text: title}));
  box.style.width = (width + 14) + 'px';
  return box;
}

// Y-axis labels: on an axis that reaches 10,000, compact (5K, 12.5K, 1.25M) with as many
// decimals as the tick step needs (up to two; beyond that, in full: 10,020 and 10,040 must not
// both read 10K); else with at most six significant digits. The axis is as wide as its longest
// label, so none is cut off.
function compactFormat(splits, incr) {
  const top = Math.max(0, ...splits.filter((v) => v != null && isFinite(v)).map(Math.abs));
  if (top < 1e4 || !(incr > 0)) return null;
  const step = incr / Math.pow(1000, Math.floor(Math.log10(top) / 3));  // in K, M, B units
  for (let digits = 0; digits <= 2; ++digits) {
    const scaled = step * Math.pow(10, digits);
    if (Math.abs(scaled - Math.round(scaled)) < 1e-6 * Math.max(1, scaled)) {
      return new Intl.NumberFormat('en', {notation: 'compact', maximumFractionDigits: digits});
    }
  }
  return null;
}
function yLabels(self, splits, axisIdx, space, incr) {
  const compact = compactFormat(splits, incr);
  const full = (v) => Number(v.toPrecision(6)).toLocaleString('en', {maximumFractionDigits: 6});
  return splits.map((v) => (v == null ? '' : compact ? compact.format(v) : full(v)));
}
function yAxisSize(self, values) {
  const longest = Math.max(1, ...(values || []).map((v) => String(v).length));
  return 22 + 7 * longest;
}

// A line chart of several series sharing one x axis, appended to `el`: data = [xs, ys1, ys2,
// ...], `names` one per y series. Options: width, height, log, xlabel, colors, series (uPlot
// options per series), bands. Returns the uPlot, or null when the library is missing.
export function lineChart(el, title, names, data, opts) {
  opts = opts || {};
  const width = opts.width || 430, height = opts.height || 220;
  const box = chartBox(title, width);
  el.append(box);
  if (!hasUplot()) {
    box.append(
        h('div', {class: 'muted', text: 'charting library missing (npm ci in dashboards/web)'}));
    return null;
  }
  const series = [{label: 'step'}];
  names.forEach(
      (n, i) => series.push(Object.assign(
          {
            label: n,
            stroke: (opts.colors && opts.colors[i]) || palette[i % palette.length],
            width: 1.5,
            points: {show: false},
            spanGaps: true,
          },
          (opts.series && opts.series[i]) || {})));
  return new window.uPlot(
      {
        width,
        height,
        series,
        bands: opts.bands || [],
        scales: {x: {time: false}, y: opts.log ? {distr: 3} : {}},
        legend: {show: names.length <= 12},
        axes: [{label: opts.xlabel || 'step'}, {values: yLabels, size: yAxisSize}],
      },
      data, box);
}

// A small line of recent readings (oldest left), scaled to [lo, hi]; nulls are gaps.
export function sparkline(values, lo, hi, cls) {
  const w = 90, hgt = 22;
  const y = (v) => hgt - 1 - ((Math.min(Math.max(v, lo), hi) - lo) / (hi - lo || 1)) * (hgt - 2);
  const x = (i) => (values.length > 1 ? (i * w) / (values.length - 1) : w);
  const pts = values.map((v, i) => (v === null || v === undefined ? null : [x(i), y(v)]));
  const runs = [];
  let cur = [];
  for (const p of pts) {
    if (p) {
      cur.push(p.map((c) => c.toFixed(1)).join(','));
    } else if (cur.length) {
      runs.push(cur);
      cur = [];
    }
  }
  if (cur.length) runs.push(cur);
  return svg(
      'svg', {class: 'spark ' + (cls || ''), width: w, height: hgt, viewBox: `0 0 ${w} ${hgt}`},
      runs.map((r) => svg('polyline', {points: r.length === 1 ? `${r[0]} ${r[0]}` : r.join(' ')})));
}
