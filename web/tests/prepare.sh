#!/usr/bin/env bash
# Installs the browser tests' npm dependency (playwright-core, no browser download) into DEST,
# a folder of the build tree, from package.json + package-lock.json (npm ci --prefer-offline;
# skipped when DEST already holds the locked version, so reruns work offline). The browser is
# Debian's chromium (scripts/setup.sh). CTest runs this as the fixture web_deps_setup.
#   bash web/tests/prepare.sh DEST
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:?usage: prepare.sh DEST}"
mkdir -p "$dest"
command -v node >/dev/null || { echo "prepare.sh: node is not installed (scripts/setup.sh installs nodejs)" >&2; exit 1; }
[[ -x /usr/bin/chromium ]] || { echo "prepare.sh: /usr/bin/chromium is missing (scripts/setup.sh installs chromium)" >&2; exit 1; }
if cmp -s "$here/package-lock.json" "$dest/package-lock.json" && [[ -f "$dest/node_modules/playwright-core/package.json" ]]; then
  echo "prepare.sh: playwright-core already installed in $dest"
  exit 0
fi
command -v npm >/dev/null || { echo "prepare.sh: npm is not installed (scripts/setup.sh installs npm)" >&2; exit 1; }
cp "$here/package.json" "$here/package-lock.json" "$dest/"
# PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: playwright-core downloads nothing, but say so anyway.
(cd "$dest" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --prefer-offline --loglevel=error)
