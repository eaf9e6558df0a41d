#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The library package (packaging/cmake): examples/embed, built out of tree
# against a staged install of the build tree, once with
# find_package(sroute CONFIG) and once with pkg-config, prints what the demo
# built in the tree prints. The install is staged (DESTDIR) so that it
# writes nothing outside the temp dir and leaves the kernel's FUSE io_uring
# switch alone (fuse/CMakeLists.txt). CXX, CXXFLAGS and LDFLAGS are those
# of the build (a sanitizer's flags must match its libraries).
# Usage: embed_package_test.sh SOURCE_DIR BUILD_DIR INSTALL_PREFIX LIBDIR
#                              IN_TREE_DEMO
set -euo pipefail
src=$1 build=$2 prefix=$3 libdir=$4 in_tree_demo=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root$prefix

# Runs, quietly unless it fails.
quiet() {
  "$@" >"$tmp/log" 2>&1 || { cat "$tmp/log"; echo "failed: $*"; exit 1; }
}

quiet env DESTDIR="$tmp/root" cmake --install "$build"
for f in bin/sroutectl "$libdir/libsroute_sswitch.a" \
         include/sroute/embed/embedded_host.h include/sroute/proto/config.pb.h \
         "$libdir/cmake/sroute/sroute-config.cmake" \
         "$libdir/cmake/sroute/sroute-config-version.cmake" \
         "$libdir/cmake/sroute/sroute-targets.cmake" \
         "$libdir/pkgconfig/sroute.pc"; do
  [ -e "$root/$f" ] || { echo "not installed: $f"; exit 1; }
done

# Runs demo NAME (binary BIN) into $tmp/NAME.out, its temp dir spelt DIR.
run_demo() {
  local dir=$tmp/run-$1
  "$2" --dir "$dir" >"$tmp/out" 2>&1 || {
    cat "$tmp/out"
    echo "$1: the demo failed"
    exit 1
  }
  sed "s|$dir|DIR|g" "$tmp/out" >"$tmp/$1.out"
}
run_demo tree "$in_tree_demo"
# A demo that routes nothing must not pass for one that works.
grep -qF 'read //S1/big across 512K: "BBBBBBBBAAAAAAAA"' "$tmp/tree.out" || {
  cat "$tmp/tree.out"
  echo "the in-tree demo did not route the read across 512K"
  exit 1
}
# Demo NAME (binary BIN) prints what the in-tree one does.
check_demo() {
  run_demo "$1" "$2"
  diff "$tmp/tree.out" "$tmp/$1.out" || {
    echo "$1: the demo's output differs from the in-tree demo's"
    exit 1
  }
  echo "$1: ok"
}

# CMake: the installed package, not another sroute the machine may have.
quiet cmake -S "$src/examples/embed" -B "$tmp/cmake-build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$root"
grep -qxF "sroute_DIR:PATH=$root/$libdir/cmake/sroute" \
  "$tmp/cmake-build/CMakeCache.txt" || {
  grep '^sroute_DIR' "$tmp/cmake-build/CMakeCache.txt"
  echo "find_package(sroute) did not find the staged install"
  exit 1
}
quiet cmake --build "$tmp/cmake-build"
check_demo find_package "$tmp/cmake-build/sroute-embed-demo"

# pkg-config, the same way.
export PKG_CONFIG_PATH=$root/$libdir/pkgconfig
[ "$(pkg-config --variable=pcfiledir sroute)" = "$PKG_CONFIG_PATH" ] || {
  echo "pkg-config did not find the staged sroute.pc"
  exit 1
}
flags=$(pkg-config --cflags --libs sroute)
# shellcheck disable=SC2086  # flags are word lists
quiet "${CXX:-c++}" -std=c++20 ${CXXFLAGS:-} "$src/examples/embed/main.cc" \
  -o "$tmp/pc-demo" ${LDFLAGS:-} $flags
check_demo pkg-config "$tmp/pc-demo"
