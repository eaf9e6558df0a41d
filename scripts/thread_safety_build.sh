#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compiles everything with clang and its thread-safety analysis
# (-Wthread-safety: the lock annotations of util/mutex.h; -Wthread-safety-beta
# adds the lock-order checks of ABSL_ACQUIRED_AFTER/BEFORE). Warnings are
# errors. Compile only: nothing is run.
#   scripts/thread_safety_build.sh [DIR] [extra cmake args]   (default build-tsa)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-tsa}
shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_COMPILER=clang++ \
  -DSROUTE_WERROR=ON -DSROUTE_THREAD_SAFETY=ON "$@" >/dev/null
ninja -C "$dir" -j"$(nproc)"
