// The decision's attribution (the answer's `attribution`, docs/explain.md): the target token's
// logit (minus the contrast's) split into the parts that wrote the last position's residual
// stream: the token and position embeddings, every head (and each head by source token), every
// MLP and the biases, through the final LayerNorm with its scale frozen at this pass's value.
// Every number shown is the API's, or a sum of the API's numbers in a stated order (per source
// token: over heads in (layer, head) order; per layer: over its heads), each in data-value.

import { $, fmt, signed, quote, el, divergingColour, textColour, visible } from './util.js';
import { state, T } from './state.js';

// Per source token j: Σ over heads (in the answer's (layer, head) order) of by_source[j].
export function bySource(a) {
  const n = a.heads.length ? a.heads[0].by_source.length : 0;
  const out = new Array(n).fill(0);
  for (const h of a.heads) for (let j = 0; j < n; ++j) out[j] += h.by_source[j];
  return out;
}
// Per layer: Σ over its heads (in head order) of total.
export function byLayer(a, nLayer) {
  const out = new Array(nLayer).fill(0);
  for (const h of a.heads) out[h.layer] += h.total;
  return out;
}
// The quantity attributed: logit(target), or logit(target) − logit(contrast).
export const attributedLogit = (a) => a.target.logit - (a.contrast ? a.contrast.logit : 0);

// Signed bars: rows of {label, value, attrs}; the longest bar is the largest |value|. The number
// (data-value) sits on the value, not on the row, whose label is in the page's language.
function signedBars(rows, cls) {
  const box = el('div', { class: `bars signed ${cls}` });
  const maxAbs = Math.max(...rows.map((r) => Math.abs(r.value)), 1e-12);
  for (const r of rows) {
    const w = (50 * Math.abs(r.value) / maxAbs).toFixed(2);
    box.append(el('div', { class: 'bar-row', ...r.attrs },
      el('span', { class: 'bar-label', text: r.label, title: r.label }),
      el('span', { class: 'bar-track' }, el('span', { class: 'bar' + (r.value < 0 ? ' against' : ''),
        style: r.value < 0 ? `right:50%;left:auto;width:${w}%` : `left:50%;width:${w}%` })),
      el('span', { class: 'bar-value', 'data-value': String(r.value), text: signed(r.value) })));
  }
  return box;
}

const SOURCES_SHOWN = 12;  // beyond, the largest |part| only (all of them are in the table's title)

// One prompt's attribution block. side: 'prompt' or 'compare'; onHead(layer, head) selects a head.
function block(x, side, onHead) {
  const a = x.attribution, m = state.model, tokens = x.tokens;
  const col = el('div', { class: 'att-block', 'data-side': side });
  if (state.data.compare) col.append(el('h3', { text: quote(x.prompt) }));
  // The quantity and the sum of its parts, side by side.
  const logit = attributedLogit(a);
  const what = a.contrast
    ? T('att.whatVs', quote(a.target.text), a.target.id, quote(a.contrast.text), a.contrast.id)
    : T('att.what', quote(a.target.text), a.target.id);
  col.append(el('p', { class: 'att-head', 'data-target': String(a.target.id), 'data-contrast': a.contrast ? String(a.contrast.id) : '' },
    el('span', { class: 'att-what', text: what }), ' ',
    el('span', { class: 'att-logit num', 'data-value': String(logit), text: fmt(logit) }),
    el('span', { class: 'muted', text: ` ${T('att.sumIs')} ` }),
    el('span', { class: 'att-sum num', 'data-value': String(a.sum), text: fmt(a.sum) })));
  // The parts: embeddings, attention by layer, MLPs, biases.
  const layers = byLayer(a, m.n_layer);
  const parts = [
    { label: T('att.part.token'), value: a.embeddings.token, attrs: { 'data-part': 'token' } },
    { label: T('att.part.position'), value: a.embeddings.position, attrs: { 'data-part': 'position' } },
  ];
  for (let l = 0; l < m.n_layer; ++l) {
    parts.push({ label: T('att.part.attn', l), value: layers[l], attrs: { 'data-part': 'attn', 'data-layer': l } });
    parts.push({ label: T('att.part.mlp', l), value: a.mlps[l], attrs: { 'data-part': 'mlp', 'data-layer': l } });
  }
  parts.push({ label: T('att.part.biases'), value: a.biases, attrs: { 'data-part': 'biases' } });
  col.append(el('h4', { text: T('att.parts') }), signedBars(parts, 'att-parts'));
  // By source token, summed over heads, the largest |part| first.
  const by = bySource(a);
  const order = by.map((_, j) => j).sort((p, q) => Math.abs(by[q]) - Math.abs(by[p]) || p - q);
  const shown = order.slice(0, SOURCES_SHOWN);
  col.append(el('h4', { text: T('att.sources', shown.length, by.length) }),
    signedBars(shown.map((j) => ({ label: `${j} ${quote(visible(tokens[j].text))}`, value: by[j], attrs: { 'data-index': j } })),
      'att-sources'));
  // By head: a layer × head table, signed colours.
  const maxAbs = Math.max(...a.heads.map((h) => Math.abs(h.total)), 1e-12);
  const table = el('table', { class: 'att-heads' });
  table.append(el('tr', {}, el('th'), ...Array.from({ length: m.n_head }, (_, h) => el('th', { text: T('grid.head', h) }))));
  for (let l = 0; l < m.n_layer; ++l) {
    const tr = el('tr', {}, el('th', { text: T('grid.layer', l) }));
    for (let h = 0; h < m.n_head; ++h) {
      const e = a.heads.find((x) => x.layer === l && x.head === h);
      const bg = divergingColour(e.total, maxAbs);
      const sel = state.selected.layer === l && state.selected.head === h;
      tr.append(el('td', { class: 'num' + (sel ? ' sel' : ''), 'data-layer': l, 'data-head': h, 'data-value': String(e.total),
        title: T('att.headTitle', l, h), style: `background:${bg};color:${textColour(bg)}`, text: signed(e.total),
        onclick: () => onHead(l, h) }));
    }
    table.append(tr);
  }
  col.append(el('h4', { text: T('att.heads') }), table);
  return col;
}

export function renderAttribution(onHead) {
  const d = state.data;
  const box = $('#attribution');
  box.replaceChildren();
  box.classList.toggle('cols', !!d.compare);
  box.append(block(d, 'prompt', onHead));
  if (d.compare) box.append(block(d.compare, 'compare', onHead));
}
