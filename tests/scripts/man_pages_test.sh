#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The man pages (docs/man) and the programs agree: every option a program's
# --help lists is in the OPTIONS of its page, and every option the page lists
# is one the program takes; the same for mount.fuse.sroute's options.
# usage: man_pages_test.sh SOURCE_DIR NAME=BINARY...
set -euo pipefail
src=$1
shift
bad=0
compare() {  # WHAT FROM_PROGRAM FROM_PAGE
  local missing extra
  missing=$(comm -23 <(sort -u <<<"$2") <(sort -u <<<"$3"))
  extra=$(comm -13 <(sort -u <<<"$2") <(sort -u <<<"$3"))
  if [ -n "$missing" ]; then
    echo "$1: takes, but its page does not document: $(echo $missing)"
    bad=1
  fi
  if [ -n "$extra" ]; then
    echo "$1: its page documents, but it does not take: $(echo $extra)"
    bad=1
  fi
}
for pair in "$@"; do
  name=${pair%%=*} bin=${pair#*=}
  # Section 8 for the daemons and admin tools, 1 for sroute-sim.
  page=$src/docs/man/$name.8
  [ -f "$page" ] || page=$src/docs/man/$name.1
  [ -f "$page" ] || { echo "$name: no page $name.8 or $name.1"; bad=1; continue; }
  # --help: the flags at the start of the lines of its Options section.
  from_help=$("$bin" --help | awk '/^Options:/ {on = 1; next}
      /^[A-Z][a-z]*:/ {on = 0} on' |
    grep -oE '^  -[^ ]+' | tr ',' '\n' | sed 's/^ *//' | grep -E '^-')
  # The page: the flags of its OPTIONS section's .B lines (roff \- is -).
  from_page=$(sed 's/\\-/-/g' "$page" | awk '/^\.SH OPTIONS/ {on = 1; next}
      /^\.SH/ {on = 0} on && /^\.B / {print $2}' | tr ',' '\n' | grep -E '^-')
  compare "$name" "$from_help" "$from_page"
  grep -q -- '--version' <<<"$from_help" ||
    { echo "$name: no --version"; bad=1; }
done
# mount.fuse.sroute: the options its case statement maps to flags.
helper=$src/fuse/mount.fuse.sroute
from_script=$(grep -oE '^    [a-z_]+(=\*)?\)' "$helper" | grep -vE 'defaults|rule=' |
  sed -E 's/^ *//; s/=?\*?\)$//' | sort -u)
from_page=$(sed 's/\\-/-/g' "$src/docs/man/mount.fuse.sroute.8" |
  awk '/^\.SH OPTIONS/ {on = 1; next} /^\.SH/ {on = 0}
       on && /^\.B[IR] / {print $2}' | sed -E 's/=.*//' | sort -u)
compare mount.fuse.sroute "$from_script" "$from_page"
[ "$bad" = 0 ] && echo "the man pages and the programs agree"
exit "$bad"
