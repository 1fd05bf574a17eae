"""torch_attention.py — the PyTorch peer of bench/run-benchmarks.sh: times one attention
forward pass of Debian's PyTorch 1.13 and prints one JSON line.

    /usr/bin/python3 bench/peers/torch_attention.py --variant naive --b 1 --hq 12 --hkv 12 \
        --nq 512 --nk 512 --d 64 --causal 0 --threads 2 [--warmup 2 --reps 5 --min-time 1]

Run it with /usr/bin/python3 (Debian's python3-torch serves that interpreter only), and with the
environment run-benchmarks.sh sets: OMP_WAIT_POLICY=passive and OPENBLAS_NUM_THREADS equal to
--threads (otherwise OpenMP and OpenBLAS threads spin against each other on a small machine),
jemalloc preloaded so the large score matrices are not returned to the kernel after each call.

Variants:
  naive  matmul(q, k^T) * scale, masked_fill(-inf) above the causal diagonal, softmax,
         matmul(p, v): what most model code wrote before fused kernels.
  sdpa   torch.nn.functional._scaled_dot_product_attention (private in 1.13; the public
         scaled_dot_product_attention arrived in 2.0), is_causal for the mask.
Grouped-query shapes (Hkv < Hq): the query heads of a group are stacked as rows of one matmul
(q viewed as [B, Hkv, Hq/Hkv * Nq, D]) without copying K or V; for causal shapes K and V are
repeated instead, since the mask then depends on the row. The method (inputs, float64 spot
check, warm-up, repetitions, median) is the one of peers/common.js and `jomoim bench`.
"""
import argparse
import json
import math
import resource
import sys
import time


def parse_args():
    ap = argparse.ArgumentParser(description="time one PyTorch attention forward pass")
    ap.add_argument("--variant", choices=["naive", "sdpa"], default="naive")
    for name, default in (("b", 1), ("hq", 12), ("hkv", 0), ("nq", 512), ("nk", 0), ("d", 64),
                          ("causal", 0), ("threads", 2), ("warmup", 2), ("reps", 5)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--min-time", type=float, default=1.0)
    a = ap.parse_args()
    a.hkv = a.hkv or a.hq
    a.nk = a.nk or a.nq
    a.causal = bool(a.causal)
    return a


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def tolerance(a):
    """float32's worst-case rounding on inputs in [-1, 1), as `jomoim bench` derives it."""
    return 2.0**-23 * (2 * a.d * math.sqrt(a.d) + 2 * a.nk + 16)


def make_call(torch, a, q, k, v):
    import torch.nn.functional as F

    scale = 1.0 / math.sqrt(a.d)
    group = a.hq // a.hkv
    # True above the bottom-right-aligned diagonal: query i sees key j iff j <= i + (Nk - Nq).
    mask = torch.ones(a.nq, a.nk, dtype=torch.bool).triu(1 + a.nk - a.nq) if a.causal else None
    if group > 1 and a.causal:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        group = 1

    if a.variant == "naive":
        def call():
            qq = q.reshape(a.b, a.hkv, group * a.nq, a.d) if group > 1 else q
            s = torch.matmul(qq, k.transpose(-2, -1)) * scale
            if mask is not None:
                s.masked_fill_(mask, float("-inf"))
            return torch.matmul(torch.softmax(s, dim=-1), v).reshape(a.b, a.hq, a.nq, a.d)
        return call

    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is None:
        private = F._scaled_dot_product_attention  # 1.13: (q, k, v, mask, dropout, need_weights, causal)

        def sdpa(q_, k_, v_, is_causal):
            return private(q_, k_, v_, None, 0.0, False, is_causal)[0]

    def call():
        qq = q.reshape(a.b, a.hkv, group * a.nq, a.d) if group > 1 else q
        return sdpa(qq, k, v, is_causal=a.causal).reshape(a.b, a.hq, a.nq, a.d)
    return call


def check_rows(torch, a, q, k, v, out):
    """Rows (b, h, i), b in {0, B-1}, h in {0, Hq-1}, i in {0, Nq/2, Nq-1}, in float64."""
    err, where = 0.0, ""
    rows = sorted({0, a.nq // 2, a.nq - 1})
    for b in sorted({0, a.b - 1}):
        for h in sorted({0, a.hq - 1}):
            hk = h // (a.hq // a.hkv)
            s = q[b, h, rows].double() @ k[b, hk].double().T / math.sqrt(a.d)
            if a.causal:
                for r, i in enumerate(rows):
                    s[r, max(0, i + a.nk - a.nq + 1):] = float("-inf")
            expected = torch.nan_to_num(torch.softmax(s, -1)) @ v[b, hk].double()
            diff = (out[b, h, rows].double() - expected).abs().nan_to_num(nan=math.inf)
            if diff.max().item() > err:
                err = diff.max().item()
                where = f"out[{b}, {h}, row {rows[int(diff.max(1).values.argmax())]}]"
    return err, where


def main():
    a = parse_args()
    import torch

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    res = {"impl": "torch", "variant": a.variant, "b": a.b, "hq": a.hq, "hkv": a.hkv, "nq": a.nq, "nk": a.nk,
           "d": a.d, "dv": a.d, "causal": a.causal, "threads": a.threads, "version": torch.__version__}
    g = torch.Generator().manual_seed(42)
    q = torch.rand(a.b, a.hq, a.nq, a.d, generator=g) * 2 - 1
    k = torch.rand(a.b, a.hkv, a.nk, a.d, generator=g) * 2 - 1
    v = torch.rand(a.b, a.hkv, a.nk, a.d, generator=g) * 2 - 1
    res["rss_inputs_mib"] = rss_mib()

    with torch.inference_mode():
        try:
            call = make_call(torch, a, q, k, v)
            out = call()
        except Exception as e:  # noqa: BLE001 - any failure is a result row, not a crash
            res.update(status="error", error=str(e).splitlines()[0][:400])
            print(json.dumps(res))
            return
        err, where = check_rows(torch, a, q, k, v, out)
        del out
        tol = tolerance(a)
        res.update(status="ok" if err <= tol else "wrong", max_err=err, tol=tol)
        if res["status"] != "ok":
            res["error"] = where
            print(json.dumps(res))
            return
        for _ in range(a.warmup):
            call()
        times = []
        start = time.perf_counter()
        while len(times) < 10000 and (len(times) < a.reps or time.perf_counter() - start < a.min_time):
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    median = times[len(times) // 2]
    flops = 2.0 * a.b * a.hq * a.nq * a.nk * (a.d + a.d) / (2 if a.causal else 1)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    res.update(median_ms=median, min_ms=times[0], mean_ms=sum(times) / len(times), reps=len(times),
               warmup=a.warmup, gflops=flops / (median * 1e6), peak_rss_mib=peak,
               extra_mib=max(0.0, peak - res["rss_inputs_mib"]))
    print(json.dumps(res))


if __name__ == "__main__":
    sys.exit(main())
