#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds into DIR (default build/); extra args go to cmake.
# SROUTE_BUILD_TARGETS="a b" builds only those targets (default: all).
#   scripts/build.sh [DIR] [-DSROUTE_SANITIZE=address,undefined ...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSROUTE_WERROR=ON \
  "$@" >/dev/null
# shellcheck disable=SC2086 # a list of target names
ninja -C "$dir" -j"$(nproc)" ${SROUTE_BUILD_TARGETS:-}
