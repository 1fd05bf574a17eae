#!/usr/bin/env bash
# The installed package, used as an outside project would (CTest: install_package):
#   1. cmake --install puts the program, the static libraries, the headers, the CMake package,
#      jomoim.pc and the data (default model, page) in a fresh prefix;
#   2. tests/install/consumer, a project of its own, builds against find_package(jomoim) and runs
#      (the engine against its float64 reference; the model on the installed default model);
#   3. the same attention program builds with pkg-config alone;
#   4. the installed program finds its model and page beside itself, with no source path in it.
#
#   run.sh SOURCE_DIR BUILD_DIR WORK_DIR CXX [CXX_FLAGS] [LINKER_FLAGS]
set -euo pipefail
src=$1 build=$2 work=$3 cxx=$4 flags=${5:-} ldflags=${6:-}
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
fail() { echo "install_package: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$work/install.log"
for f in bin/jomoim lib/libjomoim_core.a lib/libjomoim_engine.a lib/libjomoim_formats.a lib/libjomoim_text.a \
         lib/libjomoim_model.a lib/libjomoim_explain.a include/jomoim/version.hpp \
         include/jomoim/engine/attention.hpp include/jomoim/model/model.hpp lib/cmake/jomoim/jomoimConfig.cmake \
         lib/cmake/jomoim/jomoimConfigVersion.cmake lib/pkgconfig/jomoim.pc \
         share/jomoim/models/default/config.json share/jomoim/models/default/model.safetensors \
         share/jomoim/web/index.html share/jomoim/web/app.js share/jomoim/web/i18n.js; do
  [[ -e $prefix/$f ]] || fail "cmake --install did not install $f"
done
echo "installed: $(find "$prefix" -type f | wc -l) files in $prefix"

# 2. find_package(jomoim), built in a folder of its own.
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$ldflags" \
      >"$work/consumer.log" || { cat "$work/consumer.log"; fail "the consumer project did not configure"; }
cmake --build "$work/consumer" >>"$work/consumer.log" || { cat "$work/consumer.log"; fail "the consumer project did not build"; }
"$work/consumer/consumer_attention"
next=$("$work/consumer/consumer_model" "$prefix/share/jomoim/models/default" "I have a lot")
echo "consumer_model: next token after 'I have a lot' is '$next'"

# 3. pkg-config alone.
PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --exists jomoim || fail "pkg-config does not find jomoim.pc"
# shellcheck disable=SC2046
"$cxx" -std=c++20 $flags "$src/tests/install/consumer/attention.cpp" -o "$work/pc_attention" $ldflags \
       $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs jomoim) || fail "pkg-config build failed"
"$work/pc_attention"

# 4. The installed program, run from elsewhere: its data comes from the prefix.
cd "$work"
version=$("$prefix/bin/jomoim" --version)
[[ $version == "jomoim $(sed -n 's/^#define JOMOIM_VERSION_STRING "\(.*\)"/\1/p' "$prefix/include/jomoim/version.hpp")" ]] \
  || fail "jomoim --version says '$version', the installed version.hpp another"
model=$("$prefix/bin/jomoim" predict --json --top 1 "I have a lot")
[[ $model == *"\"model\":\"$prefix/share/jomoim/models/default\""* ]] || fail "installed jomoim used another model: $model"
[[ $model == *"\"text\":\"$next\""* ]] || fail "installed jomoim predicts differently from consumer_model ('$next'): $model"
"$prefix/bin/jomoim" serve --help | grep -q -- "--assets TEXT=$prefix/share/jomoim/web" \
  || fail "installed jomoim serve does not default to $prefix/share/jomoim/web"
if grep -a -q -e "$src/models" -e "$src/web" "$prefix/bin/jomoim"; then
  fail "the installed program has a source-tree data path compiled in"
fi
echo "install_package: 1 passed, 0 failed"
