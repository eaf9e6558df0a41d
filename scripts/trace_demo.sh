#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The sroute-trace session of docs/admin/tracing.md, for real: a controller, a volume "vol"
# whose //home/db/* goes to S1, which forwards it to S2, whose writes pass a
# stage "slow" (a 3 ms delay); a writer and a reader on the file; then
# sroute-trace through the controller finds the slow stage.
#   scripts/trace_demo.sh [BUILD_DIR]   (as root: it mounts a FUSE volume)
set -euo pipefail
build=$(realpath "${1:-build}")
work=$(mktemp -d /tmp/sroute-trace-demo.XXXXXX)
pids=()
cleanup() {
  set +e
  kill "${bg[@]:-}" 2>/dev/null
  fusermount3 -u "$work/mnt" 2>/dev/null
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
bg=()
cd "$work"
mkdir -p home/db s1/db s2/db mnt
head -c 32 /dev/urandom | base64 >secret
chmod 600 secret
"$build/controller/sroute-controller" --db "$work/ctl.db" --secret-file secret \
  --listen 127.0.0.1:7500 >controller.log 2>&1 &
pids+=($!)
sleep 0.5
"$build/server/sroute-server" --root s2 --name S2 --secret-file secret \
  --listen 127.0.0.1:7502 --controller 127.0.0.1:7500 \
  --stage slow=delay:delay_us=3000 >s2.log 2>&1 &
pids+=($!)
"$build/server/sroute-server" --root s1 --name S1 --secret-file secret \
  --listen 127.0.0.1:7501 --controller 127.0.0.1:7500 \
  --endpoint S2=127.0.0.1:7502 >s1.log 2>&1 &
pids+=($!)
sleep 0.5
"$build/fuse/sroute-fuse" mnt -f --backing home --secret-file secret \
  --kernel-cache off --name vol --controller 127.0.0.1:7500 \
  --endpoint S1=127.0.0.1:7501 >vol.log 2>&1 &
pids+=($!)
for _ in $(seq 50); do mountpoint -q mnt && break; sleep 0.1; done
ctl() { "$build/tools/sroutectl/sroutectl" --controller 127.0.0.1:7500 \
  --secret-file secret "$@"; }
sleep 1
ctl --host vol rules add '<*, *, //home/db/*> -> <IO, //S1/db/*>' >/dev/null
ctl --host S1 rules add '<*, *, //S1/db/*> -> <IO, //S2/db/*>' >/dev/null
ctl --host S2 rules add '<*, w, //S2/db/*> -> <IO, stage:slow>' >/dev/null
: >mnt/db/orders
(while :; do dd if=/dev/zero of=mnt/db/orders bs=4k count=1 conv=notrunc \
   status=none; done) 2>/dev/null &
bg+=($!)
(while :; do dd if=mnt/db/orders of=/dev/null bs=4k count=1 status=none; done) \
  2>/dev/null &
bg+=($!)
sleep 1
echo "sroute-trace --controller 127.0.0.1:7500 --secret-file secret --duration 3 --rate 0.1 mnt/db/orders"
"$build/tools/trace/sroute-trace" --controller 127.0.0.1:7500 \
  --secret-file secret --duration 3 --rate 0.1 mnt/db/orders
