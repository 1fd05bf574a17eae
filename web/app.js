// The explorer page: asks `jomoim serve` for explain() JSON (schema jomoim.explain/1,
// docs/explain.md) and draws it. No framework, no build step, nothing fetched from elsewhere.
// Every number shown carries its exact value in a data-value attribute (the browser tests
// compare those with the API's JSON); the text shows fmt() of it.
//
// The page always asks for the paper's layout and draws the 3Blue1Brown notation itself, as the
// transpose of the answer it holds: switching notation (or language) sends no request.

import { LANGS } from './i18n.js';
import { $, fmt, quote, pct, el, transpose, weightColour, textColour, api } from './util.js';
import { state, T, CANVAS_ABOVE, notation, headData, selectedHead } from './state.js';
import { heatmap, renderReadout } from './heatmap.js';
import { initSoftmax, renderSoftmax, parseNumber } from './softmax.js';
import { renderAttribution, bySource } from './attribution.js';
import { renderLens } from './lens.js';
import { renderQKV } from './qkv.js';

export { fmt };

// The formula of each notation: as the page shows it, and as the API spells it (`formula`).
export const FORMULA = {
  paper: { shown: 'softmax(Q Kᵀ / √d) V', api: 'softmax(Q K^T / sqrt(d)) V' },
  '3b1b': { shown: 'V softmax(Kᵀ Q / √d)', api: 'V softmax(K^T Q / sqrt(d))' },
};

// Beyond this many numbers per request the page asks for the summary first and one head's
// matrices on demand (GPT-2 small at 1024 tokens would be ~600 million numbers).
// ?summary in the URL takes that path for any model (the browser tests use it).
const MAX_GRID_NUMBERS = new URLSearchParams(location.search).has('summary') ? 0 : 400000;



// The page's own requests always ask for the paper's layout (see the top of this file).
function request(extra = {}, { steps = true } = {}) {
  const body = {
    prompt: $('#prompt').value,
    notation: 'paper',
    silence: [...state.silence].sort((a, b) => a - b),
    swap_qk: $('#swap-qk').checked,
    top: 10,
    ...extra,
  };
  if ($('#compare-on').checked) body.compare = $('#compare').value;
  // The attribution's target and contrast: one-token texts, sent as typed (" of" keeps its
  // space); the server refuses anything else with one line, shown as the page's error.
  for (const f of ['target', 'contrast']) if ($(`#${f}`).value !== '') body[f] = $(`#${f}`).value;
  if (!steps) return body;
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
  $('#att-error').hidden = true;
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
    document.body.dataset.head = `${state.selected.layer}/${state.selected.head}`;
    setStatus(['status.done', data.tokens.length, data.compare ? data.compare.tokens.length : null]);
    document.body.dataset.ready = String(id);
  } catch (err) {
    if (id !== state.pending) return;
    showError(err.message);
    // A refused target or contrast: the server's line beside the inputs too.
    if ($('#target').value !== '' || $('#contrast').value !== '') { $('#att-error').textContent = err.message; $('#att-error').hidden = false; }
    setStatus(null);
    document.body.dataset.ready = String(id);
  }
}

async function loadDetail() {
  const { layer, head } = state.selected;
  state.detail = await api('/api/explain', request({ layer, head }, { steps: false }));
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
  renderAttribution(selectHead);
  renderLens();
  renderHeadViews();
}

// Everything that follows the selected head (and the selected query).
function renderHeadViews() {
  renderGrid();
  renderHead();
  renderQKV(pickQuery);
  renderSoftmax();
  renderCompare();
  renderSteps();
}

// A head chosen (a grid tile, a cell of the attribution's head table): its matrices come from
// the full answer, or from a per-head request when the page took the summary path.
async function selectHead(layer, head) {
  state.selected = { layer, head };
  document.body.dataset.head = '';
  if (!headData(state.data, layer, head)) {
    renderHeadViews();  // "loading…" until the head's matrices arrive
    await loadDetail().catch((e) => showError(e.message));
  }
  renderHeadViews();
  renderAttribution(selectHead);
  document.body.dataset.head = `${layer}/${head}`;
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
  const by = bySource(st.attribution);
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
        onclick: () => selectHead(l, h),
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
  box.append(heatmap(d.tokens, hd, state.matrix, nota === '3b1b', pickQuery));
  renderLastToken(d.tokens, hd);
}

// A heatmap cell's query (or the softmax panel's menu) chosen: the panel takes its row of
// scores, the Q/K/V strips its vector.
function pickQuery(q) {
  state.query = q;
  state.sm.preset = 'pass';
  renderHead();
  renderSoftmax();
  renderQKV(pickQuery);
}

function renderLastToken(tokens, hd) {
  const box = $('#last-token');
  box.replaceChildren();
  const lt = hd.last_token;
  if (!lt) return;
  const maxC = Math.max(...lt.contribution_norms.map((x) => x || 0), 1e-12);
  // A long prompt: the keys the last token weighs most, in order (not a row per token).
  const n = lt.weights.length;
  const keys = lt.weights.map((_, j) => j);
  const shown = n > CANVAS_ABOVE
    ? keys.sort((a, b) => lt.weights[b] - lt.weights[a] || a - b).slice(0, LAST_TOKEN_SHOWN).sort((a, b) => a - b) : keys;
  $('#last-token-some').hidden = shown.length === n;
  $('#last-token-some').textContent = shown.length === n ? '' : T('head.last.some', shown.length, n);
  for (const j of shown) {
    const w = lt.weights[j];
    box.append(el('div', { class: 'bar-row two', 'data-index': j, 'data-value': String(w), 'data-contribution': String(lt.contribution_norms[j]) },
      el('span', { class: 'bar-label', text: `${j} ${quote(tokens[j].text)}` }),
      el('span', { class: 'bar-track' },
        el('span', { class: 'bar', style: `width:${(100 * (w || 0)).toFixed(2)}%` }),
        el('span', { class: 'bar contrib', style: `width:${(100 * (lt.contribution_norms[j] || 0) / maxC).toFixed(2)}%` })),
      el('span', { class: 'bar-value', text: `w ${fmt(w)} · ‖wV‖ ${fmt(lt.contribution_norms[j])}` })));
  }
}
const LAST_TOKEN_SHOWN = 24;

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
  $('#att-form').addEventListener('submit', (e) => { e.preventDefault(); run(); });
  // Notation: the same answer drawn transposed, no new request.
  for (const r of document.querySelectorAll('input[name=notation]')) r.addEventListener('change', () => {
    if (!state.data) return;
    renderGrid();
    renderHead();
    renderQKV(pickQuery);
    renderSoftmax();
  });
  for (const r of document.querySelectorAll('input[name=lang]')) r.addEventListener('change', () => {
    setLanguage(document.querySelector('input[name=lang]:checked').value, true);
  });
  initSoftmax(pickQuery);
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
