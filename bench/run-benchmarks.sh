#!/usr/bin/env bash
# run-benchmarks.sh — jomoim side by side with ONNX Runtime, PyTorch and the OpenBLAS sgemm
# ceiling on the shapes of BENCHMARKS.md, same machine, same threads, one interleaved run; then
# rewrites BENCHMARKS.md. Not part of the tests.
#
#   bash bench/run-benchmarks.sh                 3 passes over every shape (about 30 minutes on 2 cores)
#   bash bench/run-benchmarks.sh --quick         skips the (1,32,4096,128) shapes, 1 pass (about 5 minutes)
#   bash bench/run-benchmarks.sh --passes 5 --threads 2 --only '(1,12,512,64)'
#   bash bench/run-benchmarks.sh --target AVX2   jomoim and its ceilings pinned to AVX2 (peers as they are);
#                                                writes its own section of BENCHMARKS.md
#   bash bench/run-benchmarks.sh --report [FILE] only re-renders BENCHMARKS.md from bench/results/
#                                                (default: the latest run)
#
# Installs what is missing (idempotent): Debian packages through scripts/setup.sh --bench,
# onnxruntime-node through npm from bench/package-lock.json. Builds jomoim (Release) in
# build-bench/ with $JOBS parallel jobs (default: every core). The measuring and the report
# are bench/suite.py and bench/report.py; the peers are in bench/peers/.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
SYS_PY=/usr/bin/python3  # Debian's python3-torch is installed for this interpreter only

if [[ "${1:-}" == "--report" ]]; then
  exec "$SYS_PY" bench/report.py "${2:-bench/results/latest.jsonl}" --markdown BENCHMARKS.md
fi
# Refuse bad arguments before installing and building anything.
"$SYS_PY" bench/suite.py --jomoim /dev/null --check-args "$@"

log() { echo "[bench] $*" >&2; }

bash scripts/setup.sh --bench >&2

if [[ ! -f bench/node_modules/onnxruntime-node/package.json ]]; then
  log "installing onnxruntime-node (npm ci)"
  # Its post-install step would download GPU binaries; the CPU library ships in the package.
  (cd bench && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund --loglevel=error) >&2
fi

log "building jomoim (Release) in build-bench/"
cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DJOMOIM_BUILD_TESTS=OFF \
  -DJOMOIM_BUILD_BENCH=OFF >/dev/null
ninja -C build-bench -j "${JOBS:-$(nproc)}" jomoim_cli >&2

exec "$SYS_PY" bench/suite.py --jomoim build-bench/jomoim "$@"
