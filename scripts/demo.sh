#!/usr/bin/env bash
# The README's run command: install, build, and route IO through an sSwitch
# with the embedded demo rules (no FUSE mount, no controller needed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
exec build/examples/embed/sroute-embed-demo "$@"
