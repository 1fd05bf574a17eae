#!/usr/bin/env bash
# Sets up, builds and runs every test: the release build first, then the same tests under
# AddressSanitizer + UndefinedBehaviorSanitizer (less the source checks, label layout, which a
# sanitizer does not change), then the fuzz targets over their seed corpus. Each phase prints
# its seconds (README, "Developing": how the presets differ).
#   scripts/test.sh            everything
#   scripts/test.sh --fast     release build only
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
start=$(date +%s)
phase=$start
lap() { echo "== $1: $(( $(date +%s) - phase )) s"; phase=$(date +%s); }

echo "== release build and tests"
# 4 shards per test program, as the asan preset does: one CTest entry per case (the preset's
# default, for `ctest -R CASE`) spends about 200 of the phase's 570 test-seconds starting
# processes and setting each up again.
bash scripts/build.sh release -DJOMOIM_TEST_SHARDS=4
lap "release build"
ctest --preset release
lap "release tests"

if [[ "${1:-}" != "--fast" ]]; then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer build and tests"
  bash scripts/build.sh asan
  lap "ASan build"
  ctest --preset asan
  lap "ASan tests"
  if [[ -f fuzz/CMakeLists.txt ]] && command -v clang++ >/dev/null 2>&1; then
    echo "== fuzz targets over their seed corpus"
    bash scripts/build.sh fuzz
    ctest --test-dir build/fuzz --output-on-failure
    lap "fuzz build and seed replay"
  fi
fi
echo "== all tests passed in $(( $(date +%s) - start )) s"
