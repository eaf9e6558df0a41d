#!/usr/bin/env bash
# Compiles everything with clang and its thread-safety analysis
# (-Wthread-safety: the lock annotations of util/mutex.h; -Wthread-safety-beta
# adds the lock-order checks of ABSL_ACQUIRED_AFTER/BEFORE). Warnings are
# errors (the top-level CMakeLists.txt always adds -Werror). Compile only:
# nothing is run.
#   scripts/thread_safety_build.sh [DIR] [extra cmake args]   (default build-tsa)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-tsa}
shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_CXX_FLAGS=-Wthread-safety -Wthread-safety-beta" "$@" >/dev/null
ninja -C "$dir" -j"$(nproc)"
