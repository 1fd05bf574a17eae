// Browser tests of the explorer page: start `jomoim serve` on a free port with a test model,
// drive Debian's chromium through playwright-core, and check that what the page shows equals
// the API's explain JSON for the same request. Screenshots go to JOMOIM_WEB_ARTIFACTS.
//
//   JOMOIM_EXE=build/release/jomoim JOMOIM_TEST_MODEL=.../tiny_gpt2/f32 JOMOIM_WEB_ASSETS=web \
//   JOMOIM_WEB_NODE_MODULES=.../node_modules JOMOIM_WEB_ARTIFACTS=build/release/web-artifacts \
//   node --test web/tests/explorer.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`set ${name}`);
  return v;
};
const require = createRequire(path.join(path.resolve(env('JOMOIM_WEB_NODE_MODULES')), 'noop.js'));
const { chromium } = require('playwright-core');
const artifacts = env('JOMOIM_WEB_ARTIFACTS');
// The page's texts in both languages (a plain module, no DOM).
const { TEXTS } = await import(pathToFileURL(path.join(path.resolve(env('JOMOIM_WEB_ASSETS')), 'i18n.js')).href);
fs.mkdirSync(artifacts, { recursive: true });
for (const f of fs.readdirSync(artifacts)) if (f.endsWith('.png')) fs.rmSync(path.join(artifacts, f));  // this run's only

let server, base, browser, page, userDataDir, model;

// The page's own number format (web/app.js fmt) and percentages.
const fmt = (x) => (x === null ? 'masked' : x === 0 ? '0' : Number(x).toPrecision(4));
const pct = (p) => (100 * p).toFixed(2) + '%';

async function api(route, body) {
  const res = await fetch(base + route, body === undefined ? {} : {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const json = await res.json();
  assert.equal(res.status, 200, `${route}: ${JSON.stringify(json)}`);
  return json;
}

// Runs action and waits until the page finished the explain run it triggered.
async function settled(action) {
  const before = await page.evaluate(() => document.body.dataset.ready || '');
  await action();
  await page.waitForFunction((b) => {
    const d = document.body.dataset;
    return d.ready && d.ready === d.pending && d.ready !== b;
  }, before, { timeout: 20000 });
}

const shot = (name) => page.screenshot({ path: path.join(artifacts, `${name}.png`), fullPage: true });

before(async () => {
  server = spawn(env('JOMOIM_EXE'), ['serve', '--model', env('JOMOIM_TEST_MODEL'), '--port', '0',
    '--assets', env('JOMOIM_WEB_ASSETS')], { stdio: ['ignore', 'pipe', 'inherit'] });
  base = await new Promise((resolve, reject) => {
    let out = '';
    server.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/http:\/\/127\.0\.0\.1:\d+\//);
      if (m) resolve(m[0].replace(/\/$/, ''));
    });
    server.on('exit', (code) => reject(new Error(`jomoim serve exited with ${code}: ${out}`)));
    setTimeout(() => reject(new Error('jomoim serve printed no URL in 20 s')), 20000);
  });
  model = await api('/api/model');
  userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'jomoim-chromium-'));
  // A fresh profile each run (Playwright passes it to chromium as --user-data-dir).
  browser = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.JOMOIM_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--no-first-run', '--disable-sync'],
    viewport: { width: 1280, height: 900 },
    locale: 'en-US',  // navigator.language: the page starts in English
  });
  page = browser.pages()[0] || await browser.newPage();
  const failures = [];
  page.on('pageerror', (e) => failures.push(e.message));
  page.on('requestfailed', (r) => failures.push(`${r.url()} failed`));
  page.on('request', (r) => { if (!r.url().startsWith(base)) failures.push(`request outside the server: ${r.url()}`); });
  page.failures = failures;
  page.apiRequests = [];  // every request to the API, in order
  page.on('request', (r) => { if (new URL(r.url()).pathname.startsWith('/api/')) page.apiRequests.push(r.url()); });
  await settled(() => page.goto(base + '/'));
});

after(async () => {
  if (browser) await browser.close();
  if (server) {
    const exited = new Promise((r) => server.on('exit', (code, sig) => r({ code, sig })));
    server.kill('SIGINT');
    const { code } = await exited;
    assert.equal(code, 0, 'jomoim serve stops cleanly on SIGINT');
  }
  if (userDataDir) fs.rmSync(userDataDir, { recursive: true, force: true });
});

const plain = (extra = {}) => ({ prompt: 'I have a lot', notation: 'paper', silence: [], swap_qk: false, top: 10,
  matrices: true, ...extra });

test('the page loads offline, shows the model and the tokens of the prompt', async () => {
  assert.match(await page.textContent('#model-summary'), new RegExp(`${model.n_layer} layers × ${model.n_head} heads`));
  const tok = await api('/api/tokenize', { prompt: 'I have a lot' });
  const chips = await page.$$eval('#tokens .token', (els) => els.map((e) => Number(e.dataset.id)));
  assert.deepEqual(chips, tok.ids);
  const texts = await page.$$eval('#tokens .tok-text', (els) => els.map((e) => e.textContent));
  assert.deepEqual(texts, tok.tokens.map((t) => t.text.replace(/ /g, '␣')));
  assert.deepEqual(page.failures, []);
  await shot('01-loaded');
});

test('the next-token bars are the API\'s prediction', async () => {
  const want = await api('/api/explain', plain());
  const rows = await page.$$eval('#prediction .bar-row', (els) => els.map((e) => ({
    id: Number(e.dataset.id), p: Number(e.dataset.value), label: e.querySelector('.bar-value').textContent })));
  assert.equal(rows.length, want.prediction.top.length);
  rows.forEach((r, i) => {
    assert.equal(r.id, want.prediction.top[i].id);
    assert.equal(r.p, want.prediction.top[i].probability);
    assert.equal(r.label, pct(want.prediction.top[i].probability));
  });
});

test('the grid has a tile per layer and head, coloured by the API\'s focus', async () => {
  const want = await api('/api/explain', plain());
  const tiles = await page.$$eval('#grid .tile', (els) => els.map((e) => ({
    layer: Number(e.dataset.layer), head: Number(e.dataset.head), focus: Number(e.dataset.focus) })));
  assert.equal(tiles.length, model.n_layer * model.n_head);
  for (const h of want.heads) {
    const t = tiles.find((x) => x.layer === h.layer && x.head === h.head);
    assert.ok(t, `tile L${h.layer} H${h.head}`);
    assert.equal(t.focus, h.focus);
  }
});

test('the grid tiles carry the API\'s head roles: every score, the label and its score', async () => {
  const want = (await api('/api/explain', plain())).head_roles;
  assert.equal(want.heads.length, model.n_layer * model.n_head);
  const tiles = await page.$$eval('#grid .tile', (els) => els.map((e) => ({
    layer: Number(e.dataset.layer), head: Number(e.dataset.head), role: e.dataset.role,
    scores: ['previous_token', 'first_token', 'self', 'induction'].map((k) => e.dataset[k]),
    chip: e.querySelector('.tile-role') ? { role: e.querySelector('.tile-role').dataset.role,
      value: e.querySelector('.tile-role .role-score').dataset.value, text: e.querySelector('.tile-role').textContent } : null })));
  let labelled = 0;
  for (const r of want.heads) {
    const t = tiles.find((x) => x.layer === r.layer && x.head === r.head);
    assert.ok(t, `tile L${r.layer} H${r.head}`);
    assert.deepEqual(t.scores, [r.previous_token, r.first_token, r.self, r.induction].map(String));
    assert.equal(t.role, r.label || '');
    if (!r.label) { assert.equal(t.chip, null); continue; }
    ++labelled;
    assert.equal(t.chip.role, r.label);
    assert.equal(t.chip.value, String(r[r.label]));
    assert.equal(t.chip.text, `${TEXTS.en[`grid.role.${r.label}`]} ${fmt(r[r.label])}`);
    assert.ok(r[r.label] >= want.thresholds[r.label], 'a label only at its threshold');
  }
  for (const r of want.heads)
    for (const k of ['induction', 'previous_token', 'self', 'first_token'])
      assert.equal(r.labels.includes(k), r[k] !== null && r[k] >= want.thresholds[k], `L${r.layer} H${r.head} ${k}`);
  assert.ok(labelled > 0, 'the test model has at least one labelled head on this prompt');
  await page.locator('#grid-view').screenshot({ path: path.join(artifacts, '11-head-roles.png') });
});

async function cells() {
  return page.$$eval('#heatmap td', (els) => els.map((e) => ({
    r: Number(e.dataset.row), c: Number(e.dataset.col), v: e.dataset.value, masked: e.classList.contains('masked') })));
}

test('clicking a head opens its heatmap: weights, scores, causal mask, hover readout', async () => {
  const L = model.n_layer - 1, H = model.n_head - 1;
  await page.click(`#grid .tile[data-layer="${L}"][data-head="${H}"]`);
  assert.match(await page.textContent('#head-title'), new RegExp(`Layer ${L}, head ${H}`));
  const want = (await api('/api/explain', plain())).layers[L].heads[H];
  for (const kind of ['weights', 'scores', 'scaled']) {
    await page.check(`input[name=matrix][value=${kind}]`);
    const got = await cells();
    assert.equal(got.length, want[kind].length * want[kind][0].length);
    for (const { r, c, v, masked } of got) {
      const w = want[kind][r][c];
      assert.equal(v, w === null ? 'null' : String(w), `${kind}[${r}][${c}]`);
      assert.equal(masked, !want.mask[r][c]);
      assert.equal(masked, c > r, `causal mask at ${r},${c}`);  // paper: query row r hears keys 0..r
      if (kind !== 'weights') assert.equal(w === null, masked, 'masked scores are null');
      else if (masked) assert.equal(w, 0, 'masked weights are 0');
    }
  }
  await page.check('input[name=matrix][value=weights]');
  await page.hover('#heatmap td[data-row="3"][data-col="1"]');
  const readout = await page.textContent('#readout');
  assert.ok(readout.includes(`Q₃·K₁ = ${fmt(want.scores[3][1])}`), readout);
  assert.ok(readout.includes(`scaled (×${fmt(want.scale)}) = ${fmt(want.scaled[3][1])}`), readout);
  assert.ok(readout.includes(`weight = ${fmt(want.weights[3][1])}`), readout);
  assert.ok(await page.isVisible('#tooltip'));
  // The last token's bars: its weights and how much each value moves the result.
  const last = await page.$$eval('#last-token .bar-row', (els) => els.map((e) => [Number(e.dataset.value), Number(e.dataset.contribution)]));
  assert.deepEqual(last, want.last_token.weights.map((w, j) => [w, want.last_token.contribution_norms[j]]));
  await shot('02-head-heatmap');
});

test('the notation toggle redraws the held answer transposed, without a request', async () => {
  const L = model.n_layer - 1, H = model.n_head - 1;
  const paperAnswer = await api('/api/explain', plain());
  const paper = paperAnswer.layers[L].heads[H];
  const col = await api('/api/explain', plain({ notation: '3b1b' }));
  const before = page.apiRequests.length;
  await page.check('input[name=notation][value="3b1b"]');
  const table = '#heatmap table';
  assert.equal(await page.getAttribute(table, 'data-transposed'), 'true');
  assert.equal(await page.getAttribute(table, 'data-layout'), col.layers[L].heads[H].layout.weights);
  assert.equal(await page.textContent('#heatmap th.corner'), 'key ↓ / query →');
  assert.equal(await page.getAttribute('#formula', 'data-formula'), col.formula, 'the API\'s 3b1b formula');
  assert.equal(await page.textContent('#formula'), 'V softmax(Kᵀ Q / √d)');
  assert.match(await page.textContent('#notation-text'), /column vectors.*every column adds up to 1/);
  assert.match(await page.textContent('#scores-text'), /row j, column i.*Kᵀ Q/);
  assert.equal(await page.textContent('#matrix-scores-label'), 'scores Kᵀ Q');
  // Every number in the heatmap is the paper's, transposed (and the API's own 3b1b number).
  for (const kind of ['weights', 'scores', 'scaled']) {
    await page.check(`input[name=matrix][value=${kind}]`);
    const got = await cells();
    assert.equal(got.length, paper[kind].length ** 2);
    for (const { r, c, v, masked } of got) {
      const want = paper[kind][c][r];
      assert.equal(v, want === null ? 'null' : String(want), `${kind} shown [${r}][${c}] = paper [${c}][${r}]`);
      assert.equal(col.layers[L].heads[H][kind][r][c], want, 'the API\'s 3b1b agrees');
      assert.equal(masked, !paper.mask[c][r]);
      assert.equal(masked, r > c, `causal mask at ${r},${c}`);  // 3b1b: query column c hears keys 0..c
    }
    const texts = await page.$$eval('#heatmap td:not(.masked)', (els) => els.map((e) => [Number(e.dataset.row), Number(e.dataset.col), e.textContent]));
    for (const [r, c, t] of texts) assert.equal(t, fmt(paper[kind][c][r]));
  }
  await page.check('input[name=matrix][value=weights]');
  await page.hover('#heatmap td[data-row="1"][data-col="3"]');  // key 1, query 3
  const readout = await page.textContent('#readout');
  assert.ok(readout.includes(`Q₃·K₁ = ${fmt(paper.scores[3][1])}`), readout);
  assert.ok(readout.includes(`scaled (×${fmt(paper.scale)}) = ${fmt(paper.scaled[3][1])}`), readout);
  assert.ok(readout.includes(`weight = ${fmt(paper.weights[3][1])}`), readout);
  assert.equal(await page.getAttribute('#readout', 'data-weight'), String(paper.weights[3][1]));
  const last = await page.$$eval('#last-token .bar-row', (els) => els.map((e) => Number(e.dataset.value)));
  assert.deepEqual(last, paper.last_token.weights, 'the last token\'s weights are the same in both notations');
  assert.equal(page.apiRequests.length, before, 'switching notation sends no request');
  await shot('03-notation-3b1b');
  await page.check('input[name=notation][value=paper]');
  assert.equal(await page.getAttribute(table, 'data-transposed'), 'false');
  assert.equal(await page.getAttribute('#formula', 'data-formula'), paperAnswer.formula);
  for (const { r, c, v } of await cells()) assert.equal(v, String(paper.weights[r][c]));
  assert.equal(page.apiRequests.length, before, 'switching back sends no request either');
});

// The softmax the test expects: log-sum-exp, computed apart from the page's code.
function softmaxRef(scores, tau) {
  const x = scores.map((s) => s / tau);
  const m = Math.max(...x);
  const lse = m + Math.log(x.reduce((a, v) => a + Math.exp(v - m), 0));
  return x.map((v) => Math.exp(v - lse));
}
async function panel() {
  return page.$$eval('#sm-table .sm-row', (els) => els.map((e) => ({
    label: e.querySelector('.sm-label').textContent, score: e.querySelector('.sm-score').value,
    w: e.querySelector('.sm-weight').dataset.value, wText: e.querySelector('.sm-weight').textContent,
    scaled: e.querySelector('.sm-scaled').dataset.value, bar: e.querySelector('.bar').style.width,
    model: e.querySelector('.sm-model') ? e.querySelector('.sm-model').dataset.value : null })));
}
// Every shown weight (its number, its text, its bar) is softmax(scores / tau).
async function checkPanel(scores, tau, what) {
  const rows = await panel();
  const want = softmaxRef(scores, tau);
  assert.equal(rows.length, scores.length, what);
  rows.forEach((r, j) => {
    const w = Number(r.w);
    assert.ok(Number.isFinite(w), `${what}: weight ${j} is a number (${r.w})`);
    assert.ok(Math.abs(w - want[j]) <= 1e-12 * Math.max(1, want[j]) + 1e-300, `${what}: weight ${j} ${w} vs ${want[j]}`);
    assert.equal(r.wText, fmt(want[j]), `${what}: weight ${j} as text`);
    assert.equal(Number(r.scaled), scores[j] / tau, `${what}: s/τ ${j}`);
    assert.equal(parseFloat(r.bar), Number((100 * w).toFixed(2)), `${what}: bar ${j} (${r.bar})`);
  });
  return rows;
}

test('the softmax panel: the seed\'s presets, live edits, large scores, the pass\'s own row', async () => {
  const before = page.apiRequests.length;
  await page.click('#softmax .preset[data-preset="lot"]');
  let rows = await checkPanel([1, 1, 1, 100], 1, 'I have a lot');
  assert.deepEqual(rows.map((r) => [r.label, r.score]), [['I', '1'], ['have', '1'], ['a', '1'], ['lot', '100']]);
  assert.ok(Number(rows[3].w) > 0.999999, 'lot takes nearly all the weight');
  // The question in front: 1000 takes all the weight, computed without overflow.
  await page.click('#softmax .preset[data-preset="cash"]');
  rows = await checkPanel([1, 1, 1, 1000, 1, 1, 1, 1, 100], 1, 'Cash or credit card? I have a lot');
  assert.equal(rows[3].label, 'card');
  assert.equal(rows[3].wText, '1.000');
  assert.equal(rows[8].wText, '0', 'lot\'s 100 counts for nothing next to 1000');
  assert.equal(await page.getAttribute('#softmax', 'data-valid'), 'true');
  await page.fill('#sm-tau', '300');
  await checkPanel([1, 1, 1, 1000, 1, 1, 1, 1, 100], 300, 'τ = 300');
  // Edits update live: each keystroke-equivalent input event recomputes.
  await page.click('#softmax .preset[data-preset="lot"]');
  const typed = ['3', '-1.5', '0', '12.25'];
  for (let j = 0; j < typed.length; ++j) {
    await page.fill(`#sm-table .sm-row[data-index="${j}"] .sm-score`, typed[j]);
    const scores = [3, -1.5, 0, 12.25].map((x, k) => (k <= j ? x : [1, 1, 1, 100][k]));
    await checkPanel(scores, 1, `after editing score ${j}`);
  }
  await page.fill('#sm-tau', '2');
  await checkPanel([3, -1.5, 0, 12.25], 2, 'τ = 2');
  assert.equal(await page.textContent('#sm-formula'), 'w = softmax(s / 2) = softmax(s × 0.5)');
  await page.click('#sm-tau-sqrt');
  assert.equal(await page.inputValue('#sm-tau'), `√${model.head_dim}`);
  await checkPanel([3, -1.5, 0, 12.25], Math.sqrt(model.head_dim), 'τ = √d');
  await page.fill('#sm-tau', '0');
  assert.ok(await page.isVisible('#sm-error'));
  assert.equal(await page.getAttribute('#softmax', 'data-valid'), 'false');
  await page.fill('#sm-tau', '1');
  assert.ok(!(await page.isVisible('#sm-error')));
  await page.click('#sm-add');
  await page.fill('#sm-table .sm-row[data-index="4"] .sm-score', '1e3');
  await checkPanel([3, -1.5, 0, 12.25, 1000], 1, 'an added score');
  await page.click('#sm-table .sm-row[data-index="0"] .sm-remove');
  await checkPanel([-1.5, 0, 12.25, 1000], 1, 'a score removed');
  // From the current pass: the selected head's row of raw scores for the chosen query.
  const L = Number(await page.getAttribute('#grid .tile.selected', 'data-layer'));
  const H = Number(await page.getAttribute('#grid .tile.selected', 'data-head'));
  const hd = (await api('/api/explain', plain())).layers[L].heads[H];
  await page.selectOption('#sm-query', '2');
  rows = await panel();
  assert.deepEqual(rows.map((r) => r.score), hd.scores[2].slice(0, 3).map(String), 'the API\'s raw scores Q₂·K₀..₂');
  assert.deepEqual(rows.map((r) => Number(r.model)), hd.weights[2].slice(0, 3), 'the API\'s weights beside them');
  assert.equal(Number(await page.inputValue('#sm-tau')), 1 / hd.scale);
  await checkPanel(hd.scores[2].slice(0, 3), 1 / hd.scale, 'from the pass');
  rows.forEach((r, j) => assert.ok(Math.abs(Number(r.w) - hd.weights[2][j]) < 1e-5, 'the panel\'s softmax agrees with the model\'s'));
  // A click on a heatmap cell takes its query there (paper: row 3).
  await page.click('#heatmap td[data-row="3"][data-col="0"]');
  assert.equal(await page.inputValue('#sm-query'), '3');
  rows = await panel();
  assert.deepEqual(rows.map((r) => r.score), hd.scores[3].map(String));
  assert.equal(page.apiRequests.length, before, 'the panel computes in the page: no request');
  await page.click('#softmax .preset[data-preset="cash"]');
  await page.locator('#softmax-view').screenshot({ path: path.join(artifacts, '09-softmax-panel.png') });
  await page.click('#softmax .preset[data-preset="pass"]');
});

const HANGUL = /[\uac00-\ud7a3]/;

test('both languages have the same texts, the Korean in Korean', () => {
  assert.deepEqual(Object.keys(TEXTS.ko).sort(), Object.keys(TEXTS.en).sort());
  const sameInBoth = new Set(['softmax.col.scaled', 'softmax.tauSqrt', 'softmax.sum']);
  for (const [key, v] of Object.entries(TEXTS.ko)) {
    if (sameInBoth.has(key)) continue;
    const s = typeof v === 'function' ? v(...Array(9).fill(1)) : v;
    assert.match(s, HANGUL, `ko ${key}`);
  }
  const all = Object.values(TEXTS.ko).map((v) => (typeof v === 'function' ? v(...Array(9).fill(1)) : v)).join(' ');
  for (const word of ['조모임', '질문', '쿼리', '키', '값', '점수', '가중치', '소프트맥스'])
    assert.ok(all.includes(word), `the seed's word ${word}`);
});

test('한국어: the toggle switches every text without a request, the numbers identical, remembered', async () => {
  const fonts = execFileSync('fc-list', [':lang=ko', 'family'], { encoding: 'utf8' });
  assert.match(fonts, /Noto Sans CJK KR/, 'Korean fonts installed (Debian fonts-noto-cjk, scripts/setup.sh)');
  await page.click('#softmax .preset[data-preset="lot"]');
  const numbers = () => page.$$eval('[data-value]', (els) => els.map((e) => `${e.dataset.value}|${e.textContent}`));
  const english = await numbers();
  const before = page.apiRequests.length;
  await page.check('input[name=lang][value=ko]');
  assert.equal(await page.getAttribute('html', 'lang'), 'ko');
  assert.deepEqual(await numbers(), english, 'every number and its text the same in Korean');
  for (const sel of ['#tokens-view h2', '#prediction-view h2', '#grid-view h2', '#head-title', '#notation-text',
    '#scores-text', '#softmax-view h2', '#softmax-view .explain', '#sm-source', '#status', '#model-summary',
    '#matrix-scores-label', '#run', '#seed', '#readout', 'legend'])
    assert.match(await page.textContent(sel), HANGUL, `${sel} in Korean`);
  for (const [key, text] of await page.$$eval('[data-i18n]', (els) => els.map((e) => [e.dataset.i18n, e.textContent])))
    if (HANGUL.test(TEXTS.ko[key])) assert.match(text, HANGUL, `[data-i18n=${key}]`);
  assert.equal(await page.textContent('#softmax-view h2'), '소프트맥스: 절대적인 점수 ⇒ 상대적인 가중치');
  assert.match(await page.textContent('#head-title'), /레이어 \d+, 헤드 \d+의 회의록/);
  await page.check('input[name=notation][value="3b1b"]');
  assert.match(await page.textContent('#notation-text'), /열벡터/);
  assert.equal(await page.textContent('#heatmap th.corner'), '키 ↓ / 질문 →');
  await page.check('input[name=notation][value=paper]');
  assert.match(await page.textContent('#notation-text'), /행벡터/);
  assert.equal(page.apiRequests.length, before, 'switching language sends no request');
  // The glyphs come from Noto Sans CJK KR, not from a fallback drawing boxes.
  const cdp = await page.context().newCDPSession(page);
  const { root } = await cdp.send('DOM.getDocument');
  const { nodeId } = await cdp.send('DOM.querySelector', { nodeId: root.nodeId, selector: '#softmax-view h2' });
  await cdp.send('CSS.enable');
  const { fonts: used } = await cdp.send('CSS.getPlatformFontsForNode', { nodeId });
  assert.ok(used.some((f) => /Noto Sans CJK KR/.test(f.familyName) && f.glyphCount > 0), JSON.stringify(used));
  await cdp.detach();
  await shot('10-korean');
  // Remembered across a reload.
  await page.reload();  // a fresh document: its first run counts from 1 again
  await page.waitForFunction(() => document.body.dataset.ready && document.body.dataset.ready === document.body.dataset.pending);
  assert.equal(await page.getAttribute('html', 'lang'), 'ko');
  assert.ok(await page.isChecked('input[name=lang][value=ko]'));
  await page.check('input[name=lang][value=en]');
  assert.equal(await page.textContent('#tokens-view h2'), 'The members');
  assert.equal(await page.evaluate(() => localStorage.getItem('jomoim.lang')), 'en');
  // With nothing remembered, a Korean browser starts in Korean.
  const p2 = await browser.newPage();
  await p2.addInitScript(() => {
    Object.defineProperty(Navigator.prototype, 'language', { get: () => 'ko-KR' });
    localStorage.removeItem('jomoim.lang');
  });
  await p2.goto(base + '/?summary');
  await p2.waitForFunction(() => document.body.dataset.ready && document.body.dataset.ready === document.body.dataset.pending);
  assert.equal(await p2.getAttribute('html', 'lang'), 'ko');
  assert.match(await p2.textContent('#grid-view h2'), HANGUL);
  await p2.close();
  await page.evaluate(() => localStorage.setItem('jomoim.lang', 'en'));
});

test('clicking a token silences it: the new prediction is the API\'s, the old one shown as baseline', async () => {
  await settled(() => page.click('#tokens .token[data-index="1"]'));
  assert.ok(await page.$eval('#tokens .token[data-index="1"]', (e) => e.classList.contains('silenced')));
  const want = await api('/api/explain', plain({ silence: [1] }));
  const probs = await page.$$eval('#prediction .bar-row', (els) => els.map((e) => [Number(e.dataset.id), Number(e.dataset.value)]));
  assert.deepEqual(probs, want.prediction.top.map((c) => [c.id, c.probability]));
  assert.ok(want.baseline, 'the API gives the unsilenced baseline');
  assert.ok(await page.isVisible('#baseline-note'));
  const plainTop = (await api('/api/explain', plain())).prediction.top;
  assert.notDeepEqual(want.prediction.top.map((c) => c.probability), plainTop.map((c) => c.probability));
  // Nobody hears token 1: its column is masked in the open heatmap (query rows 2.. included).
  const col1 = (await cells()).filter((x) => x.c === 1);
  assert.ok(col1.every((x) => x.masked), 'column of the silenced key masked');
  await shot('04-silenced-token-1');
  await settled(() => page.click('#tokens .token[data-index="1"]'));  // let it speak again
  assert.ok(!(await page.$eval('#tokens .token[data-index="1"]', (e) => e.classList.contains('silenced'))));
});

test('swapping Q and K shows the swapped pass\'s prediction beside the plain one', async () => {
  await settled(() => page.check('#swap-qk'));
  const want = await api('/api/explain', plain({ swap_qk: true }));
  const rows = await page.$$eval('#prediction .bar-row', (els) => els.map((e) => [Number(e.dataset.id), Number(e.dataset.value)]));
  assert.deepEqual(rows, want.prediction.top.map((c) => [c.id, c.probability]));
  assert.ok(want.baseline && await page.isVisible('#baseline-note'));
  const ghosts = await page.$$eval('#prediction .bar.ghost', (els) => els.length);
  assert.ok(ghosts > 0, 'the plain pass drawn as grey bars');
  await shot('05-swap-qk');
  await settled(() => page.uncheck('#swap-qk'));
  assert.ok(!(await page.isVisible('#baseline-note')));
});

test('the seed\'s two prompts side by side', async () => {
  await settled(() => page.click('#seed'));
  assert.ok(await page.isVisible('#compare-view'));
  const want = await api('/api/explain', plain({ compare: 'Cash or credit card? I have a lot' }));
  for (const [side, x] of [['prompt', want], ['compare', want.compare]]) {
    const probs = await page.$$eval(`#compare-cols [data-side="${side}"] .bar-row`, (els) => els.map((e) => [Number(e.dataset.id), Number(e.dataset.value)]));
    assert.deepEqual(probs, x.prediction.top.map((c) => [c.id, c.probability]), side);
    const att = await page.$$eval(`#compare-cols [data-side="${side}"] .token`, (els) => els.map((e) => Number(e.dataset.value)));
    const L = await page.evaluate(() => Number(document.querySelector('#grid .tile.selected').dataset.layer));
    assert.deepEqual(att, x.last_token_attention.mean_over_heads[L], side);
  }
  const shift = await page.$$eval('#shift tr[data-id]', (els) => els.map((e) => [Number(e.dataset.id), Number(e.dataset.value)]));
  assert.deepEqual(shift, want.compare.shift.map((s) => [s.id, s.delta]));
  await shot('06-compare-seed');
});

test('large models: summary first, one head\'s matrices when its tile is clicked', async () => {
  const p2 = await browser.newPage();
  await p2.goto(base + '/?summary');
  await p2.waitForFunction(() => document.body.dataset.ready && document.body.dataset.ready === document.body.dataset.pending);
  assert.equal(await p2.$$eval('#grid .thumb', (els) => els.length), 0, 'no thumbnails without matrices');
  const L = model.n_layer - 1, H = 1;
  await p2.click(`#grid .tile[data-layer="${L}"][data-head="${H}"]`);
  await p2.waitForSelector(`#grid .tile.selected[data-layer="${L}"][data-head="${H}"]`);
  await p2.waitForSelector('#heatmap table');
  const want = (await api('/api/explain', plain({ layer: L, head: H, matrices: undefined }))).layers[0].heads[0];
  const got = await p2.$$eval('#heatmap td', (els) => els.map((e) => [Number(e.dataset.row), Number(e.dataset.col), e.dataset.value]));
  assert.equal(got.length, want.weights.length ** 2);
  for (const [r, c, v] of got) assert.equal(v, String(want.weights[r][c]));
  await p2.screenshot({ path: path.join(artifacts, '08-summary-path.png'), fullPage: true });
  await p2.close();
});

test('a prompt longer than the context is refused with the limit named', async () => {
  const long = 'I have a lot '.repeat(model.n_positions);
  await settled(async () => {
    await page.fill('#prompt', long);
    await page.click('#run');
  });
  const msg = await page.textContent('#error');
  assert.ok(await page.isVisible('#error'));
  assert.match(msg, new RegExp(`context is ${model.n_positions} tokens`));
  await shot('07-too-long');
  await settled(async () => {
    await page.fill('#prompt', 'I have a lot');
    await page.click('#run');
  });
  assert.ok(!(await page.isVisible('#error')));
  assert.deepEqual(page.failures.filter((f) => !f.includes('/api/')), []);
});

test('generation: the step slider shows each step\'s attention, prediction and attribution, and the tokens are jomoim generate\'s', async () => {
  if (await page.isChecked('#compare-on')) await settled(() => page.uncheck('#compare-on'));  // the seed's test left it on
  await page.fill('#generate', '4');
  await page.fill('#temperature', '0.8');
  await page.fill('#gen-seed', '3');
  await settled(() => page.click('#run'));
  assert.ok(await page.isVisible('#steps-view'));
  const want = await api('/api/explain', plain({ generate: 4, temperature: 0.8, seed: 3 }));
  const cli = JSON.parse(execFileSync(env('JOMOIM_EXE'), ['generate', '--model', env('JOMOIM_TEST_MODEL'), 'I have a lot',
    '-n', '4', '--temperature', '0.8', '--seed', '3', '--json']).toString());
  assert.deepEqual(want.generation.ids, cli.ids, 'the steps are jomoim generate\'s tokens with the same seed');
  assert.equal(want.steps.length, 4);
  assert.equal(await page.$eval('#step', (e) => e.max), '3');
  const { L, H } = await page.evaluate(() => {
    const t = document.querySelector('#grid .tile.selected');
    return { L: Number(t.dataset.layer), H: Number(t.dataset.head) };
  });
  for (let k = 0; k < 4; ++k) {
    await page.$eval('#step', (e, v) => { e.value = String(v); e.dispatchEvent(new Event('input')); }, k);
    const st = want.steps[k];
    assert.equal(await page.$eval('#step-label', (e) => Number(e.dataset.id)), st.id, `step ${k}`);
    assert.match(await page.textContent('#step-label'), new RegExp(`^${k + 1} of 4: after ${st.position} `));
    const att = await page.$$eval('#step-tokens .token[data-index]', (els) => els.map((e) => Number(e.dataset.value)));
    assert.deepEqual(att, st.attention[L][H], `step ${k}: the selected head's attention of the last token`);
    assert.equal(att.length, want.tokens.length + k);
    const pred = await page.$$eval('#step-prediction .bar-row', (els) => els.map((e) => [Number(e.dataset.id), Number(e.dataset.value)]));
    assert.deepEqual(pred, st.prediction.top.map((c) => [c.id, c.probability]), `step ${k}: prediction`);
    const chosen = await page.$$eval('#step-prediction .bar-row.chosen', (els) => els.map((e) => Number(e.dataset.id)));
    assert.deepEqual(chosen, st.prediction.top.some((c) => c.id === st.id) ? [st.id] : []);
    const argued = await page.$$eval('#step-argued .bar-row', (els) => els.map((e) => [Number(e.dataset.index), Number(e.dataset.value)]));
    for (const [j, v] of argued)
      assert.equal(v, st.attribution.heads.reduce((a, h) => a + h.by_source[j], 0), `step ${k} source ${j}`);
    if (k === 2) await page.locator('#steps-view').screenshot({ path: path.join(artifacts, '12-generation-step-2.png') });
  }
  // Another head: the same step, that head's row.
  const L2 = model.n_layer - 1, H2 = model.n_head - 1;
  await page.click(`#grid .tile[data-layer="${L2}"][data-head="${H2}"]`);
  const att = await page.$$eval('#step-tokens .token[data-index]', (els) => els.map((e) => Number(e.dataset.value)));
  assert.deepEqual(att, want.steps[3].attention[L2][H2]);
  // Comparing turns generation off, and says so.
  await settled(() => page.check('#compare-on'));
  assert.ok(!(await page.isVisible('#steps-view')));
  assert.ok(await page.isVisible('#steps-off'));
  await settled(() => page.uncheck('#compare-on'));
  await page.fill('#generate', '0');
  await settled(() => page.click('#run'));
  assert.ok(!(await page.isVisible('#steps-view')));
  assert.deepEqual(page.failures.filter((f) => !f.includes('/api/')), []);
});
