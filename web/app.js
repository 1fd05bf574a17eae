// The explorer page: asks `jomoim serve` for explain() JSON (schema jomoim.explain/1,
// docs/explain.md) and draws it. No framework, no build step, nothing fetched from elsewhere.
// Every number shown carries its exact value in a data-value attribute (the browser tests
// compare those with the API's JSON); the text shows fmt() of it.
//
// The page always asks for the paper's layout and draws the 3Blue1Brown notation itself, as the
// transpose of the answer it holds: switching notation (or language) sends no request.

import { LANGS, text } from './i18n.js';

const $ = (sel) => document.querySelector(sel);

// Four significant digits; masked (null) entries read "masked".
export function fmt(x) {
  if (x === null || x === undefined) return 'masked';
  if (x === 0) return '0';
  return Number(x).toPrecision(4);
}
// Token texts arrive display-ready (control bytes escaped by explain()); quote them.
const quote = (t) => `“${t}”`;
const pct = (p) => (100 * p).toFixed(2) + '%';

const state = {
  lang: 'en',
  model: null,
  status: null,      // [text key, ...args] of the status line, redrawn when the language changes
  silence: new Set(),
  selected: { layer: 0, head: 0 },
  matrix: 'weights',
  data: null,        // the last explain answer with matrices for the grid (or summary only)
  detail: null,      // the selected head's matrices when `data` has none
  pending: 0,
  query: null,       // the query token the softmax panel takes from the pass (default: the last)
  tokensCount: 0,    // tokens of the last answer (a new length resets the query to the last)
  hover: null,       // the heatmap cell last hovered: {q, k}
  sm: { preset: 'lot', rows: [], tau: '1', model: null, info: null },  // the softmax panel
  step: 0,           // the generation step shown (steps view)
};

// The text for key in the page's language (web/i18n.js).
const T = (key, ...args) => text(state.lang, key, ...args);

// The formula of each notation: as the page shows it, and as the API spells it (`formula`).
export const FORMULA = {
  paper: { shown: 'softmax(Q Kᵀ / √d) V', api: 'softmax(Q K^T / sqrt(d)) V' },
  '3b1b': { shown: 'V softmax(Kᵀ Q / √d)', api: 'V softmax(K^T Q / sqrt(d))' },
};
const transpose = (m) => (m.length ? m[0].map((_, c) => m.map((row) => row[c])) : m);

// Beyond this many numbers per request the page asks for the summary first and one head's
// matrices on demand (GPT-2 small at 1024 tokens would be ~600 million numbers).
// ?summary in the URL takes that path for any model (the browser tests use it).
const MAX_GRID_NUMBERS = new URLSearchParams(location.search).has('summary') ? 0 : 400000;

async function api(path, body) {
  const res = await fetch(path, body === undefined ? {} : {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  const json = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
  if (!res.ok) throw new Error(json.error || `HTTP ${res.status}`);
  return json;
}

function el(tag, attrs = {}, ...children) {
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

// Colours: weights 0..1 white to deep blue; scores diverging around 0 (blue < 0 < red).
function weightColour(w) {
  const t = Math.max(0, Math.min(1, w));
  const mix = (a, b) => Math.round(a + (b - a) * t);
  return `rgb(${mix(255, 22)},${mix(255, 64)},${mix(255, 140)})`;
}
function divergingColour(x, maxAbs) {
  const t = maxAbs > 0 ? Math.max(-1, Math.min(1, x / maxAbs)) : 0;
  const a = Math.abs(t);
  const mix = (from, to) => Math.round(from + (to - from) * a);
  return t >= 0 ? `rgb(${mix(255, 180)},${mix(255, 30)},${mix(255, 40)})`
                : `rgb(${mix(255, 30)},${mix(255, 80)},${mix(255, 180)})`;
}
const textColour = (bg) => {
  const [r, g, b] = bg.match(/\d+/g).map(Number);
  return 0.299 * r + 0.587 * g + 0.114 * b < 140 ? '#fff' : '#111';
};

function notation() { return document.querySelector('input[name=notation]:checked').value; }

// The page's own requests always ask for the paper's layout (see the top of this file).
function request(extra = {}) {
  const body = {
    prompt: $('#prompt').value,
    notation: 'paper',
    silence: [...state.silence].sort((a, b) => a - b),
    swap_qk: $('#swap-qk').checked,
    top: 10,
    ...extra,
  };
  if ($('#compare-on').checked) body.compare = $('#compare').value;
  // Generation (the steps view) runs on the plain model only: not with compare, silence or swap.
  const n = Number($('#generate').value) || 0;
  const plainPass = !body.compare && !body.silence.length && !body.swap_qk;
  $('#steps-off').hidden = !(n > 0 && !plainPass);
  if (n > 0 && plainPass) {
    body.generate = Math.trunc(n);
    // Not a number: sent as the text, so that the server's one-line refusal names it.
    const t = parseNumber($('#temperature').value.trim() || '0');
    body.temperature = Number.isFinite(t) ? t : $('#temperature').value;
    const seed = $('#gen-seed').value.trim();  // empty: the server draws one (shown with the steps)
    if (seed !== '') body.seed = /^\d+$/.test(seed) && Number.isSafeInteger(Number(seed)) ? Number(seed) : seed;
  }
  return body;
}

function showError(message) {
  const e = $('#error');
  e.hidden = !message;
  e.textContent = message || '';
}

async function run() {
  const id = ++state.pending;
  document.body.dataset.pending = String(id);
  showError('');
  setStatus(['status.running']);
  try {
    // The size of an answer with every head's matrices (the server's own count, per prompt).
    const m = state.model;
    const prompts = [$('#prompt').value].concat($('#compare-on').checked ? [$('#compare').value] : []);
    let numbers = 0;
    for (const p of prompts) {
      const T = Math.max(1, (await api('/api/tokenize', { prompt: p })).count);
      numbers += m.n_layer * m.n_head * (4 * T * T + 4 * T * m.head_dim);
    }
    const full = numbers <= Math.min(MAX_GRID_NUMBERS, m.limits.max_matrix_numbers);
    const data = await api('/api/explain', request({ matrices: full }));
    if (id !== state.pending) return;  // a newer request superseded this one
    state.data = data;
    state.detail = null;
    const { layer, head } = state.selected;
    if (layer >= m.n_layer || head >= m.n_head) state.selected = { layer: 0, head: 0 };
    if (!full) await loadDetail();
    if (state.query === null || state.tokensCount !== data.tokens.length) state.query = data.tokens.length - 1;
    state.step = 0;
    state.tokensCount = data.tokens.length;
    state.hover = null;
    render();
    setStatus(['status.done', data.tokens.length, data.compare ? data.compare.tokens.length : null]);
    document.body.dataset.ready = String(id);
  } catch (err) {
    if (id !== state.pending) return;
    showError(err.message);
    setStatus(null);
    document.body.dataset.ready = String(id);
  }
}

async function loadDetail() {
  const { layer, head } = state.selected;
  state.detail = await api('/api/explain', request({ layer, head }));
}

// The selected head's matrices: from the full answer, or from the per-head one.
function headData(data, layer, head) {
  const L = (data.layers || []).find((l) => l.layer === layer);
  return L ? (L.heads || []).find((h) => h.head === head) : undefined;
}

function setStatus(s) {
  state.status = s;
  $('#status').textContent = s ? T(...s) : '';
}

function render() {
  const d = state.data;
  if (!d) return;
  $('#views').hidden = false;
  renderTokens($('#tokens'), d, true);
  renderBars($('#prediction'), d.prediction.top, d.baseline ? d.baseline.top : null, 'prediction');
  $('#baseline-note').hidden = !d.baseline;
  renderGrid();
  renderHead();
  renderSoftmax();
  renderCompare();
  renderSteps();
}

// The steps of "generate": step k is the pass at position T + k - 1 that chose steps[k].
function renderSteps() {
  const d = state.data;
  const steps = d.steps || [];
  $('#steps-view').hidden = !steps.length;
  if (!steps.length) return;
  const k = Math.min(state.step, steps.length - 1);
  const st = steps[k];
  const g = d.generation;
  const slider = $('#step');
  slider.max = String(steps.length - 1);
  slider.value = String(k);
  const how = g.temperature === 0 ? T('steps.greedy') : T('steps.sampled', fmt(g.temperature), String(g.seed));
  $('#steps-meta').textContent = T('steps.meta', steps.length, g.stop, how);
  const T0 = d.tokens.length;
  const text = (pos) => (pos < T0 ? d.tokens[pos].text : steps[pos - T0].text);
  $('#step-label').textContent = T('steps.label', k, steps.length, `${st.position} ${quote(text(st.position))}`, quote(st.text),
    pct(st.probability));
  $('#step-label').dataset.step = String(k);
  $('#step-label').dataset.id = String(st.id);
  const { layer, head } = state.selected;
  $('#step-att-title').textContent = T('steps.att', layer, head);
  // The context so far, each token coloured by the selected head's weight from the last one.
  const att = st.attention[layer][head];
  const box = $('#step-tokens');
  box.replaceChildren();
  att.forEach((w, j) => {
    const bg = weightColour(w);
    box.append(el('span', { class: 'token static' + (j === st.position ? ' query' : ''), 'data-index': j, 'data-value': String(w),
      title: T('steps.tokTitle', fmt(w)), style: `background:${bg};color:${textColour(bg)}` },
    el('span', { class: 'tok-text', text: text(j).replace(/ /g, '␣') })));
  });
  box.append(el('span', { class: 'token static new', 'data-id': st.id },
    el('span', { class: 'tok-text', text: `→ ${st.text.replace(/ /g, '␣')}` })));
  renderBars($('#step-prediction'), st.prediction.top, null, 'step');
  for (const row of document.querySelectorAll('#step-prediction .bar-row'))
    if (Number(row.dataset.id) === st.id) row.classList.add('chosen');
  // Who argued for it: the attribution's per-source sums over heads, the largest |part| first.
  const by = att.map((_, j) => st.attribution.heads.reduce((a, h) => a + h.by_source[j], 0));
  const order = by.map((_, j) => j).sort((a, b) => Math.abs(by[b]) - Math.abs(by[a])).slice(0, 8);
  const maxAbs = Math.max(...order.map((j) => Math.abs(by[j])), 1e-12);
  const argued = $('#step-argued');
  argued.replaceChildren();
  for (const j of order) {
    argued.append(el('div', { class: 'bar-row', 'data-index': j, 'data-value': String(by[j]) },
      el('span', { class: 'bar-label', text: `${j} ${quote(text(j))}` }),
      el('span', { class: 'bar-track' }, el('span', { class: 'bar' + (by[j] < 0 ? ' against' : ''),
        style: `width:${(100 * Math.abs(by[j]) / maxAbs).toFixed(2)}%` })),
      el('span', { class: 'bar-value', text: (by[j] >= 0 ? '+' : '') + fmt(by[j]) })));
  }
}

function renderTokens(box, d, clickable) {
  box.replaceChildren();
  const maxNorm = Math.max(...d.tokens.map((t) => Math.max(t.token_embedding_norm, t.position_embedding_norm)), 1e-9);
  for (const t of d.tokens) {
    const silenced = state.silence.has(t.index) && clickable;
    const chip = el('button', {
      type: 'button', class: 'token' + (silenced ? ' silenced' : ''), 'data-index': t.index, 'data-id': t.id,
      title: T('tokens.chip', t.index, t.id, t.token) + (clickable ? T(silenced ? 'tokens.unsilence' : 'tokens.silence') : ''),
    },
    el('span', { class: 'tok-text', text: t.text.replace(/ /g, '␣') }),
    el('span', { class: 'tok-id', text: `#${t.index} · ${t.id}` }),
    el('span', { class: 'norm tok', style: `width:${(100 * t.token_embedding_norm / maxNorm).toFixed(1)}%` }),
    el('span', { class: 'norm pos', style: `width:${(100 * t.position_embedding_norm / maxNorm).toFixed(1)}%` }));
    if (clickable) chip.addEventListener('click', () => {
      if (state.silence.has(t.index)) state.silence.delete(t.index); else state.silence.add(t.index);
      run();
    });
    else chip.disabled = true;
    box.append(chip);
  }
}

function renderBars(box, top, baseline, name) {
  box.replaceChildren();
  const max = Math.max(...top.map((c) => c.probability), ...(baseline || []).map((c) => c.probability), 1e-12);
  const before = new Map((baseline || []).map((c) => [c.id, c.probability]));
  top.forEach((c, rank) => {
    const row = el('div', { class: 'bar-row', 'data-rank': rank, 'data-id': c.id, 'data-value': String(c.probability) },
      el('span', { class: 'bar-label', text: quote(c.text) }),
      el('span', { class: 'bar-track' },
        before.has(c.id) ? el('span', { class: 'bar ghost', style: `width:${(100 * before.get(c.id) / max).toFixed(2)}%` }) : null,
        el('span', { class: 'bar', style: `width:${(100 * c.probability / max).toFixed(2)}%` })),
      el('span', { class: 'bar-value', text: pct(c.probability) }));
    box.append(row);
  });
  box.dataset.name = name;
}

function renderGrid() {
  const d = state.data, m = state.model;
  const grid = $('#grid');
  grid.replaceChildren();
  const focus = new Map(d.heads.map((h) => [`${h.layer}/${h.head}`, h]));
  const roles = new Map(((d.head_roles && d.head_roles.heads) || []).map((r) => [`${r.layer}/${r.head}`, r]));
  const table = el('div', { class: 'grid', style: `grid-template-columns: 4em repeat(${m.n_head}, 1fr)` });
  table.append(el('span'));
  for (let h = 0; h < m.n_head; ++h) table.append(el('span', { class: 'grid-head', text: T('grid.head', h) }));
  for (let l = 0; l < m.n_layer; ++l) {
    table.append(el('span', { class: 'grid-head', text: T('grid.layer', l) }));
    for (let h = 0; h < m.n_head; ++h) {
      const s = focus.get(`${l}/${h}`);
      const f = s ? s.focus : 0;
      const selected = state.selected.layer === l && state.selected.head === h;
      const tile = el('button', {
        type: 'button', class: 'tile' + (selected ? ' selected' : ''), 'data-layer': l, 'data-head': h,
        'data-focus': String(f), title: T('grid.tile', l, h, fmt(f)) + (s && s.last_token_attends_to !== null ? T('grid.tileLast', s.last_token_attends_to) : ''),
        style: `border-color:${weightColour(f)}`,
        onclick: async () => {
          state.selected = { layer: l, head: h };
          if (!headData(state.data, l, h)) await loadDetail().catch((e) => showError(e.message));
          renderGrid();
          renderHead();
          renderSoftmax();
          renderCompare();
          renderSteps();
        },
      });
      const hd = headData(d, l, h);
      if (hd) tile.append(thumbnail(notation() === '3b1b' ? transpose(hd.weights) : hd.weights));
      tile.append(el('span', { class: 'tile-label', text: T('grid.focus', fmt(f)) }));
      // The head's role scores (head_roles): every score as data-*, the label and its score shown.
      const r = roles.get(`${l}/${h}`);
      if (r) {
        for (const k of ['previous_token', 'first_token', 'self', 'induction']) tile.dataset[k] = String(r[k]);
        tile.dataset.role = r.label || '';
        const sc = (x) => (x === null ? '–' : fmt(x));  // null: a one-token prompt, or no probe
        tile.title += T('grid.roleScores', sc(r.previous_token), sc(r.first_token), sc(r.self), sc(r.induction));
        if (r.label) {
          tile.append(el('span', { class: `tile-role role-${r.label}`, 'data-role': r.label },
            el('span', { class: 'role-name', text: T(`grid.role.${r.label}`) }), ' ',
            el('span', { class: 'role-score', 'data-value': String(r[r.label]), text: fmt(r[r.label]) })));
        }
      }
      table.append(tile);
    }
  }
  grid.append(table);
  const list = el('ol', { class: 'focus-list' });
  for (const s of d.heads.slice(0, 6))
    list.append(el('li', { text: T('grid.list', s.layer, s.head, fmt(s.focus), fmt(s.entropy)) }));
  grid.append(list);
}

function thumbnail(matrix) {
  const n = matrix.length, c = el('canvas', { width: n, height: matrix[0].length, class: 'thumb' });
  const g = c.getContext('2d');
  const img = g.createImageData(matrix[0].length, n);
  matrix.forEach((row, r) => row.forEach((w, k) => {
    const [R, G, B] = weightColour(w === null ? 0 : w).match(/\d+/g).map(Number);
    const o = 4 * (r * row.length + k);
    img.data.set([R, G, B, 255], o);
  }));
  g.putImageData(img, 0, 0);
  return c;
}

// The selected head's matrices (paper layout), or undefined while they load.
function selectedHead() {
  const { layer, head } = state.selected;
  return headData(state.data, layer, head) || (state.detail && headData(state.detail, layer, head));
}

function renderHead() {
  const d = state.data;
  const { layer, head } = state.selected;
  const hd = selectedHead();
  const nota = notation();
  $('#head-title').textContent = T('head.title', layer, head);
  $('#formula').textContent = FORMULA[nota].shown;
  $('#formula').dataset.formula = FORMULA[nota].api;
  $('#notation-text').textContent = T(`head.notation.${nota}`);
  $('#scores-text').innerHTML = T(`head.scores.${nota}`);
  $('#matrix-scores-label').textContent = T(`head.m.scores.${nota}`);
  const box = $('#heatmap');
  box.replaceChildren();
  renderReadout(hd);
  if (!hd) { box.append(el('p', { class: 'muted', text: T('head.loading') })); return; }
  box.append(heatmap(d.tokens, hd, state.matrix, nota === '3b1b'));
  renderLastToken(d.tokens, hd);
}

// The three numbers of the hovered cell (query q, key k), from the paper-layout matrices.
function renderReadout(hd) {
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

// hd is in the paper's layout ([query, key]); with cols (3Blue1Brown) every matrix is drawn
// transposed ([key, query]): row r, column c shows hd[kind][c][r].
function heatmap(tokens, hd, kind, cols) {
  const m = cols ? transpose(hd[kind]) : hd[kind];
  const mask = cols ? transpose(hd.mask) : hd.mask;
  let maxAbs = 0;
  for (const row of m) for (const x of row) if (x !== null) maxAbs = Math.max(maxAbs, Math.abs(x));
  const label = (t) => `${t.index} ${t.text.replace(/ /g, '␣')}`;
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
  const cell = (td) => {
    const r = Number(td.dataset.row), c = Number(td.dataset.col);
    const [q, k] = cols ? [c, r] : [r, c];
    return { q, k };
  };
  table.addEventListener('mouseover', (ev) => {
    const td = ev.target.closest('td');
    if (!td) return;
    state.hover = cell(td);
    renderReadout(hd);
    const tip = $('#tooltip');
    tip.textContent = $('#readout').textContent;
    tip.hidden = false;
    const rect = td.getBoundingClientRect();
    tip.style.left = `${Math.min(window.innerWidth - 420, rect.right + 8 + window.scrollX)}px`;
    tip.style.top = `${rect.bottom + 6 + window.scrollY}px`;
  });
  table.addEventListener('mouseleave', () => { $('#tooltip').hidden = true; });
  // A click takes the cell's question (its query) to the softmax panel.
  table.addEventListener('click', (ev) => {
    const td = ev.target.closest('td');
    if (!td) return;
    state.query = cell(td).q;
    state.sm.preset = 'pass';
    renderHead();
    renderSoftmax();
  });
  return table;
}
const sub = (n) => String(n).replace(/\d/g, (d) => '₀₁₂₃₄₅₆₇₈₉'[d]);

function renderLastToken(tokens, hd) {
  const box = $('#last-token');
  box.replaceChildren();
  const lt = hd.last_token;
  if (!lt) return;
  const maxC = Math.max(...lt.contribution_norms.map((x) => x || 0), 1e-12);
  lt.weights.forEach((w, j) => {
    box.append(el('div', { class: 'bar-row two', 'data-index': j, 'data-value': String(w), 'data-contribution': String(lt.contribution_norms[j]) },
      el('span', { class: 'bar-label', text: `${j} ${quote(tokens[j].text)}` }),
      el('span', { class: 'bar-track' },
        el('span', { class: 'bar', style: `width:${(100 * (w || 0)).toFixed(2)}%` }),
        el('span', { class: 'bar contrib', style: `width:${(100 * (lt.contribution_norms[j] || 0) / maxC).toFixed(2)}%` })),
      el('span', { class: 'bar-value', text: `w ${fmt(w)} · ‖wV‖ ${fmt(lt.contribution_norms[j])}` })));
  });
}

function renderCompare() {
  const d = state.data;
  const view = $('#compare-view');
  view.hidden = !d.compare;
  if (!d.compare) return;
  const cols = $('#compare-cols');
  cols.replaceChildren();
  const layer = state.selected.layer;
  for (const [side, x] of [['prompt', d], ['compare', d.compare]]) {
    const col = el('div', { class: 'col-side', 'data-side': side });
    col.append(el('h3', { text: quote(x.prompt) }));
    const att = x.last_token_attention ? x.last_token_attention.mean_over_heads[layer] : null;
    const toks = el('div', { class: 'tokens' });
    x.tokens.forEach((t, j) => {
      const w = att ? att[j] : 0;
      const bg = weightColour(w || 0);
      toks.append(el('span', { class: 'token static', 'data-index': j, 'data-value': String(w), title: T('compare.tokTitle', fmt(w), layer),
        style: `background:${bg};color:${textColour(bg)}` }, el('span', { class: 'tok-text', text: t.text.replace(/ /g, '␣') })));
    });
    col.append(el('p', { class: 'muted', text: T('compare.att', layer) }), toks);
    const bars = el('div', { class: 'bars' });
    renderBars(bars, x.prediction.top, null, side);
    col.append(bars);
    cols.append(col);
  }
  const shift = $('#shift');
  shift.replaceChildren(el('tr', {}, ...['token', 'first', 'second', 'change'].map((c) => el('th', { text: T(`compare.col.${c}`) }))));
  for (const s of d.compare.shift || []) {
    shift.append(el('tr', { 'data-id': s.id, 'data-value': String(s.delta) },
      el('td', { text: quote(s.text) }), el('td', { text: pct(s.p) }), el('td', { text: pct(s.p_compare) }),
      el('td', { class: s.delta >= 0 ? 'up' : 'down', text: (s.delta >= 0 ? '+' : '') + pct(s.delta) })));
  }
}

// ---- The softmax panel: scores in, weights out, computed here as the user types. ----

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

function initSoftmax() {
  loadPreset('lot');
  for (const b of document.querySelectorAll('#softmax .preset')) b.addEventListener('click', () => {
    loadPreset(b.dataset.preset);
    renderSoftmax();
  });
  $('#sm-query').addEventListener('change', () => {
    state.query = Number($('#sm-query').value);
    loadPreset('pass');
    renderHead();
    renderSoftmax();
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
function renderSoftmax() {
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

function renderModelSummary() {
  const m = state.model;
  if (!m) return;
  $('#model-summary').textContent = T('model.summary', m.name, m.n_layer, m.n_head, m.n_embd, m.head_dim, m.n_positions, m.vocab_size);
}

// The page's language: the toggle, remembered in localStorage ('jomoim.lang'); at first the
// browser's (navigator.language ko* gives Korean). Redraws every text, sends no request.
const LANG_KEY = 'jomoim.lang';
function initialLanguage() {
  let saved = null;
  try { saved = localStorage.getItem(LANG_KEY); } catch { /* storage off */ }
  if (LANGS.includes(saved)) return saved;
  return String(navigator.language || '').toLowerCase().startsWith('ko') ? 'ko' : 'en';
}
function setLanguage(lang, remember) {
  state.lang = LANGS.includes(lang) ? lang : 'en';
  if (remember) try { localStorage.setItem(LANG_KEY, state.lang); } catch { /* storage off */ }
  document.documentElement.lang = state.lang;
  document.querySelector(`input[name=lang][value="${state.lang}"]`).checked = true;
  for (const e of document.querySelectorAll('[data-i18n]')) {
    if (e.id === 'model-summary' && state.model) continue;
    e.innerHTML = T(e.dataset.i18n);  // our own texts (web/i18n.js), never user input
  }
  document.title = T('doc.title');
  renderModelSummary();
  setStatus(state.status);
  if (state.data) render(); else renderSoftmax();
}

async function init() {
  setLanguage(initialLanguage(), false);
  $('#compare-on').addEventListener('change', () => { $('#compare').disabled = !$('#compare-on').checked; run(); });
  $('#controls').addEventListener('submit', (e) => { e.preventDefault(); state.silence.clear(); run(); });
  $('#swap-qk').addEventListener('change', run);
  // Notation: the same answer drawn transposed, no new request.
  for (const r of document.querySelectorAll('input[name=notation]')) r.addEventListener('change', () => {
    if (!state.data) return;
    renderGrid();
    renderHead();
    renderSoftmax();
  });
  for (const r of document.querySelectorAll('input[name=lang]')) r.addEventListener('change', () => {
    setLanguage(document.querySelector('input[name=lang]:checked').value, true);
  });
  initSoftmax();
  $('#step').addEventListener('input', () => {
    state.step = Number($('#step').value);
    renderSteps();
  });
  for (const id of ['#generate', '#temperature', '#gen-seed']) $(id).addEventListener('change', run);
  for (const r of document.querySelectorAll('input[name=matrix]')) r.addEventListener('change', () => {
    state.matrix = document.querySelector('input[name=matrix]:checked').value;
    renderHead();
  });
  $('#seed').addEventListener('click', () => {
    $('#prompt').value = 'I have a lot';
    $('#compare').value = 'Cash or credit card? I have a lot';
    $('#compare-on').checked = true;
    $('#compare').disabled = false;
    state.silence.clear();
    run();
  });
  try {
    state.model = await api('/api/model');
    const m = state.model;
    renderModelSummary();
    $('#prompt').maxLength = m.limits.max_prompt_bytes;
    await run();
  } catch (err) {
    showError(err.message);
  }
}

init();
