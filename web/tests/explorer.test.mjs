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
// The page's colour scales (a plain module, no DOM): the canvas tests read every cell's colour
// back and compare it with the colour of the API's number.
const { weightRGB, divergingRGB } = await import(pathToFileURL(path.join(path.resolve(env('JOMOIM_WEB_ASSETS')), 'util.js')).href);
fs.mkdirSync(artifacts, { recursive: true });
for (const f of fs.readdirSync(artifacts)) if (f.endsWith('.png')) fs.rmSync(path.join(artifacts, f));  // this run's only

let server, base, browser, page, userDataDir, model;

// The page's own number format (web/app.js fmt) and percentages.
const fmt = (x) => (x === null ? 'masked' : x === 0 ? '0' : Number(x).toPrecision(4));
const signed = (x) => (x > 0 ? '+' : '') + fmt(x);
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

// `jomoim serve` on a free port with this model (and extra options): { server, base }.
async function startServer(modelDir, extra = []) {
  const srv = spawn(env('JOMOIM_EXE'), ['serve', '--model', modelDir, '--port', '0', '--assets', env('JOMOIM_WEB_ASSETS'),
    ...extra], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((resolve, reject) => {
    let out = '';
    srv.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/http:\/\/127\.0\.0\.1:\d+\//);
      if (m) resolve(m[0].replace(/\/$/, ''));
    });
    srv.on('exit', (code) => reject(new Error(`jomoim serve exited with ${code}: ${out}`)));
    setTimeout(() => reject(new Error('jomoim serve printed no URL in 20 s')), 20000);
  });
  return { server: srv, base: url };
}

before(async () => {
  ({ server, base } = await startServer(env('JOMOIM_TEST_MODEL')));
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


// ---- The decision's attribution, the logit lens, the Q/K/V strips. ----

// What the attribution block `sel` must show for the API's attribution a (T source tokens):
// the quantity and the sum, every part, the loudest members, every head.
async function checkAttribution(sel, a, what) {
  const got = await page.$eval(sel, (b) => {
    const rows = (s) => [...b.querySelectorAll(`${s} .bar-row`)].map((e) => ({ ...e.dataset,
      value: e.querySelector('.bar-value').dataset.value, text: e.querySelector('.bar-value').textContent }));
    const head = b.querySelector('.att-head');
    return {
      target: head.dataset.target, contrast: head.dataset.contrast,
      logit: head.querySelector('.att-logit').dataset.value, sum: head.querySelector('.att-sum').dataset.value,
      logitText: head.querySelector('.att-logit').textContent, sumText: head.querySelector('.att-sum').textContent,
      parts: rows('.att-parts'), sources: rows('.att-sources'),
      heads: [...b.querySelectorAll('table.att-heads td')].map((e) => ({ ...e.dataset, text: e.textContent })),
    };
  });
  assert.equal(got.target, String(a.target.id), `${what}: target`);
  assert.equal(got.contrast, a.contrast ? String(a.contrast.id) : '', `${what}: contrast`);
  const logit = a.target.logit - (a.contrast ? a.contrast.logit : 0);
  assert.equal(Number(got.logit), logit, `${what}: the model's logit (difference)`);
  assert.equal(Number(got.sum), a.sum, `${what}: the API's sum of the parts`);
  assert.equal(got.logitText, fmt(logit));
  assert.equal(got.sumText, fmt(a.sum));
  assert.ok(Math.abs(a.sum - logit) <= 1e-4 * Math.max(1, Math.abs(logit)), `${what}: sum ${a.sum} vs logit ${logit}`);
  // The parts, in order: token, position, then per layer its heads' sum and its MLP, the biases.
  const layers = new Array(model.n_layer).fill(0);
  for (const h of a.heads) layers[h.layer] += h.total;
  const want = [['token', '', a.embeddings.token], ['position', '', a.embeddings.position]];
  for (let l = 0; l < model.n_layer; ++l) want.push(['attn', String(l), layers[l]], ['mlp', String(l), a.mlps[l]]);
  want.push(['biases', '', a.biases]);
  assert.deepEqual(got.parts.map((r) => [r.part, r.layer || '', Number(r.value)]), want, `${what}: parts`);
  for (const r of got.parts) assert.equal(r.text, signed(Number(r.value)));
  const total = want.reduce((s, [, , v]) => s + v, 0);
  assert.ok(Math.abs(total - a.sum) <= 1e-9 * Math.max(1, Math.abs(a.sum)), `${what}: the parts add up to the sum`);
  // By member: Σ over heads, the loudest 12 first.
  const T = a.heads[0].by_source.length;
  const by = Array.from({ length: T }, (_, j) => a.heads.reduce((s, h) => s + h.by_source[j], 0));
  const order = by.map((_, j) => j).sort((p, q) => Math.abs(by[q]) - Math.abs(by[p]) || p - q).slice(0, 12);
  assert.deepEqual(got.sources.map((r) => [Number(r.index), Number(r.value)]), order.map((j) => [j, by[j]]), `${what}: by member`);
  for (const r of got.sources) assert.equal(r.text, signed(Number(r.value)));
  // By head: every (layer, head) total.
  assert.equal(got.heads.length, model.n_layer * model.n_head);
  for (const h of a.heads) {
    const c = got.heads.find((x) => Number(x.layer) === h.layer && Number(x.head) === h.head);
    assert.ok(c, `${what}: head L${h.layer} H${h.head}`);
    assert.equal(Number(c.value), h.total);
    assert.equal(c.text, signed(h.total));
  }
}

test('the decision\'s attribution: parts, members and heads are the API\'s, their sum beside the logit', async () => {
  const want = await api('/api/explain', plain());
  assert.equal(want.attribution.target.id, want.prediction.top[0].id, 'without a target: the predicted token');
  await checkAttribution('#attribution .att-block[data-side="prompt"]', want.attribution, 'plain');
  assert.equal(await page.$$eval('#attribution .att-block', (els) => els.length), 1, 'one block without compare');
  assert.match(await page.textContent('#attribution-view .explain'), /frozen/);
  await page.locator('#attribution-view').screenshot({ path: path.join(artifacts, '13-attribution.png') });
  // A head of the table opens its minutes (the grid's selection follows), no request.
  const before = page.apiRequests.length;
  await page.click('#attribution table.att-heads td[data-layer="1"][data-head="2"]');
  await page.waitForFunction(() => document.body.dataset.head === '1/2');
  assert.deepEqual(await page.$eval('#grid .tile.selected', (e) => [e.dataset.layer, e.dataset.head]), ['1', '2']);
  assert.match(await page.textContent('#head-title'), /Layer 1, head 2/);
  assert.ok(await page.$eval('#attribution table.att-heads td[data-layer="1"][data-head="2"]', (e) => e.classList.contains('sel')));
  assert.equal(page.apiRequests.length, before, 'the full answer holds every head');
});

test('target and contrast: the attribution of the typed tokens, and the server\'s one-line refusal', async () => {
  await page.fill('#target', 'e');
  await page.fill('#contrast', '.');
  await settled(() => page.click('#att-apply'));
  const want = await api('/api/explain', plain({ target: 'e', contrast: '.' }));
  assert.equal(want.attribution.target.text, 'e');
  assert.equal(want.attribution.contrast.text, '.');
  await checkAttribution('#attribution .att-block[data-side="prompt"]', want.attribution, 'target e − contrast .');
  assert.equal(await page.textContent('#attribution .att-what'),
    `logit of “e” (id ${want.attribution.target.id}) − logit of “.” (id ${want.attribution.contrast.id}):`);
  await page.locator('#attribution-view').screenshot({ path: path.join(artifacts, '17-attribution-target.png') });
  // More than one token: the server refuses, the page shows its line (at the top and here).
  await page.fill('#target', 'xyz');
  await settled(() => page.click('#att-apply'));
  const res = await fetch(base + '/api/explain', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(plain({ target: 'xyz', contrast: '.' })) });
  assert.equal(res.status, 400);
  const { error } = await res.json();
  assert.match(error, /target/);
  assert.ok(await page.isVisible('#error'));
  assert.equal(await page.textContent('#error'), error);
  assert.ok(await page.isVisible('#att-error'));
  assert.equal(await page.textContent('#att-error'), error);
  await page.locator('#attribution-view').screenshot({ path: path.join(artifacts, '17-attribution-target-refused.png') });
  await page.fill('#target', '');
  await page.fill('#contrast', '');
  await settled(() => page.click('#att-apply'));
  assert.ok(!(await page.isVisible('#error')));
  assert.ok(!(await page.isVisible('#att-error')));
  await checkAttribution('#attribution .att-block[data-side="prompt"]', (await api('/api/explain', plain())).attribution, 'back to the prediction');
});

test('the logit lens: a row per layer, each the API\'s top tokens, the final prediction marked', async () => {
  const want = await api('/api/explain', plain());
  const final = want.prediction.top[0].id;
  assert.equal(want.logit_lens.length, model.n_layer + 1);
  const rows = await page.$$eval('#lens .lens-row', (els) => els.map((e) => ({
    layer: Number(e.dataset.layer), rank: Number(e.dataset.finalRank), head: e.querySelector('th').textContent,
    toks: [...e.querySelectorAll('.lens-tok')].map((t) => ({ id: Number(t.dataset.id), p: Number(t.dataset.value),
      final: t.classList.contains('final'), text: t.querySelector('.lens-p').textContent })) })));
  assert.equal(rows.length, want.logit_lens.length);
  rows.forEach((r, k) => {
    const w = want.logit_lens[k];
    assert.equal(r.layer, w.layer);
    assert.equal(r.head, w.layer < 0 ? 'after the embeddings' : `after layer ${w.layer}`);
    assert.deepEqual(r.toks.map((t) => [t.id, t.p]), w.top.map((c) => [c.id, c.probability]), `row ${k}`);
    for (const t of r.toks) {
      assert.equal(t.final, t.id === final, `row ${k}: the final token marked, no other`);
      assert.equal(t.text, pct(t.p));
    }
    assert.equal(r.rank, w.top.findIndex((c) => c.id === final));
  });
  assert.equal(rows[rows.length - 1].toks[0].id, final, 'the last row is the model\'s own prediction');
  assert.equal(Number(await page.getAttribute('#lens-final', 'data-id')), final);
  await page.locator('#lens-view').screenshot({ path: path.join(artifacts, '14-logit-lens.png') });
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


// The Q/K/V strips' cells: per block, [row, d, value] (row: the token; in 3b1b drawn as a column).
async function strips(p = page) {
  return p.$$eval('#qkv .strips', (els) => Object.fromEntries(els.map((g) => [g.dataset.kind, {
    transposed: g.dataset.transposed,
    cells: [...g.querySelectorAll('.cell')].map((c) => [Number(c.dataset.row), Number(c.dataset.d), c.dataset.value,
      getComputedStyle(c).gridRowStart, getComputedStyle(c).gridColumnStart]),
    tails: [...g.querySelectorAll('.tail')].map((t) => [Number(t.dataset.row), t.className.split(' ').pop(), t.dataset.value, t.textContent]),
  }])));
}
const num = (v) => (v === 'null' ? null : Number(v));

test('Q, K and V strips: the selected head\'s vectors, Q_i·K_j taken apart dimension by dimension', async () => {
  const L = Number(await page.getAttribute('#grid .tile.selected', 'data-layer'));
  const H = Number(await page.getAttribute('#grid .tile.selected', 'data-head'));
  const want = await api('/api/explain', plain());
  const hd = want.layers[L].heads[H];
  const before = page.apiRequests.length;
  const i = 2;
  await page.selectOption('#qkv-query', String(i));
  assert.equal(await page.getAttribute('#qkv', 'data-query'), String(i));
  assert.equal(await page.getAttribute('#qkv', 'data-path'), 'dom');
  assert.match(await page.textContent('#qkv-title'), new RegExp(`Layer ${L}, head ${H}`));
  const D = model.head_dim, T = want.tokens.length;
  const s = await strips();
  assert.deepEqual(s.q.cells.map(([r, d, v]) => [r, d, num(v)]), hd.q[i].map((x, d) => [0, d, x]), 'Q_i');
  for (const kind of ['k', 'v'])
    assert.deepEqual(s[kind].cells.map(([r, d, v]) => [r, d, num(v)]), hd[kind].flatMap((row, j) => row.map((x, d) => [j, d, x])), kind);
  // The products q_i[d] k_j[d] (null where query i does not hear key j), their sums and the scores.
  const prods = hd.k.map((k, j) => (hd.mask[i][j] ? hd.q[i].map((q, d) => q * k[d]) : null));
  assert.deepEqual(s.prod.cells.map(([r, d, v]) => [r, d, num(v)]),
    prods.flatMap((p, j) => (p || new Array(D).fill(null)).map((x, d) => [j, d, x])), 'the products');
  for (let j = 0; j < T; ++j) {
    const tail = Object.fromEntries(s.prod.tails.filter((t) => t[0] === j).map((t) => [t[1], t]));
    const sum = prods[j] ? prods[j].reduce((a, x) => a + x, 0) : null;
    assert.equal(num(tail.sum[2]), sum, `Σ_d for key ${j}`);
    assert.equal(num(tail.score[2]), hd.scores[i][j], `the API's score for key ${j}`);
    assert.equal(num(tail.weight[2]), hd.weights[i][j]);
    if (sum !== null) {
      assert.equal(tail.sum[3], fmt(sum));
      const scale = prods[j].reduce((a, x) => a + Math.abs(x), 0);
      assert.ok(Math.abs(sum - hd.scores[i][j]) <= 1e-5 * Math.max(1, scale), `Σ_d ${sum} = score ${hd.scores[i][j]}`);
    }
    assert.equal(sum === null, j > i, 'the causal mask');
  }
  // E_i: the norms the API gives, and its vectors (POST /api/embedding) as three strips.
  for (const [cls, k] of [['tok-norm', 'token_embedding_norm'], ['pos-norm', 'position_embedding_norm'], ['emb-norm', 'embedding_norm']])
    assert.equal(Number(await page.getAttribute(`#qkv .qkv-embed .${cls}`, 'data-value')), want.tokens[i][k], k);
  await page.waitForSelector(`#qkv .qkv-e[data-query="${i}"][data-ready="1"]`);
  const emb = await api('/api/embedding', { prompt: 'I have a lot', index: i });
  const ecells = (await strips()).e.cells;
  const C = model.n_embd;
  assert.equal(ecells.length, 3 * C);
  assert.deepEqual(ecells.map(([r, d, v]) => [r, d, num(v)]),
    [emb.token_embedding, emb.position_embedding, emb.embedding].flatMap((v, r) => v.map((x, d) => [r, d, x])), 'E_i strips');
  const norm = (v) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));
  assert.ok(Math.abs(norm(emb.token_embedding) - want.tokens[i].token_embedding_norm) < 1e-6);
  assert.ok(Math.abs(norm(emb.position_embedding) - want.tokens[i].position_embedding_norm) < 1e-6);
  // Hovering a product: the readout's numbers.
  await page.hover(`#qkv .strips[data-kind="prod"] .cell[data-row="1"][data-d="3"]`);
  const r = await page.$eval('#qkv-readout', (e) => ({ ...e.dataset, text: e.textContent }));
  assert.equal(num(r.value), hd.q[i][3] * hd.k[1][3]);
  assert.equal(num(r.sum), prods[1].reduce((a, x) => a + x, 0));
  assert.equal(num(r.score), hd.scores[i][1]);
  assert.ok(r.text.includes(`= ${fmt(hd.scores[i][1])}`), r.text);
  // Paper: a row per vector; 3b1b: the same cells as columns, no request.
  for (const [row, d, , gr, gc] of s.k.cells) assert.deepEqual([gr, gc], [String(row + 2), String(d + 2)]);
  await page.locator('#qkv-view').screenshot({ path: path.join(artifacts, '15-qkv-strips.png') });
  await page.check('input[name=notation][value="3b1b"]');
  const t = await strips();
  assert.equal(t.k.transposed, 'true');
  for (const [row, d, v, gr, gc] of t.k.cells) {
    assert.deepEqual([gr, gc], [String(d + 2), String(row + 2)], 'K_j is column j');
    assert.equal(num(v), hd.k[row][d]);
  }
  await page.locator('#qkv-view').screenshot({ path: path.join(artifacts, '16-qkv-strips-3b1b.png') });
  await page.check('input[name=notation][value=paper]');
  // Only E_i's lookup (once per token, kept): no explain request; the notation sends nothing.
  const sent = page.apiRequests.slice(before);
  assert.deepEqual(sent.map((u) => new URL(u).pathname), ['/api/embedding'], 'choosing the query asks only for E_i, once');
  await page.selectOption('#qkv-query', String(T - 1));
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
    '#matrix-scores-label', '#run', '#seed', '#readout', 'legend',
    '#attribution-view h2', '#attribution-view .explain', '#attribution .att-what', '#attribution .att-parts .bar-label',
    '#attribution h4', '#att-apply', '#lens-view h2', '#lens-view .explain', '#lens-final', '#lens .lens-row th',
    '#lens .lens-where', '#qkv-title', '#qkv-view .explain', '#qkv h4', '#qkv .qkv-embed', '#qkv-readout'])
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
  for (const v of ['attribution', 'lens', 'qkv'])
    await page.locator(`#${v}-view`).screenshot({ path: path.join(artifacts, `10-korean-${v}.png`) });
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
  // The attribution of both decisions side by side, each its own prompt's.
  await checkAttribution('#attribution .att-block[data-side="prompt"]', want.attribution, 'the first prompt');
  await checkAttribution('#attribution .att-block[data-side="compare"]', want.compare.attribution, 'the second prompt');
  assert.equal(await page.textContent('#attribution .att-block[data-side="compare"] h3'), `“${want.compare.prompt}”`);
  await page.locator('#attribution-view').screenshot({ path: path.join(artifacts, '18-attribution-compare.png') });
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

// A prompt of exactly n tokens (the tiny model's byte-level vocabulary: about a token a character).
async function promptOf(n) {
  const source = 'Cash or credit card? I have a lot of the other thing, and then the rest. ';
  let s = '';
  for (let k = 0; k < 20 * n; ++k) {
    s += source[k % source.length];
    const { count } = await api('/api/tokenize', { prompt: s });
    if (count === n) return s;
    assert.ok(count < n, 'one character adds at most one token');
  }
  throw new Error(`no prompt of ${n} tokens`);
}

// Every cell's colour on a matrix canvas: the pixel at each cell's centre.
const canvasCells = (p, sel) => p.$eval(sel, (c) => {
  const px = Number(c.dataset.px), py = Number(c.dataset.py), rows = Number(c.dataset.rows), cols = Number(c.dataset.cols);
  const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const cells = [];
  for (let r = 0; r < rows; ++r) {
    const row = [];
    for (let k = 0; k < cols; ++k) {
      const o = 4 * ((r * py + (py >> 1)) * c.width + k * px + (px >> 1));
      row.push([data[o], data[o + 1], data[o + 2]]);
    }
    cells.push(row);
  }
  return { px, py, rows, cols, maxAbs: Number(c.dataset.maxAbs), transposed: c.dataset.transposed, cells };
});
const MASKED = ['215,215,215', '238,238,238'];  // the canvas's hatching (web/util.js maskedRGB)

test('a long prompt (the whole context): heatmap and Q/K/V strips on canvases, every cell the API\'s number', async () => {
  const T = model.n_positions;
  const long = await promptOf(T);
  const p2 = await browser.newPage();
  const requests = [];
  p2.on('request', (r) => { if (new URL(r.url()).pathname.startsWith('/api/')) requests.push(r.url()); });
  const errors = [];
  p2.on('pageerror', (e) => errors.push(e.message));
  // ?canvas=32: the canvas path above 32 tokens (64 by default; the tiny model's context is 48).
  await p2.goto(base + '/?summary&canvas=32');
  const ready = () => p2.waitForFunction(() => document.body.dataset.ready && document.body.dataset.ready === document.body.dataset.pending);
  await ready();
  const before = await p2.evaluate(() => document.body.dataset.ready);
  await p2.fill('#prompt', long);
  await p2.click('#run');
  await p2.waitForFunction((b) => document.body.dataset.ready !== b && document.body.dataset.ready === document.body.dataset.pending, before);
  assert.equal(await p2.$$eval('#tokens .token', (els) => els.length), T);
  const L = Number(await p2.getAttribute('#grid .tile.selected', 'data-layer'));
  const H = Number(await p2.getAttribute('#grid .tile.selected', 'data-head'));
  const hd = (await api('/api/explain', plain({ prompt: long, layer: L, head: H, matrices: undefined }))).layers[0].heads[0];
  // No table cells: one canvas, T × T, each cell the colour of the API's weight (masked: hatched).
  assert.equal(await p2.$$eval('#heatmap td', (els) => els.length), 0);
  const check = async (kind, transposed) => {
    const got = await canvasCells(p2, '#heatmap canvas.heatmap-canvas');
    assert.equal(got.rows, T);
    assert.equal(got.cols, T);
    assert.equal(got.transposed, String(transposed));
    let maxAbs = 0;
    for (const row of hd[kind]) for (const x of row) if (x !== null) maxAbs = Math.max(maxAbs, Math.abs(x));
    if (kind !== 'weights') assert.equal(got.maxAbs, maxAbs);
    for (let r = 0; r < T; ++r) for (let c = 0; c < T; ++c) {
      const [q, k] = transposed ? [c, r] : [r, c];
      const x = hd[kind][q][k];
      const colour = got.cells[r][c].join(',');
      if (!hd.mask[q][k]) assert.ok(MASKED.includes(colour), `${kind} masked at ${r},${c}: ${colour}`);
      else assert.equal(colour, (kind === 'weights' ? weightRGB(x) : divergingRGB(x, maxAbs)).join(','), `${kind} at ${r},${c}`);
    }
    return got.px;
  };
  const px = await check('weights', false);
  await p2.check('input[name=matrix][value=scores]');
  await check('scores', false);
  await p2.check('input[name=matrix][value=weights]');
  // Hovering a cell: its three numbers in the readout.
  const [q, k] = [T - 1, 5];
  await p2.hover('#heatmap canvas', { position: { x: k * px + px / 2, y: q * px + px / 2 } });
  const r = await p2.$eval('#readout', (e) => ({ ...e.dataset }));
  assert.deepEqual([Number(r.query), Number(r.key), Number(r.score), Number(r.weight)], [q, k, hd.scores[q][k], hd.weights[q][k]]);
  assert.ok(await p2.isVisible('#tooltip'));
  // The last token's bars: the 24 keys it weighs most (in order), not a row per token.
  const last = await p2.$$eval('#last-token .bar-row', (els) => els.map((e) => [Number(e.dataset.index), Number(e.dataset.value)]));
  const top = hd.last_token.weights.map((w, j) => j).sort((a, b) => hd.last_token.weights[b] - hd.last_token.weights[a] || a - b)
    .slice(0, 24).sort((a, b) => a - b);
  assert.deepEqual(last, top.map((j) => [j, hd.last_token.weights[j]]));
  assert.ok(await p2.isVisible('#last-token-some'));
  // The Q/K/V strips: K, the products and V as canvases for the last query.
  assert.equal(await p2.getAttribute('#qkv', 'data-path'), 'canvas');
  assert.equal(await p2.getAttribute('#qkv', 'data-query'), String(T - 1));
  assert.equal(await p2.$$eval('#qkv .strips[data-kind="k"], #qkv .strips[data-kind="prod"]', (els) => els.length), 0);
  const i = T - 1, D = model.head_dim;
  const prods = hd.k.map((kk, j) => (hd.mask[i][j] ? hd.q[i].map((x, d) => x * kk[d]) : null));
  const checkStrips = async (transposed) => {
    for (const [kind, value] of [['k', (j, d) => hd.k[j][d]], ['v', (j, d) => hd.v[j][d]], ['prod', (j, d) => (prods[j] ? prods[j][d] : null)]]) {
      const got = await canvasCells(p2, `#qkv canvas[data-kind="${kind}"]`);
      assert.deepEqual([got.rows, got.cols], transposed ? [D, T] : [T, D], kind);
      let maxAbs = 0;
      for (let j = 0; j < T; ++j) for (let d = 0; d < D; ++d) if (value(j, d) !== null) maxAbs = Math.max(maxAbs, Math.abs(value(j, d)));
      assert.equal(got.maxAbs, maxAbs, kind);
      for (let j = 0; j < T; ++j) for (let d = 0; d < D; ++d) {
        const colour = (transposed ? got.cells[d][j] : got.cells[j][d]).join(',');
        const x = value(j, d);
        if (x === null) assert.ok(MASKED.includes(colour), `${kind} masked at ${j},${d}`);
        else assert.equal(colour, divergingRGB(x, maxAbs).join(','), `${kind} at key ${j}, dim ${d}`);
      }
    }
  };
  const checkSums = async (transposed) => {
    const sums = prods.map((p) => (p ? p.reduce((a, x) => a + x, 0) : null));
    const got = await canvasCells(p2, '#qkv canvas[data-kind="sum"]');
    assert.deepEqual([got.rows, got.cols], transposed ? [1, T] : [T, 1]);
    const maxAbs = Math.max(...sums.filter((x) => x !== null).map(Math.abs));
    assert.equal(got.maxAbs, maxAbs);
    sums.forEach((x, j) => {
      const colour = (transposed ? got.cells[0][j] : got.cells[j][0]).join(',');
      if (x === null) assert.ok(MASKED.includes(colour));
      else assert.equal(colour, divergingRGB(x, maxAbs).join(','), `Σ of key ${j}`);
    });
  };
  await checkStrips(false);
  await checkSums(false);
  const spx = Number(await p2.getAttribute('#qkv canvas[data-kind="prod"]', 'data-px'));
  const spy = Number(await p2.getAttribute('#qkv canvas[data-kind="prod"]', 'data-py'));
  await p2.hover('#qkv canvas[data-kind="prod"]', { position: { x: 3 * spx + spx / 2, y: 7 * spy + spy / 2 } });  // key 7, dim 3
  const s = await p2.$eval('#qkv-readout', (e) => ({ ...e.dataset }));
  assert.deepEqual([Number(s.key), Number(s.d), Number(s.value), Number(s.sum), Number(s.score)],
    [7, 3, hd.q[i][3] * hd.k[7][3], prods[7].reduce((a, x) => a + x, 0), hd.scores[i][7]]);
  assert.ok(Math.abs(Number(s.sum) - hd.scores[i][7]) <= 1e-5 * Math.max(1, prods[7].reduce((a, x) => a + Math.abs(x), 0)));
  await p2.screenshot({ path: path.join(artifacts, '19-long-prompt-canvas.png'), fullPage: true });
  // 3b1b: the same canvases transposed, no request.
  const sent = requests.length;
  await p2.check('input[name=notation][value="3b1b"]');
  await check('weights', true);
  await checkStrips(true);
  await checkSums(true);
  assert.equal(requests.length, sent, 'switching notation on the canvas path sends no request');
  await p2.locator('#head-view').screenshot({ path: path.join(artifacts, '20-long-prompt-3b1b.png') });
  await p2.check('input[name=notation][value=paper]');
  // Another head: its matrices on demand (the summary path), drawn on the canvas too.
  const L2 = model.n_layer - 1, H2 = model.n_head - 2;
  await p2.click(`#grid .tile[data-layer="${L2}"][data-head="${H2}"]`);
  await p2.waitForFunction((want) => document.body.dataset.head === want, `${L2}/${H2}`);
  assert.equal(requests.length, sent + 1, 'one request: the head\'s matrices');
  assert.equal(await p2.$$eval('#heatmap canvas.heatmap-canvas', (els) => els.length), 1);
  assert.equal(await p2.getAttribute('#qkv', 'data-head'), String(H2));
  // The page stays small: no DOM cell per number anywhere.
  assert.ok(await p2.evaluate(() => document.querySelectorAll('*').length) < 5000);
  assert.deepEqual(errors, []);
  await p2.close();
});

// GPT-2's context: a tiny model with 1024 positions (tests/model/tiny_gpt2.py "long_context"),
// its own server. The page at its defaults (canvas above 64 tokens; the summary first when the
// full answer is too big), a 1024-token prompt: it renders, the heatmap is one 1024 × 1024
// canvas whose sampled cells are the API's weights, the Q/K/V strips are canvases, and the page
// stays small. The time from the click to the render goes to the artifacts (1024-tokens.json).
test('a 1024-token prompt on a 1024-position model renders on canvases without freezing', async () => {
  const dir = path.join(path.dirname(env('JOMOIM_TEST_MODEL')), 'long_context');
  const { server: srv, base: base2 } = await startServer(dir, ['--max-prompt-bytes', '100000']);
  try {
    const post = async (route, body) => {
      const res = await fetch(base2 + route, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      const json = await res.json();
      assert.equal(res.status, 200, JSON.stringify(json));
      return json;
    };
    // 1024 tokens: the longest prefix of a repeated sentence that encodes to 1024 (binary search).
    const unit = 'Cash or credit card? I have a lot of the other thing, and then the rest. ';
    const text = unit.repeat(60);
    const count = async (n) => (await post('/api/tokenize', { prompt: text.slice(0, n) })).count;
    let lo = 0, hi = text.length;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (await count(mid) <= 1024) lo = mid; else hi = mid - 1;
    }
    const prompt = text.slice(0, lo);
    assert.equal(await count(lo), 1024);
    const p2 = await browser.newPage();
    const errors = [];
    p2.on('pageerror', (e) => errors.push(e.message));
    await p2.goto(base2 + '/');
    await p2.waitForFunction(() => document.body.dataset.ready && document.body.dataset.ready === document.body.dataset.pending);
    const before = await p2.evaluate(() => document.body.dataset.ready);
    await p2.fill('#prompt', prompt);
    const t0 = Date.now();
    await p2.click('#run');
    await p2.waitForFunction((b) => document.body.dataset.ready !== b && document.body.dataset.ready === document.body.dataset.pending,
      before, { timeout: 120000 });
    const ms = Date.now() - t0;
    assert.equal(await p2.$eval('#error', (e) => (e.hidden ? '' : e.textContent)), '');
    assert.equal(await p2.$$eval('#tokens .token', (els) => els.length), 1024);
    // Responsive: a frame comes within a second of the render.
    const f0 = Date.now();
    await p2.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
    const frame = Date.now() - f0;
    assert.ok(frame < 1000, `next frame after ${frame} ms`);
    const L = Number(await p2.getAttribute('#grid .tile.selected', 'data-layer'));
    const H = Number(await p2.getAttribute('#grid .tile.selected', 'data-head'));
    const hd = (await post('/api/explain', { prompt, layer: L, head: H, top: 10 })).layers[0].heads[0];
    assert.equal(await p2.$$eval('#heatmap td', (els) => els.length), 0);
    // Sampled cells (every diagonal, the last row, 2000 pseudo-random pairs) read back from the canvas.
    const picks = [];
    for (let i = 0; i < 1024; ++i) picks.push([i, i], [1023, i]);
    let s = 12345;
    for (let n = 0; n < 2000; ++n) {
      s = (s * 1103515245 + 12345) % 2147483648;
      const r = s % 1024;
      s = (s * 1103515245 + 12345) % 2147483648;
      picks.push([r, s % 1024]);
    }
    const got = await p2.$eval('#heatmap canvas.heatmap-canvas', (c, picks) => {
      const px = Number(c.dataset.px), py = Number(c.dataset.py);
      const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      return { rows: Number(c.dataset.rows), cols: Number(c.dataset.cols), cells: picks.map(([r, k]) => {
        const o = 4 * ((r * py + (py >> 1)) * c.width + k * px + (px >> 1));
        return [data[o], data[o + 1], data[o + 2]].join(',');
      }) };
    }, picks);
    assert.deepEqual([got.rows, got.cols], [1024, 1024]);
    picks.forEach(([q, k], n) => {
      if (!hd.mask[q][k]) assert.ok(MASKED.includes(got.cells[n]), `masked at ${q},${k}: ${got.cells[n]}`);
      else assert.equal(got.cells[n], weightRGB(hd.weights[q][k]).join(','), `weight at ${q},${k}`);
    });
    assert.equal(await p2.getAttribute('#qkv', 'data-path'), 'canvas');
    assert.ok(await p2.evaluate(() => document.querySelectorAll('*').length) < 20000, 'the page stays small');
    await p2.screenshot({ path: path.join(artifacts, '21-1024-tokens.png') });
    await p2.locator('#head-view').screenshot({ path: path.join(artifacts, '22-1024-tokens-head.png') });
    fs.writeFileSync(path.join(artifacts, '1024-tokens.json'), JSON.stringify({ tokens: 1024, click_to_render_ms: ms, next_frame_ms: frame }) + '\n');
    assert.deepEqual(errors, []);
    await p2.close();
  } finally {
    srv.kill('SIGINT');
  }
});
