#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds into DIR (default build/); extra args go to cmake.
#   scripts/build.sh [DIR] [-DSROUTE_SANITIZE=address,undefined ...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSROUTE_WERROR=ON \
  "$@" >/dev/null
ninja -C "$dir" -j"$(nproc)"
