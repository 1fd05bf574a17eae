#!/usr/bin/env bash
# Reproduces models/default: the everyday-English corpus (scripts/make-corpus.sh: pinned npm and
# Debian packages, checksummed), then `jomoim train` with the configuration recorded in
# models/default/README.md, then the model card's measurements (scripts/model_card.py).
#
#   scripts/train-default-model.sh            train (or continue an interrupted run)
#
# The run lives in build/default-model/ (Ctrl-C saves and stops; rerun to continue);
# when it finishes, its model files are copied into models/default/. About 85-95 minutes on
# this project's 2-core machines (bf16 products where the CPU has AVX512_BF16).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
bash scripts/make-corpus.sh

# A start, then two phases of one run (one cosine schedule over 12,000 steps). The start: the
# trainer's initialisation (written after one step, --stop-at 1; the position embedding starts as
# sines and cosines spread evenly up to pi, --wpe-init fourier), then layer 0's head 2 is fitted to
# point at the previous token (scripts/seed_previous_token_head.py: its W_Q and W_K only; training
# updates it like every other weight from there). Then steps 1-1,000 on the corpus as it is
# (--init-from that start, --stop-at 1000), and, resumed from that checkpoint, steps
# 1,001-12,000 on its "echo" version (scripts/corpus/echo.py: every third passage said twice),
# where in-context copying pays off (induction heads; see models/default/README.md).
COMMON=(build/release/jomoim train --val-data data/corpus/out/heldout.txt --documents eot
  --vocab-size 8192 --layers 4 --heads 8 --embd 256 --context 256
  --batch 16 --seq 256 --steps 12000 --lr 1e-3 --min-lr 1e-4 --warmup 200
  --weight-decay 0.1 --clip 1.0 --eval-every 500 --eval-batches 16
  --save-every 500 --seed 1 --threads 2)
TRAIN=("${COMMON[@]}" --out build/default-model)
/usr/bin/python3 scripts/corpus/echo.py data/corpus/out/train.txt data/corpus/out/train-echo.txt
step_of() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' build/default-model/trainer.json 2>/dev/null || echo 0; }
from=(--resume)
if [ ! -f build/default-model/trainer.json ]; then
  echo "== the start: initialisation, and layer 0 head 2 seeded as a previous-token head"
  rm -rf build/default-model-init build/default-model-seeded
  "${COMMON[@]}" --out build/default-model-init --wpe-init fourier --data data/corpus/out/train.txt --stop-at 1 "$@"
  PYTHONPATH=build/release/python /usr/bin/python3 scripts/seed_previous_token_head.py \
    build/default-model-init build/default-model-seeded --head 2
  from=(--init-from build/default-model-seeded)
fi
if [ "$(step_of)" -lt 1000 ]; then
  echo "== training, phase 1 (to step 1000): data/corpus/out/train.txt"
  "${TRAIN[@]}" --data data/corpus/out/train.txt --stop-at 1000 "${from[@]}" "$@"
fi
echo "== training, phase 2 (to step 12000): data/corpus/out/train-echo.txt"
"${TRAIN[@]}" --data data/corpus/out/train-echo.txt --resume "$@"

mkdir -p models/default
cp build/default-model/{config.json,model.safetensors,vocab.json,merges.txt,trainer.json} models/default/
echo "== models/default updated"
PYTHONPATH=build/release/python /usr/bin/python3 scripts/model_card.py models/default --json build/default-model/card.json
