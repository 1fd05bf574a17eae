// The softmax panel: scores in, weights out, computed here as the user types. Presets: the seed
// post's two examples and the selected head's own row of raw scores for one query.

import { $, fmt, quote, el } from './util.js';
import { state, T, selectedHead } from './state.js';

// softmax(s / tau), stable: subtracts the largest s/tau before exp (the weights are the same;
// exp never overflows, so a score of 1000 gives weight 1, not Infinity/Infinity = NaN).
export function softmax(scores, tau) {
  const scaled = scores.map((s) => s / tau);
  const m = Math.max(...scaled);
  const e = scaled.map((x) => Math.exp(x - m));
  const sum = e.reduce((a, b) => a + b, 0);
  return { scaled, max: m, weights: e.map((x) => x / sum) };
}

// A number as typed: "1,000" and "1000" alike; "√8" (or "sqrt 8") is its square root.
export function parseNumber(str) {
  const t = String(str).trim().replace(/[,\s]/g, '');
  if (t === '') return NaN;
  const root = t.match(/^(?:√|sqrt\(?)([^)]*)\)?$/i);
  return root ? Math.sqrt(Number(root[1])) : Number(t);
}

// The seed post's numbers ("어텐션이 조모임이라면"): Q_lot asks; lot answers 100, the rest 1.
// With the question in front, one of its words insists on "of" with 1000.
const PRESETS = {
  lot: { rows: [['I', 1], ['have', 1], ['a', 1], ['lot', 100]] },
  cash: { rows: [['Cash', 1], ['or', 1], ['credit', 1], ['card', 1000], ['?', 1], ['I', 1], ['have', 1], ['a', 1], ['lot', 100]] },
};

function loadPreset(name, keepTau = false) {
  const sm = state.sm;
  sm.preset = name;
  sm.model = null;
  sm.info = null;
  if (name === 'pass') {
    const hd = state.data && selectedHead();
    if (!hd) { sm.preset = 'custom'; return; }
    const q = Math.min(state.query ?? hd.scores.length - 1, hd.scores.length - 1);
    const keys = hd.scores[q].map((_, j) => j).filter((j) => hd.mask[q][j]);
    sm.rows = keys.map((j) => ({ label: `${j} ${quote(state.data.tokens[j].text)}`, score: String(hd.scores[q][j]), key: j }));
    sm.model = keys.map((j) => hd.weights[q][j]);
    if (!keepTau) sm.tau = String(1 / hd.scale);
    sm.info = { ...state.selected, q, masked: hd.scores[q].length - keys.length };
  } else {
    sm.rows = PRESETS[name].rows.map(([label, score]) => ({ label, score: String(score) }));
    sm.tau = '1';
  }
}

// onQuery(q): the menu chose query q (the page redraws what follows the query).
export function initSoftmax(onQuery) {
  loadPreset('lot');
  for (const b of document.querySelectorAll('#softmax .preset')) b.addEventListener('click', () => {
    loadPreset(b.dataset.preset);
    renderSoftmax();
  });
  $('#sm-query').addEventListener('change', () => {
    state.query = Number($('#sm-query').value);
    loadPreset('pass');
    onQuery(state.query);
  });
  $('#sm-tau').addEventListener('input', () => { state.sm.tau = $('#sm-tau').value; updateSoftmax(); });
  $('#sm-tau-1').addEventListener('click', () => { state.sm.tau = '1'; renderSoftmax(); });
  $('#sm-tau-sqrt').addEventListener('click', () => {
    state.sm.tau = `√${state.model ? state.model.head_dim : 64}`;
    renderSoftmax();
  });
  $('#sm-add').addEventListener('click', () => {
    toCustom();
    state.sm.rows.push({ label: `#${state.sm.rows.length}`, score: '0' });
    renderSoftmax();
  });
}

// An edited score: the numbers are the user's now, no longer the pass's.
function toCustom() {
  state.sm.preset = 'custom';
  state.sm.model = null;
  state.sm.info = null;
}

// Draws the panel from state.sm (a "from the pass" panel follows the selected head and query).
export function renderSoftmax() {
  const sm = state.sm;
  if (sm.preset === 'pass') loadPreset('pass', true);
  const d = state.data;
  const sel = $('#sm-query');
  sel.replaceChildren(...(d ? d.tokens : []).map((t) => el('option', { value: t.index, text: `${t.index} ${quote(t.text)}` })));
  if (d && state.query !== null) sel.value = String(state.query);
  sel.disabled = !d;
  $('#softmax .preset[data-preset="pass"]').disabled = !(d && selectedHead());
  for (const b of document.querySelectorAll('#softmax .preset')) b.classList.toggle('active', b.dataset.preset === sm.preset);
  $('#sm-tau-sqrt').textContent = T('softmax.tauSqrt', state.model ? state.model.head_dim : 'd');
  $('#sm-tau').value = sm.tau;
  const table = $('#sm-table');
  const head = el('tr', {}, el('th', { text: T('softmax.col.key') }), el('th', { text: T('softmax.col.score') }),
    el('th', { text: T('softmax.col.scaled') }), el('th', { text: T('softmax.col.weight') }), el('th'),
    sm.model ? el('th', { text: T('softmax.col.model') }) : null, el('th'));
  table.replaceChildren(head);
  sm.rows.forEach((row, j) => {
    const input = el('input', { type: 'text', inputmode: 'decimal', class: 'sm-score', value: row.score, size: 12,
      spellcheck: 'false', 'aria-label': `${T('softmax.col.score')} ${row.label}` });
    input.addEventListener('input', () => {
      row.score = input.value;
      if (state.sm.preset !== 'custom') { toCustom(); renderSoftmax(); focusScore(j); } else updateSoftmax();
    });
    table.append(el('tr', { class: 'sm-row', 'data-index': j },
      el('td', { class: 'sm-label', text: row.label }),
      el('td', {}, input),
      el('td', { class: 'sm-scaled num' }),
      el('td', { class: 'sm-weight num' }),
      el('td', { class: 'sm-bar' }, el('span', { class: 'bar-track' }, el('span', { class: 'bar' }))),
      sm.model ? el('td', { class: 'sm-model num', 'data-value': String(sm.model[j]), text: fmt(sm.model[j]) }) : null,
      el('td', {}, el('button', { type: 'button', class: 'sm-remove', title: T('softmax.remove'), 'aria-label': T('softmax.remove'),
        text: '×', onclick: () => { toCustom(); sm.rows.splice(j, 1); renderSoftmax(); } }))));
  });
  const info = sm.info;
  $('#sm-source').textContent = sm.preset === 'pass' && info
    ? T('softmax.source.pass', info.layer, info.head, info.q, quote(d.tokens[info.q].text), info.masked)
    : T(`softmax.source.${sm.preset}`);
  updateSoftmax();
}

function focusScore(j) {
  const input = document.querySelectorAll('#sm-table .sm-score')[j];
  if (input) { input.focus(); input.setSelectionRange(input.value.length, input.value.length); }
}

// Recomputes the weights from the inputs as they stand (keeps the table and the focus).
function updateSoftmax() {
  const sm = state.sm;
  const scores = sm.rows.map((r) => parseNumber(r.score));
  const tau = parseNumber(sm.tau);
  const bad = !(tau > 0) || !Number.isFinite(tau) || scores.some((x) => !Number.isFinite(x));
  const err = $('#sm-error');
  err.hidden = !bad && scores.length > 0;
  err.textContent = bad ? T('softmax.bad') : scores.length ? '' : T('softmax.empty');
  const rows = document.querySelectorAll('#sm-table .sm-row');
  const panel = $('#softmax');
  $('#sm-tau').classList.toggle('invalid', !(tau > 0) || !Number.isFinite(tau));
  rows.forEach((tr, j) => tr.querySelector('.sm-score').classList.toggle('invalid', !Number.isFinite(scores[j])));
  if (bad || !scores.length) {
    panel.dataset.valid = 'false';
    $('#sm-formula').textContent = 'w = softmax(s / τ)';
    $('#sm-sum').textContent = '';
    for (const tr of rows) {
      for (const c of ['.sm-scaled', '.sm-weight']) { tr.querySelector(c).textContent = '—'; delete tr.querySelector(c).dataset.value; }
      tr.querySelector('.bar').style.width = '0';
    }
    return;
  }
  const { scaled, max, weights } = softmax(scores, tau);
  panel.dataset.valid = 'true';
  panel.dataset.tau = String(tau);
  panel.dataset.max = String(max);
  const short = (x) => String(Number(x.toPrecision(4)));
  $('#sm-formula').textContent = `w = softmax(s / ${short(tau)})` + (tau !== 1 ? ` = softmax(s × ${short(1 / tau)})` : '');
  rows.forEach((tr, j) => {
    const sc = tr.querySelector('.sm-scaled'), w = tr.querySelector('.sm-weight');
    sc.textContent = fmt(scaled[j]); sc.dataset.value = String(scaled[j]);
    w.textContent = fmt(weights[j]); w.dataset.value = String(weights[j]);
    tr.querySelector('.bar').style.width = `${(100 * weights[j]).toFixed(2)}%`;
  });
  const sum = weights.reduce((a, b) => a + b, 0);
  $('#sm-sum').textContent = T('softmax.sum', fmt(sum));
}

