#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's run command: install, build, and mount the demo volume (two
# local endpoints, example rules, no controller needed); it shows a few
# routed IOs and stays mounted for you to try. `--embed` instead runs the
# C++ embedding demo (no FUSE).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Only what the demo runs (the whole tree with its tests: scripts/test.sh).
if [ "${1:-}" = "--embed" ]; then
  SROUTE_BUILD_TARGETS=sroute-embed-demo scripts/build.sh build
  exec build/examples/embed/sroute-embed-demo
fi
SROUTE_BUILD_TARGETS="sroute-fuse sroutectl" scripts/build.sh build
# Volumes use FUSE over io_uring when the kernel offers it; turn its switch
# on (off by default), as `ninja install` does; the script says how to undo it.
scripts/enable-fuse-uring.sh
exec examples/volume/demo.sh "$@"
