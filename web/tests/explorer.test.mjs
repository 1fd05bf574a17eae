// Browser tests of the explorer page: start `jomoim serve` on a free port with a test model,
// drive Debian's chromium through playwright-core, and check that what the page shows equals
// the API's explain JSON for the same request. Screenshots go to JOMOIM_WEB_ARTIFACTS.
//
//   JOMOIM_EXE=build/release/jomoim JOMOIM_TEST_MODEL=.../tiny_gpt2/f32 JOMOIM_WEB_ASSETS=web \
//   JOMOIM_WEB_NODE_MODULES=.../node_modules JOMOIM_WEB_ARTIFACTS=build/release/web-artifacts \
//   node --test web/tests/explorer.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
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
  });
  page = browser.pages()[0] || await browser.newPage();
  const failures = [];
  page.on('pageerror', (e) => failures.push(e.message));
  page.on('requestfailed', (r) => failures.push(`${r.url()} failed`));
  page.on('request', (r) => { if (!r.url().startsWith(base)) failures.push(`request outside the server: ${r.url()}`); });
  page.failures = failures;
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

test('the notation toggle shows the same numbers transposed, with the 3Blue1Brown formula', async () => {
  const L = model.n_layer - 1, H = model.n_head - 1;
  const paper = (await api('/api/explain', plain())).layers[L].heads[H];
  const col = await api('/api/explain', plain({ notation: '3b1b' }));
  await settled(() => page.check('input[name=notation][value="3b1b"]'));
  assert.equal(await page.getAttribute('#heatmap table', 'data-transposed'), 'true');
  assert.equal(await page.textContent('#formula'), col.formula);
  assert.notEqual(col.formula, (await api('/api/explain', plain())).formula);
  const want = col.layers[L].heads[H].weights;
  for (const { r, c, v } of await cells()) {
    assert.equal(v, want[r][c] === null ? 'null' : String(want[r][c]));
    assert.equal(want[r][c], paper.weights[c][r], 'transposed');
  }
  await page.hover('#heatmap td[data-row="1"][data-col="3"]');  // key 1, query 3
  assert.ok((await page.textContent('#readout')).includes(`Q₃·K₁ = ${fmt(paper.scores[3][1])}`));
  await shot('03-notation-3b1b');
  await settled(() => page.check('input[name=notation][value=paper]'));
  assert.equal(await page.getAttribute('#heatmap table', 'data-transposed'), 'false');
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
