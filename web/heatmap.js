// The selected head's T × T heatmap (scores, scaled scores or weights) and the readout of the
// hovered cell. Up to CANVAS_ABOVE tokens a table cell per number (each with its data-value);
// beyond, one <canvas> (web/canvas.js) whose hover gives the same readout.
//
// hd is in the paper's layout ([query, key]); with cols (3Blue1Brown) every matrix is drawn
// transposed ([key, query]): row r, column c shows hd[kind][c][r]. Nothing is requested here.

import { $, fmt, quote, sub, el, transpose, weightColour, weightRGB, divergingColour, divergingRGB, textColour,
  maxAbsOf, visible } from './util.js';
import { state, T, CANVAS_ABOVE } from './state.js';
import { matrixCanvas } from './canvas.js';

// The three numbers of the hovered cell (query q, key k), from the paper-layout matrices.
export function renderReadout(hd) {
  const readout = $('#readout');
  const h = state.hover;
  if (!hd || !h || h.q >= hd.scores.length) {
    readout.textContent = T('head.hover');
    for (const k of ['query', 'key', 'score', 'scaled', 'weight']) delete readout.dataset[k];
    return;
  }
  const tokens = state.data.tokens;
  const at = (name) => hd[name][h.q][h.k];
  readout.textContent = T('head.readout', sub(h.q), sub(h.k), fmt(at('scores')), fmt(hd.scale), fmt(at('scaled')),
    fmt(at('weights')), `${h.q} ${quote(tokens[h.q].text)}`, `${h.k} ${quote(tokens[h.k].text)}`, !hd.mask[h.q][h.k]);
  readout.dataset.query = h.q; readout.dataset.key = h.k;
  readout.dataset.score = String(at('scores')); readout.dataset.scaled = String(at('scaled'));
  readout.dataset.weight = String(at('weights'));
}

function showTooltip(x, y) {
  const tip = $('#tooltip');
  tip.textContent = $('#readout').textContent;
  tip.hidden = false;
  tip.style.left = `${Math.min(window.innerWidth - 420, x + 8) + window.scrollX}px`;
  tip.style.top = `${y + 6 + window.scrollY}px`;
}
const hideTooltip = () => { $('#tooltip').hidden = true; };

// The heatmap of hd[kind]; onPick(q) when a cell is clicked (its query goes to the softmax
// panel and the Q/K/V strips).
export function heatmap(tokens, hd, kind, cols, onPick) {
  const pick = (r, c) => (cols ? { q: c, k: r } : { q: r, k: c });
  const hover = (r, c) => { state.hover = pick(r, c); renderReadout(hd); };
  if (tokens.length > CANVAS_ABOVE) return heatmapCanvas(tokens, hd, kind, cols, pick, hover, onPick);
  const m = cols ? transpose(hd[kind]) : hd[kind];
  const mask = cols ? transpose(hd.mask) : hd.mask;
  const maxAbs = maxAbsOf(m);
  const label = (t) => `${t.index} ${visible(t.text)}`;
  const table = el('table', { class: 'heatmap', 'data-kind': kind, 'data-transposed': String(cols),
    'data-layout': cols ? '[key, query]' : '[query, key]' });
  const head = el('tr', {}, el('th', { class: 'corner', text: T(cols ? 'head.corner.3b1b' : 'head.corner.paper') }));
  for (const t of tokens) head.append(el('th', { class: 'col' + (cols && t.index === state.query ? ' sel' : ''), text: label(t) }));
  table.append(head);
  m.forEach((row, r) => {
    const tr = el('tr', {}, el('th', { class: 'rowh' + (!cols && r === state.query ? ' sel' : ''), text: label(tokens[r]) }));
    row.forEach((x, c) => {
      const td = el('td', { 'data-row': r, 'data-col': c, 'data-value': x === null ? 'null' : String(x) });
      if (x === null || !mask[r][c]) td.className = 'masked';
      else {
        const bg = kind === 'weights' ? weightColour(x) : divergingColour(x, maxAbs);
        td.style.background = bg;
        td.style.color = textColour(bg);
        td.textContent = tokens.length <= 16 ? fmt(x) : '';
      }
      tr.append(td);
    });
    table.append(tr);
  });
  const cell = (ev) => ev.target.closest('td');
  table.addEventListener('mouseover', (ev) => {
    const td = cell(ev);
    if (!td) return;
    hover(Number(td.dataset.row), Number(td.dataset.col));
    const rect = td.getBoundingClientRect();
    showTooltip(rect.right, rect.bottom);
  });
  table.addEventListener('mouseleave', hideTooltip);
  // A click takes the cell's question (its query) to the softmax panel.
  table.addEventListener('click', (ev) => {
    const td = cell(ev);
    if (td) onPick(pick(Number(td.dataset.row), Number(td.dataset.col)).q);
  });
  return table;
}

// The long-prompt path: the same cells on one canvas (no axis labels: the readout names the
// tokens of the hovered cell).
function heatmapCanvas(tokens, hd, kind, cols, pick, hover, onPick) {
  const n = tokens.length;
  const maxAbs = maxAbsOf(hd[kind]);
  const rgb = (r, c) => {
    const { q, k } = pick(r, c);
    const x = hd[kind][q][k];
    if (x === null || !hd.mask[q][k]) return null;
    return kind === 'weights' ? weightRGB(x) : divergingRGB(x, maxAbs);
  };
  const canvas = matrixCanvas({
    rows: n, cols: n, rgb,
    onHover: (r, c, ev) => { hover(r, c); showTooltip(ev.clientX, ev.clientY); },
    onLeave: hideTooltip,
    onClick: (r, c) => onPick(pick(r, c).q),
    attrs: { class: 'matrix-canvas heatmap-canvas', 'data-kind': kind, 'data-transposed': String(cols),
      'data-layout': cols ? '[key, query]' : '[query, key]', 'data-max-abs': String(maxAbs) },
  });
  const box = el('div', { class: 'canvas-box' },
    el('p', { class: 'corner muted', text: T(cols ? 'head.corner.3b1b' : 'head.corner.paper') + ' · ' + T('head.canvas', n) }),
    canvas);
  return box;
}
