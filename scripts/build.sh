#!/usr/bin/env bash
# Configures and builds one CMake preset (default: release) with both cores; further arguments
# go to the configure step (e.g. -DJOMOIM_TEST_SHARDS=4).
#   scripts/build.sh [release|asan|fuzz] [-DNAME=VALUE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
cmake --preset "$preset" "${@:2}" >/dev/null
cmake --build --preset "$preset"
