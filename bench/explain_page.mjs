// The explorer page at ~1024 tokens on a GPT-2-small-sized model: time to first render and the
// server's peak memory.
//
//   /usr/bin/python3 bench/explain_memory.py          # writes the checkpoint once (/tmp/jomoim-explain-small)
//   JOMOIM_WEB_NODE_MODULES=build/release/tests/web-tests/node_modules node bench/explain_page.mjs \
//     [--jomoim build/release/jomoim] [--model /tmp/jomoim-explain-small] [--chars 4100] [--passes 3]
//
// Each pass starts a fresh `jomoim serve --threads 2` and a fresh headless Chromium page, types
// the prompt (the first --chars characters of data/corpus/out/heldout.txt, else README.md) and
// clicks Explain. "first render" is from the click until the page has drawn the answer
// (body[data-ready], set after render()); the page first asks for the summary
// (matrices: false) and then the selected head in full, as it does for any long prompt. The
// server's peak resident memory (VmHWM) is read after the render. Prints the medians and every
// pass as one Markdown table.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const exe = arg('jomoim', path.join(root, 'build/release/jomoim'));
const modelDir = arg('model', '/tmp/jomoim-explain-small');
const chars = Number(arg('chars', '4100'));
const passes = Number(arg('passes', '3'));
const modules = process.env.JOMOIM_WEB_NODE_MODULES || path.join(root, 'build/release/tests/web-tests/node_modules');
const require = createRequire(path.join(path.resolve(modules), 'noop.js'));
const { chromium } = require('playwright-core');

const src = fs.existsSync(path.join(root, 'data/corpus/out/heldout.txt'))
  ? path.join(root, 'data/corpus/out/heldout.txt') : path.join(root, 'README.md');
const prompt = fs.readFileSync(src, 'utf8').slice(0, chars);

function vmHWM(pid) {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmHWM:\s+(\d+) kB/);
  return Number(m[1]) / 1024;
}

async function startServer() {
  const server = spawn(exe, ['serve', '--model', modelDir, '--port', '0', '--threads', '2', '--max-prompt-bytes', '100000',
    '--assets', path.join(root, 'web')], { stdio: ['ignore', 'pipe', 'inherit'] });
  const base = await new Promise((resolve, reject) => {
    let out = '';
    server.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/http:\/\/127\.0\.0\.1:\d+\//);
      if (m) resolve(m[0].replace(/\/$/, ''));
    });
    server.on('exit', (code) => reject(new Error(`jomoim serve exited with ${code}: ${out}`)));
  });
  return { server, base };
}

const rows = [];
for (let p = 0; p < passes; ++p) {
  const { server, base } = await startServer();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'jomoim-bench-chromium-'));
  const browser = await chromium.launchPersistentContext(dir, {
    executablePath: process.env.JOMOIM_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-sync'], viewport: { width: 1280, height: 900 },
  });
  try {
    const page = browser.pages()[0] || await browser.newPage();
    await page.goto(base + '/');
    await page.waitForFunction(() => document.body.dataset.ready);
    await page.fill('#prompt', prompt);
    const before = await page.evaluate(() => document.body.dataset.ready);
    const t0 = Date.now();
    await page.click('#run');
    await page.waitForFunction((b) => {
      const d = document.body.dataset;
      return d.ready && d.ready === d.pending && d.ready !== b;
    }, before, { timeout: 600000 });
    const ms = Date.now() - t0;
    const tokens = await page.$$eval('#tokens .token', (els) => els.length);
    const error = await page.evaluate(() => (document.querySelector('#error').hidden ? '' : document.querySelector('#error').textContent));
    if (error) throw new Error(`the page shows an error: ${error}`);
    // Responsive after the render: a trivial evaluation round trip.
    const t1 = Date.now();
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
    rows.push({ ms, frame: Date.now() - t1, tokens, rss: vmHWM(server.pid) });
  } finally {
    await browser.close();
    server.kill('SIGINT');
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const cpu = (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/model name\s*:\s*(.*)/) || [])[1];
console.log(`GPT-2-small shape (random), jomoim serve --threads 2, headless Chromium, ${cpu}, ${new Date().toISOString()}`);
console.log('| pass | tokens | click → first render | next frame | server peak RSS |');
console.log('|---|---|---|---|---|');
rows.forEach((r, i) => console.log(`| ${i + 1} | ${r.tokens} | ${(r.ms / 1000).toFixed(2)} s | ${r.frame} ms | ${(r.rss / 1024).toFixed(2)} GiB |`));
console.log(`| median | | ${(median(rows.map((r) => r.ms)) / 1000).toFixed(2)} s | ${median(rows.map((r) => r.frame))} ms | ` +
  `${(median(rows.map((r) => r.rss)) / 1024).toFixed(2)} GiB |`);
