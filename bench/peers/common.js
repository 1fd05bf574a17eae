'use strict';
// common.js — what the JavaScript peer shares with the other measured programs: argument
// parsing, the random inputs, the float64 spot check and the timing loop. The Python peer
// (torch_attention.py) and `jomoim bench` implement the same method; keep them in step.

const DEFAULTS = { b: 1, hq: 12, hkv: 0, nq: 512, nk: 0, d: 64, causal: 0, threads: 2, warmup: 2, reps: 5,
  'min-time': 1 };

// "--name value" pairs; every name must be known, every value but --variant a number.
function parseArgs(argv, extra = {}) {
  const a = { ...DEFAULTS, ...extra };
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, '');
    const value = argv[i + 1];
    if (!(name in a) || value === undefined)
      throw new Error(`bad argument ${argv[i]} (known: ${Object.keys(a).join(', ')})`);
    a[name] = typeof a[name] === 'string' ? value : Number(value);
    if (Number.isNaN(a[name])) throw new Error(`--${name}: expected a number, got ${value}`);
  }
  a.hkv = a.hkv || a.hq;
  a.nk = a.nk || a.nq;
  a.causal = a.causal ? 1 : 0;
  a.minTime = a['min-time'];
  return a;
}

// Uniform [-1, 1) float32 inputs in [B, H, N, D] layout from a small seeded generator
// (xorshift32: reproducible, and fast enough for the 64 MiB tensors of the largest shape).
function randomInputs(a, seed) {
  let s = seed >>> 0 || 1;
  const fill = (n) => {
    const x = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      s ^= s << 13;
      s ^= s >>> 17;
      s ^= s << 5;
      x[i] = (s >>> 0) / 2147483648 - 1;
    }
    return x;
  };
  return { q: fill(a.b * a.hq * a.nq * a.d), k: fill(a.b * a.hkv * a.nk * a.d), v: fill(a.b * a.hkv * a.nk * a.d) };
}

// float32's worst-case rounding of attention on inputs in [-1, 1), as `jomoim bench` derives it:
// eps * (2*D*S + 2*Nk + 16) with |score| <= S = D / sqrt(D).
function tolerance(a) {
  const eps = 2 ** -23;
  return eps * (2 * a.d * Math.sqrt(a.d) + 2 * a.nk + 16);
}

// Checks rows (b, h, i) for b in {0, B-1}, h in {0, Hq-1}, i in {0, Nq/2, Nq-1} of `out`
// ([B, Hq, Nq, D]) against float64 arithmetic. Causal masking is aligned bottom-right: query i
// sees key j iff j <= i + (Nk - Nq).
function checkRows(a, q, k, v, out) {
  const { b: B, hq: Hq, hkv: Hkv, nq: Nq, nk: Nk, d: D } = a;
  const scale = 1 / Math.sqrt(D);
  const uniq = (xs) => [...new Set(xs)];
  let maxErr = 0;
  let where = '';
  for (const b of uniq([0, B - 1]))
    for (const h of uniq([0, Hq - 1]))
      for (const i of uniq([0, Nq >> 1, Nq - 1])) {
        const hk = Math.floor(h / (Hq / Hkv));
        const visible = a.causal ? Math.max(0, Math.min(Nk, i + Nk - Nq + 1)) : Nk;
        const qRow = ((b * Hq + h) * Nq + i) * D;
        const w = new Float64Array(visible);
        let max = -Infinity;
        for (let j = 0; j < visible; j++) {
          const kRow = ((b * Hkv + hk) * Nk + j) * D;
          let dot = 0;
          for (let e = 0; e < D; e++) dot += q[qRow + e] * k[kRow + e];
          w[j] = dot * scale;
          max = Math.max(max, w[j]);
        }
        let sum = 0;
        for (let j = 0; j < visible; j++) sum += (w[j] = Math.exp(w[j] - max));
        for (let e = 0; e < D; e++) {
          let acc = 0;
          for (let j = 0; j < visible; j++) acc += w[j] * v[((b * Hkv + hk) * Nk + j) * D + e];
          const expected = visible ? acc / sum : 0;
          const got = out[((b * Hq + h) * Nq + i) * D + e];
          const err = Number.isNaN(got) ? Infinity : Math.abs(got - expected);
          if (err > maxErr) {
            maxErr = err;
            where = `out[${b}, ${h}, ${i}, ${e}]: got ${got}, expected ${expected}`;
          }
        }
      }
  const tol = tolerance(a);
  const r = { status: maxErr <= tol ? 'ok' : 'wrong', max_err: maxErr, tol };
  if (r.status !== 'ok') r.error = where;
  return r;
}

const nowMs = () => Number(process.hrtime.bigint()) / 1e6;

// 2*B*Hq*Nq*Nk*(D+Dv), halved for causal: the convention of jomoim::attention_flops.
const flops = (a) => (2 * a.b * a.hq * a.nq * a.nk * (a.d + a.d)) / (a.causal ? 2 : 1);

// --warmup calls, then at least --reps calls and --min-time seconds (at most 10000 calls).
async function timeCalls(fn, a) {
  for (let i = 0; i < a.warmup; i++) await fn();
  const ms = [];
  const start = nowMs();
  while (ms.length < 10000 && (ms.length < a.reps || nowMs() - start < a.minTime * 1e3)) {
    const t0 = nowMs();
    await fn();
    ms.push(nowMs() - t0);
  }
  ms.sort((x, y) => x - y);
  const median = ms[ms.length >> 1];
  const mean = ms.reduce((x, y) => x + y, 0) / ms.length;
  return { median_ms: median, min_ms: ms[0], mean_ms: mean, reps: ms.length, warmup: a.warmup,
    gflops: flops(a) / (median * 1e6) };
}

module.exports = { parseArgs, randomInputs, checkRows, timeCalls, nowMs };
