#!/usr/bin/env bash
# The main job: set up, build, and run the engine's self-check and a timing table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
exec build/release/jomoim bench --quick "$@"
