#!/usr/bin/env bash
# Times ring attention (jomoim::dist) for P = 1, 2, 4 processes on this machine and prints one
# line per run (bench/ring_bench.cpp explains the fields), with `uptime` before and after.
#   bench/ring-bench.sh [BUILD_DIR] [N ...]      default: build-ring, N = 32768
# The threads per rank are cores / P (at least 1): P above the core count is oversubscribed.
# Processes are not bound to cores (--bind-to none), so each rank's OpenMP threads can spread.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-ring}
shift || true
sizes=("${@:-32768}")
if [[ ! -x "$build/ring_bench" ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DJOMOIM_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build" --target ring_bench
fi
flags=(--oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
cores=$(nproc)
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(git rev-parse --short HEAD) cores=$cores"
echo "# uptime: $(uptime)"
for n in "${sizes[@]}"; do
  for causal in "" --causal; do
    for p in 1 2 4; do
      t=$(( cores / p )); (( t < 1 )) && t=1
      OMP_WAIT_POLICY=passive mpirun "${flags[@]}" -np "$p" "$build/ring_bench" --n "$n" --heads 8 --dim 64 \
        --threads "$t" $causal
    done
  done
done
echo "# uptime: $(uptime)"
