// The explorer page: asks `jomoim serve` for explain() JSON (schema jomoim.explain/1,
// docs/explain.md) and draws it. No framework, no build step, nothing fetched from elsewhere.
// Every number shown carries its exact value in a data-value attribute (the browser tests
// compare those with the API's JSON); the text shows fmt() of it.

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
  model: null,
  silence: new Set(),
  selected: { layer: 0, head: 0 },
  matrix: 'weights',
  data: null,        // the last explain answer with matrices for the grid (or summary only)
  detail: null,      // the selected head's matrices when `data` has none
  pending: 0,
};

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

function request(extra = {}) {
  const body = {
    prompt: $('#prompt').value,
    notation: notation(),
    silence: [...state.silence].sort((a, b) => a - b),
    swap_qk: $('#swap-qk').checked,
    top: 10,
    ...extra,
  };
  if ($('#compare-on').checked) body.compare = $('#compare').value;
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
  $('#status').textContent = 'the meeting is in session…';
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
    render();
    $('#status').textContent = `explained ${data.tokens.length} tokens` +
      (data.compare ? ` and ${data.compare.tokens.length} to compare` : '');
    document.body.dataset.ready = String(id);
  } catch (err) {
    if (id !== state.pending) return;
    showError(err.message);
    $('#status').textContent = '';
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

function render() {
  const d = state.data;
  $('#views').hidden = false;
  renderTokens($('#tokens'), d, true);
  renderBars($('#prediction'), d.prediction.top, d.baseline ? d.baseline.top : null, 'prediction');
  $('#baseline-note').hidden = !d.baseline;
  renderGrid();
  renderHead();
  renderCompare();
}

function renderTokens(box, d, clickable) {
  box.replaceChildren();
  const maxNorm = Math.max(...d.tokens.map((t) => Math.max(t.token_embedding_norm, t.position_embedding_norm)), 1e-9);
  for (const t of d.tokens) {
    const silenced = state.silence.has(t.index) && clickable;
    const chip = el('button', {
      type: 'button', class: 'token' + (silenced ? ' silenced' : ''), 'data-index': t.index, 'data-id': t.id,
      title: `token ${t.index}: id ${t.id}, "${t.token}"` + (clickable ? (silenced ? ' — click to let it speak' : ' — click to silence it') : ''),
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
  const table = el('div', { class: 'grid', style: `grid-template-columns: 4em repeat(${m.n_head}, 1fr)` });
  table.append(el('span'));
  for (let h = 0; h < m.n_head; ++h) table.append(el('span', { class: 'grid-head', text: `head ${h}` }));
  for (let l = 0; l < m.n_layer; ++l) {
    table.append(el('span', { class: 'grid-head', text: `layer ${l}` }));
    for (let h = 0; h < m.n_head; ++h) {
      const s = focus.get(`${l}/${h}`);
      const f = s ? s.focus : 0;
      const selected = state.selected.layer === l && state.selected.head === h;
      const tile = el('button', {
        type: 'button', class: 'tile' + (selected ? ' selected' : ''), 'data-layer': l, 'data-head': h,
        'data-focus': String(f), title: `layer ${l}, head ${h}: focus ${fmt(f)}` + (s ? `, the last token listens most to #${s.last_token_attends_to}` : ''),
        style: `border-color:${weightColour(f)}`,
        onclick: async () => {
          state.selected = { layer: l, head: h };
          if (!headData(state.data, l, h)) await loadDetail().catch((e) => showError(e.message));
          renderGrid();
          renderHead();
          renderCompare();
        },
      });
      const hd = headData(d, l, h);
      if (hd) tile.append(thumbnail(hd.weights));
      tile.append(el('span', { class: 'tile-label', text: `focus ${fmt(f)}` }));
      table.append(tile);
    }
  }
  grid.append(table);
  const list = el('ol', { class: 'focus-list' });
  for (const s of d.heads.slice(0, 6))
    list.append(el('li', { text: `L${s.layer} H${s.head}: focus ${fmt(s.focus)}, entropy ${fmt(s.entropy)} nats` }));
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
  const hd = headData(d, layer, head) || (state.detail && headData(state.detail, layer, head));
  $('#head-title').textContent = `Layer ${layer}, head ${head}: the minutes`;
  const cols = notation() === '3b1b';
  $('#formula').textContent = d.formula || (cols ? 'V softmax(Kᵀ Q / √d)' : 'softmax(Q Kᵀ / √d) V');
  $('#notation-text').textContent = cols
    ? '3Blue1Brown notation: tokens are columns. Column i is token i asking; softmax runs down each column, so every column adds up to 1. The same numbers as the paper\'s, transposed.'
    : 'Paper notation ("Attention Is All You Need"): tokens are rows. Row i is token i asking; softmax runs along each row, so every row adds up to 1.';
  const box = $('#heatmap');
  box.replaceChildren();
  if (!hd) { box.append(el('p', { class: 'muted', text: 'loading…' })); return; }
  box.append(heatmap(d.tokens, hd, state.matrix, cols));
  renderLastToken(d.tokens, hd);
}

function heatmap(tokens, hd, kind, cols) {
  const m = hd[kind];
  // The layout string says which axis is the query: "[query, key]" (paper) or "[key, query]".
  const transposed = (hd.layout && hd.layout[kind] ? hd.layout[kind] : (cols ? '[key, query]' : '[query, key]')).startsWith('[key');
  let maxAbs = 0;
  for (const row of m) for (const x of row) if (x !== null) maxAbs = Math.max(maxAbs, Math.abs(x));
  const label = (t) => `${t.index} ${t.text.replace(/ /g, '␣')}`;
  const table = el('table', { class: 'heatmap', 'data-kind': kind, 'data-transposed': String(transposed) });
  const head = el('tr', {}, el('th', { class: 'corner', text: transposed ? 'key ↓ / query →' : 'query ↓ / key →' }));
  for (const t of tokens) head.append(el('th', { class: 'col', text: label(t) }));
  table.append(head);
  m.forEach((row, r) => {
    const tr = el('tr', {}, el('th', { class: 'rowh', text: label(tokens[r]) }));
    row.forEach((x, c) => {
      const td = el('td', { 'data-row': r, 'data-col': c, 'data-value': x === null ? 'null' : String(x) });
      if (x === null || !hd.mask[r][c]) td.className = 'masked';
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
  table.addEventListener('mouseover', (ev) => {
    const td = ev.target.closest('td');
    if (!td) return;
    const r = Number(td.dataset.row), c = Number(td.dataset.col);
    const [q, k] = transposed ? [c, r] : [r, c];
    const at = (name) => hd[name][r][c];
    const text = `Q${sub(q)}·K${sub(k)} = ${fmt(at('scores'))}   scaled (×${fmt(hd.scale)}) = ${fmt(at('scaled'))}   weight = ${fmt(at('weights'))}` +
      `   — token ${q} "${tokens[q].text}" asking, token ${k} "${tokens[k].text}" answering` +
      (!hd.mask[r][c] ? ' (masked: it cannot hear this one)' : '');
    const readout = $('#readout');
    readout.textContent = text;
    readout.dataset.query = q; readout.dataset.key = k;
    readout.dataset.score = String(at('scores')); readout.dataset.scaled = String(at('scaled'));
    readout.dataset.weight = String(at('weights'));
    const tip = $('#tooltip');
    tip.textContent = text;
    tip.hidden = false;
    const rect = td.getBoundingClientRect();
    tip.style.left = `${Math.min(window.innerWidth - 420, rect.right + 8 + window.scrollX)}px`;
    tip.style.top = `${rect.bottom + 6 + window.scrollY}px`;
  });
  table.addEventListener('mouseleave', () => { $('#tooltip').hidden = true; });
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
      toks.append(el('span', { class: 'token static', 'data-index': j, 'data-value': String(w), title: `the last token gives ${fmt(w)} of its attention here (layer ${layer}, mean over heads)`,
        style: `background:${bg};color:${textColour(bg)}` }, el('span', { class: 'tok-text', text: t.text.replace(/ /g, '␣') })));
    });
    col.append(el('p', { class: 'muted', text: `the last token's attention, layer ${layer} (mean over heads):` }), toks);
    const bars = el('div', { class: 'bars' });
    renderBars(bars, x.prediction.top, null, side);
    col.append(bars);
    cols.append(col);
  }
  const shift = $('#shift');
  shift.replaceChildren(el('tr', {}, el('th', { text: 'token' }), el('th', { text: 'first' }), el('th', { text: 'second' }), el('th', { text: 'change' })));
  for (const s of d.compare.shift || []) {
    shift.append(el('tr', { 'data-id': s.id, 'data-value': String(s.delta) },
      el('td', { text: quote(s.text) }), el('td', { text: pct(s.p) }), el('td', { text: pct(s.p_compare) }),
      el('td', { class: s.delta >= 0 ? 'up' : 'down', text: (s.delta >= 0 ? '+' : '') + pct(s.delta) })));
  }
}

async function init() {
  $('#compare-on').addEventListener('change', () => { $('#compare').disabled = !$('#compare-on').checked; run(); });
  $('#controls').addEventListener('submit', (e) => { e.preventDefault(); state.silence.clear(); run(); });
  $('#swap-qk').addEventListener('change', run);
  for (const r of document.querySelectorAll('input[name=notation]')) r.addEventListener('change', run);
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
    $('#model-summary').textContent = `model ${m.name}: ${m.n_layer} layers × ${m.n_head} heads, ` +
      `${m.n_embd} dimensions (${m.head_dim} per head), context ${m.n_positions} tokens, vocabulary ${m.vocab_size}`;
    $('#prompt').maxLength = m.limits.max_prompt_bytes;
    await run();
  } catch (err) {
    showError(err.message);
  }
}

init();
