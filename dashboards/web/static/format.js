// How numbers, sizes, durations and times read on every page.

// A metric value: four decimals (or `digits`), exponent notation from a million, '-' if none.
export function fmt(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return '-';
  if (typeof v !== 'number') return String(v);
  if (Math.abs(v) >= 1e6) return v.toExponential(2);
  return v.toFixed(digits === undefined ? 4 : digits);
}

// A count with a unit letter: 12.5k, 3.1M, 1.2B.
export function fmtTokens(n) {
  if (!n) return '0';
  const units = [[1e12, 'T'], [1e9, 'B'], [1e6, 'M'], [1e3, 'k']];
  for (const [d, u] of units) {
    if (n >= d) return (n / d).toFixed(1) + u;
  }
  return String(n);
}

// Seconds as "2h 5m", "5m 3s" or "3s".
export function fmtDuration(s) {
  if (s === null || s === undefined) return '-';
  s = Math.round(s);
  const hh = Math.floor(s / 3600), mm = Math.floor((s % 3600) / 60), ss = s % 60;
  return hh ? `${hh}h ${mm}m` : mm ? `${mm}m ${ss}s` : `${ss}s`;
}

// Microseconds since the epoch (cartd's clock) in the browser's locale.
export function fmtTime(us) {
  return us ? new Date(us / 1000).toLocaleString() : '-';
}
