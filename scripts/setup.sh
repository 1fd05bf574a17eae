#!/usr/bin/env bash
# Installs exactly what jomoim needs to build and test, from Debian's archive. Idempotent:
# packages already present are skipped and apt is not touched. Works as root or via sudo.
#
#   scripts/setup.sh          build + test dependencies
#   scripts/setup.sh --bench  also what bench/run-benchmarks.sh needs for the peers
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config   # toolchain
  libhwy-dev                                     # Highway: SIMD with run-time dispatch
  libopenblas-dev                                # OpenBLAS: GEMM (matrix-vector products)
  libdnnl-dev                                    # oneDNN: the model's matrix products (fp32, bf16)
  ocl-icd-opencl-dev                             # oneDNN's CMake package looks for OpenCL (a Recommends of libdnnl-dev)
  libcli11-dev nlohmann-json3-dev                # command line, JSON
  libgtest-dev libgmock-dev libbenchmark-dev     # GoogleTest, Google Benchmark
  python3 python3-numpy                          # NumPy interop tests (Debian's /usr/bin/python3)
  clang libclang-rt-14-dev libomp-dev            # libFuzzer targets (clang + its OpenMP)
  clang-format                                   # the code format (.clang-format; test format_check)
  pybind11-dev python3-dev                       # the Python module (python/)
  python3-pytest python3-torch                   # its tests: pytest, PyTorch 1.13 as a second oracle
  python3-venv python3-setuptools python3-wheel python3-pip  # its offline pip install (and test)
  libpcre2-dev                                   # PCRE2: the tokenizer's Unicode-aware split pattern
  nodejs npm                                     # tokenizer tests: gpt-3-encoder (npm ci in the build tree)
  libopenmpi-dev openmpi-bin                     # ring attention over MPI (jomoim::dist, attend --distributed)
  libcpp-httplib-dev                             # jomoim serve: cpp-httplib (HTTP server; pkg-config cpp-httplib)
  chromium                                       # explorer browser tests: headless chromium driven by playwright-core
  fonts-noto-cjk                                 # the explorer's Korean text (Noto Sans CJK KR): without it Hangul is boxes
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-torch libjemalloc2 nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodejs from another source may provide npm itself.
if [[ " ${missing[*]} " == *" npm "* ]] && command -v npm >/dev/null 2>&1; then
  missing=("${missing[@]/npm/}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
