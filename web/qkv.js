// Q, K and V of the selected head for the selected query i, one cell per dimension: Q_i, every
// K_j and V_j, and Q_i · K_j taken apart into its per-dimension products q_i[d] k_j[d], whose
// sum is the raw score (the API's scores[i][j], up to float32 rounding of the model's own dot
// product), so one sees which dimensions make the compatibility score. Paper notation draws
// the vectors as rows; 3Blue1Brown as columns (the same cells, transposed). Up to CANVAS_ABOVE
// tokens every cell is a DOM element with its data-value; beyond, the K, product and V blocks
// are canvases (web/canvas.js) and the hover readout gives the numbers.

import { $, fmt, quote, sub, el, divergingRGB, maxAbsOf, visible, api } from './util.js';
import { state, T, CANVAS_ABOVE, notation, selectedHead } from './state.js';
import { matrixCanvas } from './canvas.js';

const css = ([r, g, b]) => `rgb(${r},${g},${b})`;
const ink = ([r, g, b]) => (0.299 * r + 0.587 * g + 0.114 * b < 140 ? '#fff' : '#111');

// The products q_i[d] k_j[d] (null for a key query i does not hear) and their sums, in d order.
export function products(hd, i) {
  const q = hd.q[i];
  const prod = hd.k.map((k, j) => (hd.mask[i][j] ? q.map((x, dd) => x * k[dd]) : null));
  const sums = prod.map((p) => (p ? p.reduce((s, x) => s + x, 0) : null));
  return { prod, sums };
}

// rows: [{label, attrs, cells: [{value (null: masked), attrs}], tail: [{text, value, cls}]}] as one
// CSS grid: row r = vector r, column d = dimension d (paper), or transposed (3b1b).
function strips(kind, rows, maxAbs, cols, D, tailHeads = []) {
  const wide = D <= 16;  // few dimensions: the numbers fit in the cells
  const place = (r, c) => (cols ? `grid-row:${c};grid-column:${r}` : `grid-row:${r};grid-column:${c}`);
  const grid = el('div', { class: `strips${wide ? ' wide' : ''}`, 'data-kind': kind, 'data-transposed': String(cols),
    'data-max-abs': String(maxAbs) });
  const n = rows.length;
  const template = (count) => `auto repeat(${count}, ${wide ? '3.9em' : `${Math.max(4, Math.floor(420 / D))}px`})`;
  grid.style.gridTemplateColumns = cols ? `auto repeat(${n}, ${wide ? 'minmax(3.9em, max-content)' : '10px'})`
    : template(D) + ' auto'.repeat(tailHeads.length);
  for (let dd = 0; dd < D; ++dd) grid.append(el('span', { class: 'dim', style: place(1, dd + 2), text: String(dd) }));
  tailHeads.forEach((h, t) => grid.append(el('span', { class: 'dim tail-head', style: place(1, D + 2 + t), text: h })));
  rows.forEach((row, r) => {
    grid.append(el('span', { class: 'strip-label', style: place(r + 2, 1), text: row.label, ...row.attrs }));
    row.cells.forEach((c, dd) => {
      const attrs = { class: 'cell', style: place(r + 2, dd + 2), 'data-row': r, 'data-d': dd,
        'data-value': c.value === null ? 'null' : String(c.value), ...c.attrs };
      if (c.value === null) attrs.class += ' masked';
      else {
        const rgb = divergingRGB(c.value, maxAbs);
        attrs.style += `;background:${css(rgb)};color:${ink(rgb)}`;
        if (wide) attrs.text = fmt(c.value);
      }
      grid.append(el('span', attrs));
    });
    (row.tail || []).forEach((t, k) => grid.append(el('span', { class: `tail num ${t.cls}`, style: place(r + 2, D + 2 + k),
      'data-row': r, 'data-value': t.value === null ? 'null' : String(t.value), text: t.text ?? fmt(t.value) })));
  });
  return grid;
}

export function renderQKV(onQuery) {
  const d = state.data;
  const { layer, head } = state.selected;
  const hd = selectedHead();
  $('#qkv-title').textContent = T('qkv.title', layer, head);
  const sel = $('#qkv-query');
  sel.replaceChildren(...d.tokens.map((t) => el('option', { value: t.index, text: `${t.index} ${quote(t.text)}` })));
  if (onQuery) sel.onchange = () => onQuery(Number(sel.value));
  const box = $('#qkv');
  box.replaceChildren();
  setReadout(null);
  for (const k of Object.keys(box.dataset)) delete box.dataset[k];
  if (!hd) { box.append(el('p', { class: 'muted', text: T('head.loading') })); return; }
  const n = hd.q.length, D = hd.q[0].length;
  const i = Math.min(state.query ?? n - 1, n - 1);
  sel.value = String(i);
  const cols = notation() === '3b1b';
  const tok = d.tokens[i];
  box.dataset.query = String(i);
  box.dataset.layer = String(layer);
  box.dataset.head = String(head);
  // E_i: the API gives its parts' norms (the vectors are not in the answer).
  const norm = (cls, v) => el('span', { class: `num ${cls}`, 'data-value': String(v), text: fmt(v) });
  box.append(el('p', { class: 'qkv-embed' },
    el('span', { text: T('qkv.embed', sub(i), quote(tok.text)) }), ' ',
    el('span', { text: '‖wte‖ = ' }), norm('tok-norm', tok.token_embedding_norm),
    el('span', { text: ', ‖wpe‖ = ' }), norm('pos-norm', tok.position_embedding_norm),
    el('span', { text: ', ‖E‖ = ‖wte + wpe‖ = ' }), norm('emb-norm', tok.embedding_norm),
    el('span', { class: 'muted', text: ' ' + T(layer === 0 ? 'qkv.input0' : 'qkv.inputL', layer) })));
  // Its vectors (the rows of wte and wpe): one cheap request per token, kept for the page's life.
  const ebox = el('div', { class: 'qkv-e', 'data-query': String(i) });
  box.append(ebox);
  renderEmbedding(ebox, d.prompt, i, cols);
  const label = (name, j) => `${name}${sub(j)} ${visible(d.tokens[j].text)}`;
  const qMax = maxAbsOf(hd.q[i]);
  box.append(el('h4', { text: T('qkv.q', sub(i)) }),
    strips('q', [{ label: label('Q', i), cells: hd.q[i].map((value) => ({ value })) }], qMax, cols, D));
  const { prod, sums } = products(hd, i);
  const kMax = maxAbsOf(hd.k), vMax = maxAbsOf(hd.v);
  const pMax = maxAbsOf(prod.filter((p) => p));
  const big = n > CANVAS_ABOVE;
  box.dataset.path = big ? 'canvas' : 'dom';
  const hover = (kind, j, dd) => setReadout({ kind, i, j, dd, hd, prod, sums });
  if (!big) {
    const kRows = hd.k.map((k, j) => ({ label: label('K', j), cells: k.map((value) => ({ value })) }));
    const pRows = prod.map((p, j) => ({
      label: label('K', j),
      cells: (p || new Array(D).fill(null)).map((value) => ({ value })),
      tail: [{ value: sums[j], cls: 'sum', text: sums[j] === null ? '—' : fmt(sums[j]) },
        { value: hd.scores[i][j], cls: 'score', text: hd.scores[i][j] === null ? '' : fmt(hd.scores[i][j]) },
        { value: hd.weights[i][j], cls: 'weight' }],
    }));
    const vRows = hd.v.map((v, j) => ({ label: label('V', j), cells: v.map((value) => ({ value })),
      tail: [{ value: hd.weights[i][j], cls: 'weight' }] }));
    const blocks = [
      ['k', T('qkv.k'), strips('k', kRows, kMax, cols, D)],
      ['prod', T('qkv.prod', sub(i)), strips('prod', pRows, pMax, cols, D, ['Σ', T('qkv.score'), 'w'])],
      ['v', T('qkv.v'), strips('v', vRows, vMax, cols, D, ['w'])],
    ];
    for (const [kind, title, grid] of blocks) {
      grid.addEventListener('mouseover', (ev) => {
        const c = ev.target.closest('.cell');
        if (c) hover(kind, Number(c.dataset.row), Number(c.dataset.d));
      });
      box.append(el('h4', { text: title }), grid);
    }
  } else {
    const tokenPx = Math.max(1, Math.min(8, Math.floor(720 / n))), dimPx = Math.max(1, Math.min(8, Math.floor(256 / D)));
    const canvas = (kind, maxAbs, value, width = D) => matrixCanvas({
      rows: cols ? width : n, cols: cols ? n : width,
      rgb: (r, c) => { const [j, dd] = cols ? [c, r] : [r, c]; const x = value(j, dd); return x === null ? null : divergingRGB(x, maxAbs); },
      onHover: (r, c) => { const [j, dd] = cols ? [c, r] : [r, c]; hover(kind, j, dd); },
      attrs: { class: 'matrix-canvas qkv-canvas', 'data-kind': kind, 'data-transposed': String(cols), 'data-max-abs': String(maxAbs) },
      // The token axis fits 720 pixels; the dimension axis gets up to 8 pixels a cell in 256.
      ...(cols ? { px: tokenPx, py: dimPx } : { px: dimPx, py: tokenPx }),
    });
    // Paper: the three blocks side by side, a row per token in all three; 3b1b: stacked, a
    // column per token.
    box.append(el('p', { class: 'muted', text: T('qkv.canvas', n) }));
    const figure = (title, c) => el('figure', {}, el('figcaption', { text: title }), c);
    box.append(el('div', { class: `qkv-canvases ${cols ? 'stack' : 'side'}` },
      figure(T('qkv.k'), canvas('k', kMax, (j, dd) => hd.k[j][dd])),
      figure(T('qkv.prod', sub(i)), canvas('prod', pMax, (j, dd) => (prod[j] ? prod[j][dd] : null))),
      figure('Σ', canvas('sum', maxAbsOf(sums), (j) => sums[j], 1)),
      figure(T('qkv.v'), canvas('v', vMax, (j, dd) => hd.v[j][dd]))));
  }
}

// E_i's token part, position part and sum as three strips (rows in the paper's notation,
// columns in 3Blue1Brown's): DOM cells up to 64 dimensions, a canvas beyond. The answers of
// POST /api/embedding are cached by (prompt, index), so switching notation asks nothing.
const embeddings = new Map();
async function renderEmbedding(box, prompt, i, cols) {
  const key = `${i}\u0000${prompt}`;
  let e = embeddings.get(key);
  if (!e) {
    try {
      e = await api('/api/embedding', { prompt, index: i });
      embeddings.set(key, e);
    } catch (err) {
      box.append(el('p', { class: 'muted', text: String(err.message || err) }));
      box.dataset.ready = 'error';
      return;
    }
  }
  if (!box.isConnected) return;  // the view was redrawn meanwhile
  const C = e.embedding.length;
  const parts = [['wte', T('qkv.e.token'), e.token_embedding], ['wpe', T('qkv.e.position'), e.position_embedding],
    ['e', `E${sub(i)}`, e.embedding]];
  const maxAbs = maxAbsOf(parts.map((p) => p[2]));
  box.append(el('h4', { text: T('qkv.e.title', sub(i)) }));
  if (C <= 64) {
    box.append(strips('e', parts.map(([kind, label, v]) => ({ label, attrs: { 'data-part': kind },
      cells: v.map((value) => ({ value })) })), maxAbs, cols, C));
  } else {
    const dimPx = Math.max(1, Math.min(4, Math.floor(768 / C)));
    box.append(matrixCanvas({
      rows: cols ? C : 3, cols: cols ? 3 : C,
      rgb: (r, c) => divergingRGB(cols ? parts[c][2][r] : parts[r][2][c], maxAbs),
      onHover: (r, c) => {
        const [p, dd] = cols ? [c, r] : [r, c];
        const rd = $('#qkv-readout');
        for (const k of Object.keys(rd.dataset)) delete rd.dataset[k];
        rd.dataset.kind = parts[p][0]; rd.dataset.d = String(dd); rd.dataset.value = String(parts[p][2][dd]);
        rd.textContent = T('qkv.readout.vec', parts[p][1], dd, fmt(parts[p][2][dd]));
      },
      attrs: { class: 'matrix-canvas qkv-canvas', 'data-kind': 'e', 'data-transposed': String(cols), 'data-max-abs': String(maxAbs) },
      ...(cols ? { px: 12, py: dimPx } : { px: dimPx, py: 12 }),
    }));
  }
  box.dataset.ready = '1';
}

// The hovered cell's numbers: a K or V entry, or one product with the sum of its row.
function setReadout(h) {
  const r = $('#qkv-readout');
  for (const k of Object.keys(r.dataset)) delete r.dataset[k];
  if (!h) { r.textContent = T('qkv.hover'); return; }
  const { kind, i, j, dd, hd, prod, sums } = h;
  r.dataset.kind = kind; r.dataset.key = String(j); r.dataset.d = String(dd);
  if (kind === 'sum') {
    r.dataset.sum = String(sums[j]); r.dataset.score = String(hd.scores[i][j]);
    r.textContent = sums[j] === null ? T('qkv.readout.masked', sub(i), sub(j))
      : T('qkv.readout.sum', sub(i), sub(j), fmt(sums[j]), fmt(hd.scores[i][j]));
  } else if (kind === 'prod') {
    r.dataset.q = String(hd.q[i][dd]); r.dataset.k = String(hd.k[j][dd]);
    r.dataset.value = String(prod[j] ? prod[j][dd] : null);
    r.dataset.sum = String(sums[j]); r.dataset.score = String(hd.scores[i][j]);
    r.textContent = prod[j]
      ? T('qkv.readout.prod', sub(i), sub(j), dd, fmt(hd.q[i][dd]), fmt(hd.k[j][dd]), fmt(prod[j][dd]), fmt(sums[j]), fmt(hd.scores[i][j]))
      : T('qkv.readout.masked', sub(i), sub(j));
  } else {
    const v = hd[kind][j][dd];
    r.dataset.value = String(v);
    r.textContent = T('qkv.readout.vec', kind.toUpperCase() + sub(j), dd, fmt(v));
  }
}
