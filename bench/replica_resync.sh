#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Replica resync benchmark (issue 23): the resync rate (MiB/s) of a
# replica_set stage with and without foreground IO, and the foreground 4 KiB
# random-read p99 during a resync at the default rate (target: at most 2x the
# p99 without resync).
#
#  - Three sroute-servers on loopback (R1, R2, R3; roots are plain
#    directories WORK/data/r1..r3 on the file system that holds WORK), one
#    sroute-fuse mount with --kernel-cache off and a control socket whose
#    every IO goes through the stage `rs=replica_set:member=R1,member=R2,
#    member=R3,read=primary,probe_ms=100`: the defaults otherwise, so resync
#    runs at 64 MiB/s and a region is 1 MiB. R1 is the primary: it serves
#    every read and is the source resync prefers, so foreground reads and
#    resync meet there. R3 is the member that falls behind.
#  - A file of SIZE is written through the mount (1 MiB O_DIRECT writes,
#    then fsync) and the script waits until every member is current.
#  - Baseline: fio 4 KiB random reads (psync, iodepth 1, 1 job, --direct=1,
#    time_based, RUNTIME s) on the file, every member current.
#  - Dirty regions: R3's sroute-server gets SIGKILL, DIRTY of the file is
#    overwritten through the mount (1 MiB O_DIRECT sequential writes, then
#    fsync), so DIRTY/1 MiB regions are stale on R3; `sroutectl replicas
#    status rs --json` must show R3 "out" with those stale bytes. Resync is
#    paused (`sroutectl replicas resync pause rs`), R3 started again on the
#    same port and root, and the script waits until R3 is "stale (resync
#    paused)".
#  - Resync without foreground IO: a python3 poller takes t0, runs
#    `sroutectl replicas resync resume rs` and reads the status JSON every
#    100 ms until R3 is "current" (t1). Resync rate = R3's stale bytes at t0
#    / (t1 - t0). The set's "resync_bytes" counter delta (bytes resync
#    moved) is printed against the stale bytes (moved/stale).
#  - Resync with foreground IO: dirty regions made again the same way, then
#    the baseline's fio job starts (with a per-IO latency log, Unix-epoch
#    time stamps) and 0.2 s later the poller resumes resync as above. fio
#    runs 0.2 s + the no-IO resync time (IO_RUNTIME overrides it), so the
#    two mostly overlap; the script prints which fraction of the fio run
#    overlapped the resync, fio's own figures for the whole run, and the
#    p50/p99 of the reads that completed inside [t0, t1] (from the latency
#    log: exact values, where fio's JSON percentiles are bucketed).
#
# The summary: resync MiB/s without and with IO, moved/stale, fio IOPS, p50
# and p99 at baseline and during resync, and the p99 ratio (during /
# baseline; the in-resync-window p99 when the log has reads in the window)
# against the target "<= 2x".
#
#   sudo bench/replica_resync.sh                          # 512m file, 256m dirty
#   SIZE=128m DIRTY=64m RUNTIME=3 bench/replica_resync.sh  # a quick look
#   BUILD=build-rel bench/replica_resync.sh
#
# Env knobs:
#   SIZE (512m: the file), DIRTY (256m: overwritten while R3 is down; a
#   multiple of 1 MiB, at most SIZE), RUNTIME (10 s: the baseline fio run),
#   IO_RUNTIME (the fio run during resync, seconds; default 0.2 + the no-IO
#   resync time, at least 1), READY_TIMEOUT (300 s: how long members may
#   take to be current, or R3 out/stale), WORK (/tmp/sroute-resync-bench:
#   roots, mount, logs, fio output), BUILD (build: the sroute build
#   directory; or SROUTE_FUSE=PATH SROUTE_SERVER=PATH SROUTECTL=PATH).
#
# Needs root (or FUSE mounts for the user), fio, python3, numfmt and a built
# sroute (sroute-fuse, sroute-server, sroutectl). Everything the script
# started (the mount, the servers, fio) is stopped at the end, also when it
# fails.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
work=${WORK:-/tmp/sroute-resync-bench}
size_h=${SIZE:-512m}
dirty_h=${DIRTY:-256m}
runtime=${RUNTIME:-10}
io_runtime=${IO_RUNTIME:-}
ready_timeout=${READY_TIMEOUT:-300}
build=${BUILD:-build}
case $build in /*) ;; *) build=$top/$build ;; esac
sroute_fuse=${SROUTE_FUSE:-$build/fuse/sroute-fuse}
sroute_server=${SROUTE_SERVER:-$build/server/sroute-server}
sroutectl=${SROUTECTL:-$build/tools/sroutectl/sroutectl}
file_name=resync.dat
mib=$(( 1 << 20 ))

size=$(numfmt --from=iec "${size_h^^}")
dirty=$(numfmt --from=iec "${dirty_h^^}")
if (( size % mib != 0 || dirty % mib != 0 || dirty <= 0 || dirty > size )); then
  echo "SIZE and DIRTY: multiples of 1 MiB, 0 < DIRTY <= SIZE (not $size_h, $dirty_h)" >&2
  exit 2
fi

data=$work/data
mkdir -p "$data" "$work/bin"

# What the figures depend on, printed first (and kept with the results).
{
  echo "# $(date -Is) $(uname -r), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# sroute $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?'), $(fio --version)"
  echo "# SIZE=$size_h DIRTY=$dirty_h RUNTIME=$runtime IO_RUNTIME=${io_runtime:-auto}"
} | tee "$work/header.txt" >&2

# Copies of the binaries, so that a rebuild during the run changes nothing.
cp "$sroute_fuse" "$work/bin/sroute-fuse"
cp "$sroute_server" "$work/bin/sroute-server"
cp "$sroutectl" "$work/bin/sroutectl"

# State of what this run started, for cleanup.
fio_pid=""
fuse_pid=""
mnt=$work/mnt
declare -a rep_pid=() rep_addr=() rep_port=()

cleanup() {
  set +e
  [ -n "$fio_pid" ] && { kill -TERM "$fio_pid" 2>/dev/null; wait "$fio_pid" 2>/dev/null; }
  if mountpoint -q "$mnt"; then
    fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"
  fi
  if [ -n "$fuse_pid" ]; then
    for _ in $(seq 50); do kill -0 "$fuse_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$fuse_pid" 2>/dev/null
    wait "$fuse_pid" 2>/dev/null
  fi
  for pid in "${rep_pid[@]}"; do
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    # A disowned one (a killed member's successor is not) is not waited for.
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  done
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The cluster secret sroute's hosts prove to each other.
secret=$work/secret
[ -s "$secret" ] || { head -c 32 /dev/urandom | base64 > "$secret"; chmod 600 "$secret"; }

wait_mounted() {  # mountpoint what
  for _ in $(seq 200); do mountpoint -q "$1" && return 0; sleep 0.05; done
  echo "$2 did not mount on $1" >&2; exit 1
}

start_member() {  # index port -> rep_pid[index], rep_addr[index], rep_port[index]
  local i=$1 port=$2 root=$data/r$(( $1 + 1 )) out=$work/r$(( $1 + 1 )).out addr=""
  mkdir -p "$root"
  # A restarted member takes its old port; if that is not free yet, again.
  for _ in $(seq 50); do
    : > "$out"
    "$work/bin/sroute-server" --root "$root" --listen 127.0.0.1:"$port" \
      --secret-file "$secret" --name "S$(( i + 1 ))" > "$out" 2>> "$work/r$(( i + 1 )).log" &
    rep_pid[$i]=$!
    # Port 0 picks a free port; the server prints the one it got.
    for _ in $(seq 200); do
      addr=$(sed -n 's/^listening on //p' "$out")
      if [ -n "$addr" ]; then
        rep_addr[$i]=$addr rep_port[$i]=${addr##*:}
        return 0
      fi
      kill -0 "${rep_pid[$i]}" 2>/dev/null || break
      sleep 0.05
    done
    kill -0 "${rep_pid[$i]}" 2>/dev/null && break  # alive but silent
    wait "${rep_pid[$i]}" 2>/dev/null || true
    sleep 0.1
  done
  echo "sroute-server r$(( i + 1 )) did not start: $(tail -3 "$work/r$(( i + 1 )).log")" >&2; exit 1
}

ctl_sock=$work/rs.sock
ctl() { "$work/bin/sroutectl" --host "unix:$ctl_sock" "$@"; }

# "STATE1|STATE2|STATE3|R1_READS|R3_STALE_BYTES|RESYNC_BYTES" of the replica
# set (nothing if sroutectl fails). '|' separates: a state may have spaces.
rs_status() {
  local json
  json=$(ctl replicas status rs --json 2>/dev/null) || return 0
  python3 -c '
import json, sys
s = json.loads(sys.argv[1])["sets"][0]
m = s["members"]
print("|".join([x["state"] for x in m] + [str(m[0].get("reads", "-")), str(m[2]["stale_bytes"]), str(s["resync_bytes"])]))' "$json"
}

elapsed_over() {  # start limit: succeeds once more than limit s have passed
  python3 -c "import sys, time; sys.exit(0 if time.time() - $1 > $2 else 1)"
}

# Waits until every member is current and R1 (the primary) serves reads
# again; prints the seconds it took.
wait_sroute_current() {
  local start st reads0 f=$mnt/$file_name
  start=$(date +%s.%N)
  while :; do
    st=$(rs_status)
    if [[ $st == "current|current|current|"* ]]; then
      IFS='|' read -r _ _ _ reads0 _ _ <<< "$st"
      dd if="$f" of=/dev/null bs=4k count=8 iflag=direct status=none 2>/dev/null || true
      st=$(rs_status)
      local reads1=""
      IFS='|' read -r _ _ _ reads1 _ _ <<< "$st"
      if [[ $st == "current|current|current|"* ]] &&
        { [ "$reads0" = - ] || [ "$reads1" -gt "$reads0" ]; }; then
        python3 -c "import time; print(f'{time.time() - $start:.1f}')"
        return 0
      fi
    fi
    if elapsed_over "$start" "$ready_timeout"; then
      echo "the members were not all current after ${ready_timeout} s: ${st:-no status}" >&2
      exit 1
    fi
    sleep 0.1
  done
}

# Waits until R3's state is $1; prints R3's stale bytes then.
wait_r3_state() {  # state
  local start st s3 stale
  start=$(date +%s.%N)
  while :; do
    st=$(rs_status)
    IFS='|' read -r _ _ s3 _ stale _ <<< "$st"
    if [ "$s3" = "$1" ]; then
      echo "$stale"
      return 0
    fi
    if elapsed_over "$start" "$ready_timeout"; then
      echo "R3 was not \"$1\" after ${ready_timeout} s: ${st:-no status}" >&2
      exit 1
    fi
    sleep 0.1
  done
}

setup_sroute() {
  for i in 0 1 2; do
    rm -rf "$data/r$(( i + 1 ))"
    start_member "$i" 0
  done
  local state=$work/state
  mkdir -p "$mnt"
  mountpoint -q "$mnt" && { fusermount3 -u "$mnt" || umount -l "$mnt"; }
  rm -rf "$state"
  mkdir -p "$state"
  rm -f "$ctl_sock"
  "$work/bin/sroute-fuse" "$mnt" --backing "${rep_addr[0]}" --secret-file "$secret" \
    -f --kernel-cache off --state "$state" --control "$ctl_sock" \
    --endpoint "R1=${rep_addr[0]}" --endpoint "R2=${rep_addr[1]}" \
    --endpoint "R3=${rep_addr[2]}" \
    --stage "rs=replica_set:member=R1,member=R2,member=R3,read=primary,probe_ms=100${RESYNC_MIB_PER_S:+,resync_mib_per_s=$RESYNC_MIB_PER_S}" \
    --rule '<*, *, //home/*> -> <IO, stage:rs>' 2> "$work/sroute-fuse.log" &
  fuse_pid=$!
  wait_mounted "$mnt" sroute-fuse
  echo "# R1 ${rep_addr[0]} pid ${rep_pid[0]}, R2 ${rep_addr[1]} pid ${rep_pid[1]}, R3 ${rep_addr[2]} pid ${rep_pid[2]}; sroute-fuse pid $fuse_pid" >&2
}

# fio's 4 KiB random-read job on the file. run_fio NAME RUNTIME [extra fio
# args] -> WORK/NAME.json. In the background (fio_pid) with FIO_BG=1.
run_fio() {
  local name=$1 rt=$2
  shift 2
  fio --name="$name" --filename="$mnt/$file_name" --size="$size" \
    --rw=randread --bs=4k --ioengine=psync --iodepth=1 --numjobs=1 \
    --direct=1 --time_based --runtime="$rt" --randrepeat=0 --norandommap \
    --group_reporting --output-format=json --output="$work/$name.json" \
    "$@" > "$work/$name.fio.out" 2>&1 &
  fio_pid=$!
  if [ "${FIO_BG:-0}" != 1 ]; then
    wait "$fio_pid" || { echo "fio $name failed: $(tail -3 "$work/$name.fio.out")" >&2; exit 1; }
    fio_pid=""
  fi
}

# "iops p50_us p99_us" of a fio JSON output.
fio_figures() {
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["jobs"][0]["read"]
pct = d["clat_ns"].get("percentile", {})
print(f'{d["iops"]:.0f} {pct.get("50.000000", 0) / 1000:.1f} {pct.get("99.000000", 0) / 1000:.1f}')
PY
}

# Resumes resync and times it (see the header). Arguments: sroutectl, the
# control socket, the timeout. Prints "stale_bytes seconds moved_bytes
# t0_epoch t1_epoch".
cat > "$work/resync.py" <<'PY'
import json, subprocess, sys, time

ctl, sock, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])

def status():
    out = subprocess.run([ctl, "--host", "unix:" + sock, "replicas", "status", "rs", "--json"],
                         check=True, capture_output=True, text=True).stdout
    s = json.loads(out)["sets"][0]
    return s, {m["name"]: m for m in s["members"]}

s, m = status()
if m["R3"]["state"] != "stale (resync paused)":
    sys.exit(f"R3 is {m['R3']['state']!r}, not stale with resync paused")
stale, moved0 = int(m["R3"]["stale_bytes"]), int(s["resync_bytes"])
t0, e0 = time.monotonic(), time.time()
subprocess.run([ctl, "--host", "unix:" + sock, "replicas", "resync", "resume", "rs"],
               check=True, capture_output=True)
while True:
    time.sleep(0.1)
    s, m = status()
    if m["R3"]["state"] == "current":
        t1, e1 = time.monotonic(), time.time()
        break
    if time.monotonic() - t0 > timeout:
        sys.exit(f"R3 not current {timeout} s after resume: {m['R3']}")
print(stale, f"{t1 - t0:.3f}", int(s["resync_bytes"]) - moved0, f"{e0:.3f}", f"{e1:.3f}")
PY

# Kills R3, overwrites DIRTY of the file (so R3 misses it), checks that R3 is
# out with stale bytes, pauses resync, starts R3 again and waits until it is
# in but stale. Prints the stale bytes.
make_dirty() {
  local pid=${rep_pid[2]} stale
  # Out of bash's job table: no "Killed" notice when it dies (bash still
  # reaps it).
  disown "$pid" 2>/dev/null || true
  kill -KILL "$pid"
  for _ in $(seq 100); do [ -e "/proc/$pid" ] || break; sleep 0.05; done
  dd if=/dev/urandom of="$mnt/$file_name" bs=1M count=$(( dirty / mib )) \
    oflag=direct conv=notrunc,fsync status=none
  stale=$(wait_r3_state out)
  echo "# killed R3 (pid $pid), overwrote $dirty_h: R3 out, stale_bytes $stale" >&2
  if [ "$stale" -lt "$dirty" ]; then
    echo "R3's stale_bytes $stale < DIRTY $dirty" >&2; exit 1
  fi
  ctl replicas resync pause rs > /dev/null
  start_member 2 "${rep_port[2]}"
  stale=$(wait_r3_state "stale (resync paused)")
  echo "# resync paused; R3 started again (pid ${rep_pid[2]}): stale (resync paused), stale_bytes $stale" >&2
}

# --- Set-up: the members, the mount, the file, every member current.
setup_sroute
dd if=/dev/urandom of="$mnt/$file_name" bs=1M count=$(( size / mib )) \
  oflag=direct conv=fsync status=none
ready=$(wait_sroute_current)
echo "# file of $size_h written; all members current after $ready s" >&2

# --- Baseline.
run_fio baseline "$runtime"
read -r base_iops base_p50 base_p99 <<< "$(fio_figures "$work/baseline.json")"
echo "# baseline: $base_iops IOPS, p50 $base_p50 us, p99 $base_p99 us" >&2

# --- Resync without foreground IO.
make_dirty
python3 "$work/resync.py" "$work/bin/sroutectl" "$ctl_sock" "$ready_timeout" > "$work/resync-noio.out"
read -r noio_stale noio_s noio_moved _ _ < "$work/resync-noio.out"
echo "# resync without IO: $noio_stale stale bytes in $noio_s s, $noio_moved bytes moved" >&2
ready=$(wait_sroute_current)

# --- Resync with foreground IO.
make_dirty
lead=0.2
[ -n "$io_runtime" ] || io_runtime=$(python3 -c "print(f'{max(1.0, $lead + $noio_s):.3f}')")
io_ms=$(python3 -c "print(int(round($io_runtime * 1000)))")
rm -f "$work"/during_*.log
FIO_BG=1 run_fio during "${io_ms}ms" --write_lat_log="$work/during" \
  --log_avg_msec=0 --log_unix_epoch=1
sleep "$lead"
if ! python3 "$work/resync.py" "$work/bin/sroutectl" "$ctl_sock" "$ready_timeout" > "$work/resync-io.out"; then
  echo "timing the resync under IO failed" >&2; exit 1
fi
wait "$fio_pid" || { echo "fio during failed: $(tail -3 "$work/during.fio.out")" >&2; exit 1; }
fio_pid=""
read -r io_stale io_s io_moved io_e0 io_e1 < "$work/resync-io.out"
read -r dur_iops dur_p50 dur_p99 <<< "$(fio_figures "$work/during.json")"
echo "# resync with IO: $io_stale stale bytes in $io_s s, $io_moved bytes moved; fio ${io_runtime} s: $dur_iops IOPS, p50 $dur_p50 us, p99 $dur_p99 us" >&2
ready=$(wait_sroute_current)
echo "# all members current again after $ready s" >&2
echo "# done $(date -Is), load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$work/header.txt" >&2

# --- Summary.
python3 - "$work/during_clat.1.log" "$io_e0" "$io_e1" \
  "$noio_stale" "$noio_s" "$noio_moved" "$io_stale" "$io_s" "$io_moved" \
  "$base_iops" "$base_p50" "$base_p99" "$dur_iops" "$dur_p50" "$dur_p99" <<'PY' | tee "$work/summary.txt"
import sys
log, e0, e1 = sys.argv[1], float(sys.argv[2]) * 1000, float(sys.argv[3]) * 1000
(noio_stale, noio_s, noio_moved, io_stale, io_s, io_moved) = map(float, sys.argv[4:10])
(b_iops, b_p50, b_p99, d_iops, d_p50, d_p99) = map(float, sys.argv[10:16])
MiB = 1 << 20

# Per-IO completion times (Unix ms) and latencies (ns) of the run under resync.
times, inside = [], []
for line in open(log):
    f = line.split(",")
    t, ns = float(f[0]), int(f[1])
    times.append(t)
    if e0 <= t <= e1:
        inside.append(ns / 1000)
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))] if v else 0.0
f0, f1 = min(times), max(times)
overlap = max(0.0, min(f1, e1) - max(f0, e0))
frac = overlap / (f1 - f0) if f1 > f0 else 0.0
w_p50, w_p99 = pct(inside, 50), pct(inside, 99)
w_iops = len(inside) / (overlap / 1000) if overlap > 0 else 0.0

def rate(stale, s):
    return f"{stale / MiB / s:.1f}" if s > 0 else "-"
def ratio(moved, stale):
    return f"{moved / stale:.2f}" if stale > 0 else "-"

print(f'{"resync":24} {"stale MiB":>10} {"seconds":>8} {"MiB/s":>8} {"moved MiB":>10} {"moved/stale":>11}')
print(f'{"without foreground IO":24} {noio_stale / MiB:10.0f} {noio_s:8.2f} {rate(noio_stale, noio_s):>8} {noio_moved / MiB:10.1f} {ratio(noio_moved, noio_stale):>11}')
print(f'{"with foreground IO":24} {io_stale / MiB:10.0f} {io_s:8.2f} {rate(io_stale, io_s):>8} {io_moved / MiB:10.1f} {ratio(io_moved, io_stale):>11}')
print()
print(f'{"fio 4 KiB randread":30} {"IOPS":>8} {"p50 us":>9} {"p99 us":>9}')
print(f'{"baseline (all current)":30} {b_iops:8.0f} {b_p50:9.1f} {b_p99:9.1f}')
print(f'{"during resync (whole fio run)":30} {d_iops:8.0f} {d_p50:9.1f} {d_p99:9.1f}')
print(f'{"during resync (in [t0, t1])":30} {w_iops:8.0f} {w_p50:9.1f} {w_p99:9.1f}   ({len(inside)} reads)')
print(f'\nfio run {(f1 - f0) / 1000:.2f} s, resync {io_s:.2f} s; overlap {overlap / 1000:.2f} s = {frac * 100:.0f}% of the fio run')
during = w_p99 if inside else d_p99
which = "in-window" if inside else "whole-run"
r = during / b_p99 if b_p99 > 0 else float("inf")
print(f'p99 during resync ({which}) / baseline: {during:.1f} / {b_p99:.1f} us = {r:.2f}x '
      f'(target <= 2x: {"met" if r <= 2 else "NOT met"})')
PY
