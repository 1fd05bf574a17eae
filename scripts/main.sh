#!/usr/bin/env bash
# The main job: set up, build, and run the explorer on the default model with the seed's two
# prompts ("I have a lot" vs "Cash or credit card? I have a lot"). Extra arguments go to
# `jomoim explain` (e.g. --layer 0 --head 1, --notation 3b1b, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
exec build/release/jomoim explain "I have a lot" --compare "Cash or credit card? I have a lot" "$@"
