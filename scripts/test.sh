#!/usr/bin/env bash
# Sets up, builds and runs every test: the release build first, then the same tests under
# AddressSanitizer + UndefinedBehaviorSanitizer, then the fuzz targets over their seed corpus.
#   scripts/test.sh            everything
#   scripts/test.sh --fast     release build only
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
start=$(date +%s)

echo "== release build and tests"
bash scripts/build.sh release
ctest --preset release

if [[ "${1:-}" != "--fast" ]]; then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer build and tests"
  bash scripts/build.sh asan
  ctest --preset asan
  if [[ -f fuzz/CMakeLists.txt ]] && command -v clang++ >/dev/null 2>&1; then
    echo "== fuzz targets over their seed corpus"
    bash scripts/build.sh fuzz
    ctest --test-dir build/fuzz --output-on-failure
  fi
fi
echo "== all tests passed in $(( $(date +%s) - start )) s"
