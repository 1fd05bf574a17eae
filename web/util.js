// Helpers shared by the explorer's modules: number formats, DOM construction, colours. No state
// and no DOM access at import, so the browser tests can import this file in node too (the
// canvas test computes the colours a cell must have with the same functions).

export const $ = (sel) => document.querySelector(sel);

// Four significant digits; masked (null) entries read "masked".
export function fmt(x) {
  if (x === null || x === undefined) return 'masked';
  if (x === 0) return '0';
  return Number(x).toPrecision(4);
}
// A signed part (attribution): "+1.234" or "-0.5678".
export const signed = (x) => (x > 0 ? '+' : '') + fmt(x);
// Token texts arrive display-ready (control bytes escaped by explain()); quote them.
export const quote = (t) => `“${t}”`;
export const pct = (p) => (100 * p).toFixed(2) + '%';
export const sub = (n) => String(n).replace(/\d/g, (d) => '₀₁₂₃₄₅₆₇₈₉'[d]);
export const visible = (t) => t.replace(/ /g, '␣');

export const transpose = (m) => (m.length ? m[0].map((_, c) => m.map((row) => row[c])) : m);

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

// Colours: weights 0..1 white to deep blue; signed numbers diverging around 0 (blue < 0 < red),
// as [r, g, b] (the canvases) and as CSS (the DOM).
export function weightRGB(w) {
  const t = Math.max(0, Math.min(1, w));
  const mix = (a, b) => Math.round(a + (b - a) * t);
  return [mix(255, 22), mix(255, 64), mix(255, 140)];
}
export function divergingRGB(x, maxAbs) {
  const t = maxAbs > 0 ? Math.max(-1, Math.min(1, x / maxAbs)) : 0;
  const a = Math.abs(t);
  const mix = (from, to) => Math.round(from + (to - from) * a);
  return t >= 0 ? [mix(255, 180), mix(255, 30), mix(255, 40)] : [mix(255, 30), mix(255, 80), mix(255, 180)];
}
const css = ([r, g, b]) => `rgb(${r},${g},${b})`;
export const weightColour = (w) => css(weightRGB(w));
export const divergingColour = (x, maxAbs) => css(divergingRGB(x, maxAbs));
export const textColour = (bg) => {
  const [r, g, b] = bg.match(/\d+/g).map(Number);
  return 0.299 * r + 0.587 * g + 0.114 * b < 140 ? '#fff' : '#111';
};
// A masked cell on a canvas: the DOM heatmap's hatching, pixel by pixel.
export const maskedRGB = (x, y) => ((((x + y) >> 2) & 1) ? [215, 215, 215] : [238, 238, 238]);

// The largest |x| of a list or a matrix (nulls skipped), for the diverging colours.
export function maxAbsOf(values) {
  let m = 0;
  for (const x of values.flat()) if (x !== null && x !== undefined) m = Math.max(m, Math.abs(x));
  return m;
}

// POST (with a body) or GET one API route; a refusal throws the server's one line.
export async function api(path, body) {
  const res = await fetch(path, body === undefined ? {} : {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  const json = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
  if (!res.ok) throw new Error(json.error || `HTTP ${res.status}`);
  return json;
}
