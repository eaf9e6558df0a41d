#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs a page of the documentation as its reader would (docs/dev/testing.md):
# every ```sh block, in order, in one bash with -e, -u and pipefail; every
# line of a ```text block that follows an sh block must appear, in order, in
# what the blocks printed. Blocks marked `sh norun` are not run.
#
# It runs in private mount, PID and network namespaces (pages run side by
# side, each with its own loopback and ports): /srv, /mnt, /run, /etc/sroute
# and /var/lib/sroute are empty tmpfs there (the last two are made on the
# machine if missing, empty), the build's programs come first on PATH, and
# every process the page started ends with it.
#
# usage: run_doc.sh PAGE.md BIN_DIR...
set -euo pipefail
page=$1
shift
path=""
for d in "$@"; do path+="$d:"; done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# script.sh: the sh blocks; expected: the text blocks' lines.
awk -v script="$work/script.sh" -v expected="$work/expected" '
  /^```/ {
    if (!open) {
      open = 1
      info = substr($0, 4)
      if (info == "sh") kind = "sh"
      else if (info == "text" && last == "sh") kind = "text"
      else kind = "other"
    } else {
      open = 0
      last = kind
    }
    next
  }
  open && kind == "sh" { print > script }
  open && kind == "text" && $0 != "" { print > expected }
' "$page"
if [ ! -s "$work/script.sh" ]; then
  echo "$page: no sh block to run" >&2
  exit 1
fi

for d in /etc/sroute /var/lib/sroute; do mkdir -p "$d"; done
rc=0
# A page that hangs is killed with everything it started (--kill-child).
timeout 240 unshare --mount --propagation private --pid --net --fork \
  --kill-child --mount-proc \
  env PATH="$path$PATH" bash -c '
    ip link set lo up
    for d in /srv /mnt /run /etc/sroute /var/lib/sroute; do
      mount -t tmpfs -o mode=0755 tmpfs "$d"
    done
    cd "$1" && bash -x -euo pipefail ./script.sh' _ "$work" \
  >"$work/out" 2>&1 || rc=$?
if [ "$rc" != 0 ]; then
  cat "$work/out"
  echo "$page: a command failed (exit $rc); the output is above" >&2
  exit 1
fi
if [ -s "$work/expected" ]; then
  # Each expected line, in order, as a whole line of the output.
  if ! awk 'BEGIN { n = 0; i = 0 }
            NR == FNR { want[n++] = $0; next }
            i < n && $0 == want[i] { i++ }
            END { if (i < n) { print "missing from the output: " want[i]; exit 1 } }' \
      "$work/expected" "$work/out"; then
    cat "$work/out"
    echo "$page: the output is not what the page shows" >&2
    exit 1
  fi
fi
cat "$work/out"
echo "$page: ran as written"
