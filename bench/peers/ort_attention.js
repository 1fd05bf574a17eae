'use strict';
// ort_attention.js — the ONNX Runtime peer of bench/run-benchmarks.sh: times one attention
// forward pass of onnxruntime-node (CPU execution provider) and prints one JSON line.
//
//   node bench/peers/ort_attention.js --variant mha --b 1 --hq 12 --hkv 12 --nq 512 --nk 512 \
//        --d 64 --causal 0 --threads 2 [--warmup 2 --reps 5 --min-time 1]
//
// The model is one node, written in memory (onnx_writer.js). Variants, because ONNX Runtime has
// several CPU attention kernels and none is fastest everywhere:
//   mha          com.microsoft.MultiHeadAttention; q, k, v packed as [B, N, H*D]; causal through
//                unidirectional = 1. Uses ORT's CPU flash-attention path where it applies.
//   mha-noflash  the same with ORT_DISABLE_FLASH_ATTENTION=1 (ORT's unfused path).
//   mha-bnsh-kv  MultiHeadAttention with k and v given as [B, H, N, D], the KV-cache layout.
//   attn23       the standard ONNX Attention operator (opset 23), 4-D [B, H, N, D]; is_causal = 1;
//                the only one that takes fewer key/value heads than query heads.
// Method (the same in torch_attention.py and `jomoim bench`): uniform [-1, 1) inputs; the first
// call's output is checked on a few rows against a float64 reference (status "wrong" beyond
// float32's worst-case rounding bound); then --warmup calls; then at least --reps calls and
// --min-time seconds; the median is reported.

const { checkRows, parseArgs, randomInputs, timeCalls } = require('./common');

const VARIANTS = ['mha', 'mha-noflash', 'mha-bnsh-kv', 'attn23'];

// [B, H, N, D] <-> [B, N, H*D] (the packed layout of MultiHeadAttention).
function packBNHD(x, B, H, N, D) {
  const y = new Float32Array(x.length);
  for (let b = 0; b < B; b++)
    for (let h = 0; h < H; h++)
      for (let n = 0; n < N; n++) {
        const from = ((b * H + h) * N + n) * D;
        y.set(x.subarray(from, from + D), ((b * N + n) * H + h) * D);
      }
  return y;
}
function unpackBNHD(y, B, H, N, D) {
  const x = new Float32Array(y.length);
  for (let b = 0; b < B; b++)
    for (let h = 0; h < H; h++)
      for (let n = 0; n < N; n++) {
        const from = ((b * N + n) * H + h) * D;
        x.set(y.subarray(from, from + D), ((b * H + h) * N + n) * D);
      }
  return x;
}

// The model of a variant, with the layouts its inputs and output use ('bhnd' or 'bnhd').
function buildModel(a) {
  const { oneNodeModel } = require('./onnx_writer');
  const { b, hq, hkv, nq, nk, d } = a;
  if (a.variant === 'attn23') {
    return {
      qLayout: 'bhnd',
      kvLayout: 'bhnd',
      // IR version 11 is the one that introduced opset 23.
      bytes: oneNodeModel({
        op: { type: 'Attention', attributes: a.causal ? { is_causal: 1 } : {} },
        inputs: { Q: [b, hq, nq, d], K: [b, hkv, nk, d], V: [b, hkv, nk, d] },
        outputs: { Y: [b, hq, nq, d] },
        opsets: { '': 23 },
        irVersion: 11,
      }),
    };
  }
  if (hkv !== hq) return { skip: 'MultiHeadAttention has no grouped-query form (Hkv must equal Hq)' };
  const kvLayout = a.variant === 'mha-bnsh-kv' ? 'bhnd' : 'bnhd';
  const kvDims = kvLayout === 'bhnd' ? [b, hkv, nk, d] : [b, nk, hkv * d];
  const attributes = { num_heads: hq };
  if (a.causal) attributes.unidirectional = 1;
  return {
    qLayout: 'bnhd',
    kvLayout,
    bytes: oneNodeModel({
      op: { type: 'MultiHeadAttention', domain: 'com.microsoft', attributes },
      inputs: { Q: [b, nq, hq * d], K: kvDims, V: kvDims },
      outputs: { Y: [b, nq, hq * d] },
      opsets: { '': 17, 'com.microsoft': 1 },
      irVersion: 8,
    }),
  };
}

async function main() {
  const a = parseArgs(process.argv.slice(2), { variant: 'mha' });
  const result = { impl: 'onnxruntime', variant: a.variant, b: a.b, hq: a.hq, hkv: a.hkv, nq: a.nq, nk: a.nk,
    d: a.d, dv: a.d, causal: Boolean(a.causal), threads: a.threads };
  const print = () => console.log(JSON.stringify(result));
  if (!VARIANTS.includes(a.variant)) throw new Error(`--variant: expected one of ${VARIANTS.join(', ')}`);
  // Read by ORT when it creates the kernel, so it must be set before the session exists.
  if (a.variant === 'mha-noflash') process.env.ORT_DISABLE_FLASH_ATTENTION = '1';

  const ort = require('onnxruntime-node');
  result.version = require('onnxruntime-node/package.json').version;
  const model = buildModel(a);
  if (model.skip) {
    Object.assign(result, { status: 'skipped', error: model.skip });
    return print();
  }
  let session;
  try {
    session = await ort.InferenceSession.create(model.bytes, {
      executionProviders: ['cpu'],
      intraOpNumThreads: a.threads, // counts the calling thread
      interOpNumThreads: 1,
      executionMode: 'sequential',
      graphOptimizationLevel: 'all',
    });
  } catch (e) {
    Object.assign(result, { status: 'error', error: String(e.message || e).split('\n')[0].slice(0, 400) });
    return print();
  }

  const { q, k, v } = randomInputs(a, 42);
  const dims = (layout, h, n) => (layout === 'bhnd' ? [a.b, h, n, a.d] : [a.b, n, h * a.d]);
  const inLayout = (layout, x, h, n) => (layout === 'bhnd' ? x : packBNHD(x, a.b, h, n, a.d));
  const feeds = {
    Q: new ort.Tensor('float32', inLayout(model.qLayout, q, a.hq, a.nq), dims(model.qLayout, a.hq, a.nq)),
    K: new ort.Tensor('float32', inLayout(model.kvLayout, k, a.hkv, a.nk), dims(model.kvLayout, a.hkv, a.nk)),
    V: new ort.Tensor('float32', inLayout(model.kvLayout, v, a.hkv, a.nk), dims(model.kvLayout, a.hkv, a.nk)),
  };
  result.rss_inputs_mib = process.memoryUsage().rss / 2 ** 20;

  let y;
  try {
    y = (await session.run(feeds)).Y.data;
  } catch (e) {
    Object.assign(result, { status: 'error', error: String(e.message || e).split('\n')[0].slice(0, 400) });
    return print();
  }
  const out = model.qLayout === 'bhnd' ? y : unpackBNHD(y, a.b, a.hq, a.nq, a.d);
  Object.assign(result, checkRows(a, q, k, v, out));
  if (result.status !== 'ok') return print();

  Object.assign(result, await timeCalls(() => session.run(feeds), a));
  result.peak_rss_mib = process.resourceUsage().maxRSS / 1024;
  result.extra_mib = Math.max(0, result.peak_rss_mib - result.rss_inputs_mib);
  print();
}

main().catch((e) => {
  console.log(JSON.stringify({ impl: 'onnxruntime', status: 'error', error: String(e.message || e).slice(0, 400) }));
  process.exitCode = 1;
});
