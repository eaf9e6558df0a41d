#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Mounts the demo volume: two local directories as endpoints "home" and
# "fast" under DIR (default /tmp/sroute-demo), the rules of demo.rules, and a
# mount at DIR/mnt. Shows a few routed IOs and leaves the volume mounted.
#   examples/volume/demo.sh [DIR]     unmount: fusermount3 -u DIR/mnt
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
bin=${SROUTE_FUSE:-$top/build/fuse/sroute-fuse}
ctl=${SROUTECTL:-$top/build/tools/sroutectl/sroutectl}
dir=${1:-/tmp/sroute-demo}

if mountpoint -q "$dir/mnt" 2>/dev/null; then fusermount3 -u "$dir/mnt"; fi
rm -rf "$dir"
mkdir -p "$dir/home" "$dir/fast" "$dir/mnt"
# Files the byte-range and scatter rules route must exist at both ends.
: > "$dir/home/db.img"; : > "$dir/fast/db.img"
: > "$dir/home/journal.log"; : > "$dir/fast/journal.log"

"$bin" "$dir/mnt" --backing "$dir/home" --endpoint "fast=$dir/fast" \
  --rules "$here/demo.rules" --control "$dir/control.sock"
for _ in $(seq 100); do mountpoint -q "$dir/mnt" && break; sleep 0.05; done
mountpoint -q "$dir/mnt" || { echo "demo: the volume did not mount" >&2; exit 1; }

m=$dir/mnt
echo "sroute demo volume mounted at $m (home=$dir/home, fast=$dir/fast)"
echo; echo "rules:"; grep -v '^#' "$here/demo.rules" | sed '/^$/d; s/^/  /'

mkdir -p "$m/scratch/build"
echo "temporary object" > "$m/scratch/build/a.o"
head -c 131072 /dev/urandom > "$dir/payload"
dd if="$dir/payload" of="$m/db.img" bs=128k conv=notrunc status=none
echo "entry 1" >> "$m/journal.log"

size() { stat -c %s "$1" 2>/dev/null || echo absent; }
echo
echo "after a few writes through the mount:"
echo "  scratch/build/a.o   home: $(size "$dir/home/scratch/build/a.o")  fast: $(size "$dir/fast/scratch/build/a.o") bytes"
echo "  db.img (128K)       home: $(size "$dir/home/db.img")  fast: $(size "$dir/fast/db.img") bytes (first 64K on fast)"
echo "  journal.log         home: $(size "$dir/home/journal.log")  fast: $(size "$dir/fast/journal.log") bytes (scattered)"
if cmp -s "$dir/payload" "$m/db.img"; then
  echo "  reading db.img back through the mount gives exactly what was written"
else
  echo "demo: db.img read back differs" >&2; exit 1
fi
echo "  ls $m/scratch/build: $(ls "$m/scratch/build")"
cat <<TXT

Try:
  ls -la $m; cat $m/scratch/build/a.o
  echo more >> $m/journal.log; cat $dir/fast/journal.log
  $ctl --host unix:$dir/control.sock rules ls
  $ctl --host unix:$dir/control.sock rules add '<*, *, //home/tmp/*> -> <IO, //fast/tmp/*>'
  $ctl --host unix:$dir/control.sock stats
  $ctl rules check $here/demo.rules
Unmount with: fusermount3 -u $m
TXT
