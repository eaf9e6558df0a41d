#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Storage-server path benchmark (issue 4): fio through an sroute-fuse volume
# whose home is ONE sroute-server on loopback (sroute-fuse --kernel-cache off
# and auto) against a single-brick GlusterFS volume on loopback mounted with
# its FUSE client (Debian's GlusterFS in its default configuration). Both
# servers keep their files on the same journaled ext4 loop filesystem made for
# the benchmark (as bench/fuse_fio.sh does), in sibling directories.
#
# sroute runs in these variants: its defaults with --kernel-cache off
# (sroute-off) and auto (sroute-auto): FUSE over io_uring (the script turns
# the kernel's switch on, as installing does) and network threads polling
# while requests flow; sroute-poll: kernel cache off and both daemons'
# network threads always polling (--poll-us $POLL_US) against a second
# sroute-server of their own; sroute-plain: the defaults before issue 26
# (/dev/fuse, --poll-us 0 on both daemons, a third server). Polling spends CPU to skip the wake-ups
# of sleeping threads, which on this virtual machine cost tens of
# microseconds each (see bench/RESULTS.md).
#
# Every run uses psync, iodepth 1 and --direct=1: the kernel's page cache on
# the client side is bypassed, so every read and write is a FUSE request to
# the client daemon, which sends it to its server over TCP. What the servers
# do with O_DIRECT differs, and that is part of what is measured:
#  - sroute-server reads and writes its file through the page cache of the
#    loop filesystem (it does not pass O_DIRECT on), and acknowledges a write
#    once it has written it there.
#  - GlusterFS passes the open's O_DIRECT down to the brick, which opens its
#    file O_DIRECT: every read and write goes to the loop block device. Its
#    client's write-behind (on by default; performance.strict-o-direct=off)
#    acknowledges writes before the brick has them.
#  - "gluster-rdio" is NOT GlusterFS's default configuration, only a
#    diagnostic: a second volume with network.remote-dio=enable, which strips
#    O_DIRECT at the client so the brick uses its page cache as sroute-server
#    does. The targets are judged against "gluster" (the defaults) only.
#
# All systems stay mounted for the whole session; each round runs every
# workload on every system in turn (the order of the systems rotates from
# round to round), so the systems see the same background load. Each fio run
# has a warm-up (fio --ramp_time) before its timed part. The script prints
# one line per (system, workload) with the median over rounds of IOPS or
# MB/s, p50/p99 completion latency and the CPU use of the client daemon
# (sroute-fuse, glusterfs) and the server (sroute-server, glusterfsd), then
# the issue's targets as ratios sroute/GlusterFS.
#
#   sudo bench/server_fio.sh                  # 3 rounds, 10 s per run
#   ROUNDS=1 RUNTIME=3 bench/server_fio.sh    # a quick look
#   BUILD=build-gl SYSTEMS="sroute-off gluster" WORKLOADS=randread4k-1 bench/server_fio.sh
#   PERF_WORKLOADS="randread4k-1" bench/server_fio.sh   # also perf record -g
#   SYSTEMS="sroute-off sroute-cache gluster-iocache" \
#     WORKLOADS="zipfread4k-1 zipfread4k-4" bench/server_fio.sh   # issue 21
#
# Caches (issue 21): "sroute-cache" (and "sroute-poll-cache", the same on
# sroute-poll; "sroute-uring-cache", the same on "sroute-uring", which is
# sroute-off with the client on FUSE over io_uring, --io-uring, the kernel's
# switch turned on for the run) is sroute-off with a cache stage on the
# client host holding CACHE of the file (default a tenth of SIZE) that
# every read and write of the volume passes (write-through), with the
# stage's default admission (none: S3-FIFO's own); "sroute-uring-tinylfu" is
# sroute-uring-cache with admission=frequency (TinyLFU). For those, the
# results' seventh column is the cache's hit ratio over the timed part
# (its counters, read through a control socket after the warm-up and at
# the end; -1 for the others);
# "gluster-iocache" a GlusterFS volume with performance.io-cache on and
# performance.cache-size CACHE, mounted with direct-io-mode=enable. The
# Zipf(0.99) read workloads (zipfread4k-1, -4) run with fio --direct=0:
# both mounts keep the kernel's page cache out (sroute-fuse --kernel-cache
# off, GlusterFS direct-io-mode), and O_DIRECT would turn io-cache off.
#
# Replica sets (issue 23): "sroute-rep3" is sroute-off whose every IO goes
# through a replica_set stage on the client host with three members, three
# sroute-servers of their own (r1, r2, r3; ack=all, read=least_loaded: a
# read-only flow spread over the members); "sroute-rep1" the same stage
# with one member (r1); "gluster-rep3" a GlusterFS replica 3 volume (AFR)
# of three bricks on this host. Targets: randread4k-4 of sroute-rep3 at
# least 2.5x sroute-rep1's; 4 KiB random write IOPS of sroute-rep3 at least
# 2x gluster-rep3's with a lower p99.
#   REP_READ=random, REP_ACK=quorum ...  # the replica sets' read and ack policies (least_loaded, all)
#   MEMBER_CPU_PCT=10 SYSTEMS="sroute-rep1 sroute-rep3" WORKLOADS=randread4k-4 \
#     bench/server_fio.sh    # members as the bottleneck (limit_cpu below)
#   SYSTEMS="sroute-rep1 sroute-rep3 gluster-rep3" \
#     WORKLOADS="randread4k-4 randwrite4k-1 randwrite4k-4" bench/server_fio.sh
#
# Env knobs:
#   ROUNDS (3), RUNTIME (10 s per timed run), WARMUP (2 s of fio ramp_time),
#   SIZE (256m: the fio file, a few hundred MiB), WORK (/tmp/sroute-server-bench:
#   loop image, mounts, results), SYSTEMS ("sroute-off sroute-auto gluster
#   sroute-poll gluster gluster-rdio"; gluster-rdio is the diagnostic above),
#   POLL_US (200: the poll window of sroute-poll's daemons),
#   WORKLOADS (randread4k-1 randread4k-4 randwrite4k-1 randwrite4k-4
#   seqread128k-1 seqwrite128k-1), BUILD (build: the sroute build directory;
#   or SROUTE_FUSE=PATH SROUTE_SERVER=PATH SROUTECTL=PATH), GLUSTER_VOLUME (gv0; the
#   diagnostic volume is gv0rdio), SROUTE_PORT (0: any free port),
#   PERF_WORKLOADS (none: for these workloads, perf record -g both daemons of
#   each system during the timed run into WORK/perf-SYSTEM-WORKLOAD.data;
#   perf costs CPU, so figures of those runs are not comparable).
#
# Needs root, fio, glusterfs-server and glusterfs-client
# (scripts/install-bench-deps.sh), python3, fincore (util-linux), and a built
# sroute (sroute-fuse, sroute-server). It is idempotent: a GlusterFS volume of
# the same name left from an earlier run is stopped, deleted and made again
# on a fresh brick, and everything the script started (mounts, daemons,
# glusterd, the volumes, the loop filesystem's mount) is stopped at the end.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/bench/fio_lib.sh"
work=${WORK:-/tmp/sroute-server-bench}
rounds=${ROUNDS:-3}
runtime=${RUNTIME:-10}
warmup=${WARMUP:-2}
size=${SIZE:-256m}
systems=${SYSTEMS:-"sroute-off sroute-auto sroute-poll gluster gluster-rdio"}
poll_us=${POLL_US:-200}
workloads=${WORKLOADS:-"randread4k-1 randread4k-4 randwrite4k-1 randwrite4k-4 seqread128k-1 seqwrite128k-1"}
build=${BUILD:-build}
case $build in /*) ;; *) build=$top/$build ;; esac
sroute_fuse=${SROUTE_FUSE:-$build/fuse/sroute-fuse}
sroute_server=${SROUTE_SERVER:-$build/server/sroute-server}
sroutectl=${SROUTECTL:-$build/tools/sroutectl/sroutectl}
vol=${GLUSTER_VOLUME:-gv0}
# A tenth of SIZE (in MiB) unless CACHE says otherwise.
size_mib=$(python3 -c "s='$size'.lower(); u={'k':1/1024,'m':1,'g':1024}; print(int(float(s[:-1])*u[s[-1]]) if s[-1] in u else int(s)>>20)")
cache=${CACHE:-$(( size_mib / 10 ))m}
perf_workloads=${PERF_WORKLOADS:-}

data=$work/data
mkdir -p "$data" "$work/bin"
results=$work/results.txt
hz=$(getconf CLK_TCK)

# What the figures depend on, printed first (and kept with the results).
{
  echo "# $(date -Is) $(uname -r), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# sroute $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?'), $(glusterfsd --version 2>/dev/null | head -1)"
  echo "# ROUNDS=$rounds RUNTIME=$runtime WARMUP=$warmup SIZE=$size SYSTEMS=\"$systems\""
} | tee "$work/header.txt" >&2

# Copies of the binaries, so that a rebuild during the run changes nothing.
cp "$sroute_fuse" "$work/bin/sroute-fuse"
cp "$sroute_server" "$work/bin/sroute-server"
cp "$sroutectl" "$work/bin/sroutectl"

# State of what this run started, for cleanup.
mounted_loop=0
made_volumes=()
started_glusterd=0
glusterd_pid=""
server_pid=""
server_addr=""
poll_server_pid=""
plain_server_pid=""
poll_server_addr=""
rep1_pid="" rep1_addr=""
declare -a rep_pid=() rep_addr=()
declare -a made_cgroups=()
declare -A fuse_pid=()    # system -> client daemon pid
declare -A mnt_of=()      # system -> mount point
declare -A ctl_of=()      # cache system -> its control socket
declare -A brick_pid=()   # GlusterFS system -> its brick daemon's pid

cleanup() {
  set +e
  for sys in "${!mnt_of[@]}"; do
    local m=${mnt_of[$sys]}
    if [[ $sys == gluster* ]]; then
      mountpoint -q "$m" && umount "$m"
    else
      mountpoint -q "$m" && { fusermount3 -u "$m" || umount -l "$m"; }
      [ -n "${fuse_pid[$sys]:-}" ] && wait "${fuse_pid[$sys]}" 2>/dev/null
    fi
  done
  for pid in $server_pid $poll_server_pid $plain_server_pid ${rep_pid[@]} $rep1_pid; do
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  for g in "${made_cgroups[@]}"; do rmdir "$g" 2>/dev/null; done
  # volume stop also stops the brick daemon.
  for v in "${made_volumes[@]}"; do
    gluster --mode=script volume stop "$v" force > /dev/null 2>&1
    gluster --mode=script volume delete "$v" > /dev/null 2>&1
  done
  if [ "$started_glusterd" = 1 ]; then
    kill -TERM "$glusterd_pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$glusterd_pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$work/glusterd.pid"
  fi
  [ "$mounted_loop" = 1 ] && umount "$data"
  restore_uring_switch
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The journaled ext4 loop filesystem that holds both servers' files.
if ! mountpoint -q "$data"; then
  [ -f "$work/ext4.img" ] || {
    truncate -s 4G "$work/ext4.img"
    mkfs.ext4 -q -F -j "$work/ext4.img"
  }
  mount -o loop "$work/ext4.img" "$data"
  mounted_loop=1
fi

# The cluster secret sroute's hosts prove to each other.
secret=$work/secret
[ -s "$secret" ] || { head -c 32 /dev/urandom | base64 > "$secret"; chmod 600 "$secret"; }

wait_mounted() {  # mountpoint what
  for _ in $(seq 200); do mountpoint -q "$1" && return 0; sleep 0.05; done
  echo "$2 did not mount on $1" >&2; exit 1
}

# --- sroute: one server for the session shared by sroute-off and
# sroute-auto (each a client mount), and one polling server for sroute-poll.
# MEMBER_CPU_PCT=N: each replica member (r1..r3, q1) runs in a CPU cgroup
# of its own limited to N% of one CPU, so that the members, not the one
# client, are the bottleneck, as servers of their own would be when their
# disks or CPUs are busy. cgroup v1 (cpu controller) or v2 (cpu.max).
limit_cpu() {  # pid name
  [ -n "${MEMBER_CPU_PCT:-}" ] || return 0
  local quota=$((MEMBER_CPU_PCT * 100)) g  # of a 10 ms period (quota >= 1 ms)
  if [ -d /sys/fs/cgroup/cpu ] && [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    g=/sys/fs/cgroup/cpu/sroute-bench-$2
    mkdir -p "$g"
    echo 10000 > "$g/cpu.cfs_period_us"
    echo "$quota" > "$g/cpu.cfs_quota_us"
  else
    g=/sys/fs/cgroup/sroute-bench-$2
    mkdir -p "$g"
    echo "$quota 10000" > "$g/cpu.max"
  fi
  echo "$1" > "$g/cgroup.procs"
  made_cgroups+=("$g")
}

start_sroute_server() {  # root port-file [server flags]... -> started_pid, started_addr
  local root=$1 out=$2 port=${SROUTE_PORT:-0}
  shift 2
  mkdir -p "$data/$root"
  # Replica members listen on any free port (SROUTE_PORT is the first's).
  [[ $root == r[23] ]] && port=0
  "$work/bin/sroute-server" --root "$data/$root" --listen 127.0.0.1:"$port" \
    --secret-file "$secret" --name S1 "$@" > "$work/$out" 2> "$work/$root.log" &
  started_pid=$!
  [[ $root == r[123] || $root == q1 ]] && limit_cpu "$started_pid" "$root"
  # Port 0 picks a free port; the server prints the one it got.
  for _ in $(seq 200); do
    started_addr=$(sed -n 's/^listening on //p' "$work/$out")
    [ -n "$started_addr" ] && return 0
    kill -0 "$started_pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "sroute-server did not start: $(tail -3 "$work/$root.log")" >&2; exit 1
}

mount_sroute() {  # system kernel-cache server-address [client flags]...
  local m=$work/mnt-$1 sys=$1 cache=$2 addr=$3
  shift 3
  mkdir -p "$m"
  mountpoint -q "$m" && { fusermount3 -u "$m" || umount -l "$m"; }
  "$work/bin/sroute-fuse" "$m" --backing "$addr" --secret-file "$secret" \
    -f --kernel-cache "$cache" "$@" 2> "$work/$sys.log" &
  fuse_pid[$sys]=$!
  mnt_of[$sys]=$m
  wait_mounted "$m" "$sys"
}

# --- GlusterFS: glusterd, a fresh single-brick volume per system, its FUSE
# mount.
start_glusterd() {
  if gluster --mode=script volume list > /dev/null 2>&1; then
    # A glusterd is running. Ours from an earlier run (its pid file here) is
    # adopted and stopped at the end; someone else's is used and left alone.
    if [ -f "$work/glusterd.pid" ] && [ "$(cat "$work/glusterd.pid")" = "$(pidof -s glusterd)" ]; then
      glusterd_pid=$(cat "$work/glusterd.pid")
      started_glusterd=1
    fi
    return 0
  fi
  /usr/sbin/glusterd -p "$work/glusterd.pid"
  started_glusterd=1
  for _ in $(seq 100); do
    gluster --mode=script volume list > /dev/null 2>&1 && break
    sleep 0.1
  done
  glusterd_pid=$(cat "$work/glusterd.pid")
}

start_gluster() {  # system volume [option value]...
  local sys=$1 v=$2 m=$work/mnt-$1 brick=$data/b-$1
  shift 2
  # REPLICA=3: three bricks (b-SYS-1..3) of a replica 3 volume.
  local bricks=("$(hostname):$brick") replica=()
  if [ "${REPLICA:-1}" = 3 ]; then
    bricks=()
    for i in 1 2 3; do
      rm -rf "$brick-$i"
      mkdir -p "$brick-$i"
      bricks+=("$(hostname):$brick-$i")
    done
    replica=(replica 3)
  fi
  [ -n "$glusterd_pid" ] || start_glusterd
  mkdir -p "$m"
  mountpoint -q "$m" && umount "$m"
  if gluster --mode=script volume info "$v" > /dev/null 2>&1; then
    gluster --mode=script volume stop "$v" force > /dev/null 2>&1 || true
    gluster --mode=script volume delete "$v" > /dev/null
  fi
  # A used brick carries GlusterFS's xattrs and .glusterfs/: start clean.
  rm -rf "$brick"
  mkdir -p "$brick"
  # glusterd refuses 127.0.0.1 and localhost as a brick's host, but takes
  # this host's name (which resolves to a loopback address here); "force"
  # because the brick is not on a dedicated mount of its own.
  gluster --mode=script volume create "$v" "${replica[@]}" "${bricks[@]}" force > /dev/null
  made_volumes+=("$v")
  while [ $# -ge 2 ]; do
    gluster --mode=script volume set "$v" "$1" "$2" > /dev/null
    shift 2
  done
  gluster --mode=script volume start "$v" > /dev/null
  mount -t glusterfs ${gluster_mount_opts:+-o "$gluster_mount_opts"} 127.0.0.1:/"$v" "$m"
  mnt_of[$sys]=$m
  wait_mounted "$m" "$sys"
  fuse_pid[$sys]=$(ps -eo pid=,args= | awk -v m="$m" '$2 ~ /glusterfs$/ && $NF == m {print $1; exit}')
  # The first brick's (a pipe into head would fail the script under
  # pipefail when cat meets the closed pipe).
  local pidfiles=(/var/run/gluster/vols/"$v"/*.pid)
  brick_pid[$sys]=$(cat "${pidfiles[0]}")
}

server_pid_of() {  # system -> the server daemon's pid
  case $1 in
    gluster*) echo "${brick_pid[$1]}" ;;
    sroute-poll|sroute-poll-cache) echo "$poll_server_pid" ;;
    sroute-plain) echo "$plain_server_pid" ;;
    sroute-rep1) echo "$rep1_pid" ;;
    sroute-rep3) echo "${rep_pid[0]}" ;;
    *) echo "$server_pid" ;;
  esac
}

# The file each server holds (for page-cache residency reports).
backing_file() {
  case $1 in
    gluster-rep3) echo "$data/b-$1-1/fio.dat" ;;
    gluster*) echo "$data/b-$1/fio.dat" ;;
    sroute-poll|sroute-poll-cache) echo "$data/s2/fio.dat" ;;
    sroute-plain) echo "$data/s3/fio.dat" ;;
    sroute-rep1) echo "$data/q1/fio.dat" ;;
    sroute-rep3) echo "$data/r1/fio.dat" ;;
    *) echo "$data/s1/fio.dat" ;;
  esac
}

need_sroute=0
need_poll=0
need_plain=0
need_rep=0
for sys in $systems; do
  case $sys in
    sroute-off|sroute-auto|sroute-cache|sroute-uring|sroute-uring-cache) need_sroute=1 ;;
    sroute-uring-tinylfu) need_sroute=1 ;;
    sroute-rule|sroute-trace-1|sroute-trace-10|sroute-trace-100) need_sroute=1 ;;
    sroute-tap-1|sroute-tap-10|sroute-tap-100) need_sroute=1 ;;
    sroute-poll|sroute-poll-cache) need_poll=1 ;;
    sroute-plain) need_plain=1 ;;
    gluster|gluster-rdio|gluster-iocache|gluster-rep3) ;;
    sroute-rep1|sroute-rep3) need_rep=1 ;;
    *) echo "unknown system $sys" >&2; exit 2 ;;
  esac
done
uring_switch_on "$systems"  # on for the run, as it was afterwards
# The servers' files are made anew each session, like GlusterFS's bricks.
if [ "$need_sroute" = 1 ]; then
  start_sroute_server s1 server.out
  server_pid=$started_pid server_addr=$started_addr
  rm -f "$data/s1/fio.dat"
fi
if [ "$need_rep" = 1 ]; then
  # Members of sroute-rep3 (r1..r3) and the single member of sroute-rep1
  # (q1), each a server of its own.
  for i in 0 1 2; do
    start_sroute_server "r$((i + 1))" "rep$i.out"
    rep_pid[$i]=$started_pid rep_addr[$i]=$started_addr
    rm -f "$data/r$((i + 1))/fio.dat"
  done
  start_sroute_server q1 rep1.out
  rep1_pid=$started_pid rep1_addr=$started_addr
  rm -f "$data/q1/fio.dat"
fi
if [ "$need_poll" = 1 ]; then
  start_sroute_server s2 poll-server.out --poll-us "$poll_us"
  poll_server_pid=$started_pid poll_server_addr=$started_addr
  rm -f "$data/s2/fio.dat"
fi
if [ "$need_plain" = 1 ]; then
  start_sroute_server s3 plain-server.out --poll-us 0
  plain_server_pid=$started_pid plain_server_addr=$started_addr
  rm -f "$data/s3/fio.dat"
fi
for sys in $systems; do
  case $sys in
    sroute-off) mount_sroute sroute-off off "$server_addr" ;;
    # The defaults before issue 26: /dev/fuse, no polling on either daemon.
    sroute-plain)
      mount_sroute sroute-plain off "$plain_server_addr" --io-uring=off --poll-us 0 ;;
    sroute-auto) mount_sroute sroute-auto auto "$server_addr" ;;
    sroute-poll) mount_sroute sroute-poll off "$poll_server_addr" --poll-us "$poll_us" ;;
    gluster) start_gluster gluster "$vol" ;;
    gluster-rdio) start_gluster gluster-rdio "${vol}rdio" network.remote-dio enable ;;
    sroute-poll-cache)
      ctl_of[$sys]=$work/ctl-$sys.sock
      mount_sroute sroute-poll-cache off "$poll_server_addr" --poll-us "$poll_us" \
        --control "${ctl_of[$sys]}" --stage "c=cache:partition_bytes=${cache^^}" \
        --rule '<*, r|w, //home/*> -> <IO, stage:c>' ;;
    sroute-cache)
      ctl_of[$sys]=$work/ctl-$sys.sock
      mount_sroute sroute-cache off "$server_addr" --control "${ctl_of[$sys]}" \
        --stage "c=cache:partition_bytes=${cache^^}" \
        --rule '<*, r|w, //home/*> -> <IO, stage:c>' ;;
    sroute-uring) mount_sroute sroute-uring off "$server_addr" --io-uring ;;
    # Tracing overhead (issue 22): every IO through one rule to its own
    # file, without and with trace(P).
    sroute-rule)
      mount_sroute sroute-rule off "$server_addr" \
        --rule '<*, r|w, //home/*> -> <IO, //home/*>' ;;
    sroute-trace-1|sroute-trace-10|sroute-trace-100)
      share=$(awk -v p="${sys#sroute-trace-}" 'BEGIN { printf "%g", p / 100 }')
      mount_sroute "$sys" off "$server_addr" \
        --rule "<*, r|w, //home/*> -> trace($share); <IO, //home/*>" ;;
    # The same with a tap, as sroute-trace installs: the rule as it was,
    # and `pattern -> trace(P)` beside it.
    sroute-tap-1|sroute-tap-10|sroute-tap-100)
      share=$(awk -v p="${sys#sroute-tap-}" 'BEGIN { printf "%g", p / 100 }')
      mount_sroute "$sys" off "$server_addr" \
        --rule '<*, r|w, //home/*> -> <IO, //home/*>' \
        --rule "<*, r|w, //home/*> -> trace($share)" ;;
    sroute-uring-cache|sroute-uring-tinylfu)
      ctl_of[$sys]=$work/ctl-$sys.sock
      admission=none
      [ "$sys" = sroute-uring-tinylfu ] && admission=frequency
      mount_sroute "$sys" off "$server_addr" --io-uring --control "${ctl_of[$sys]}" \
        --stage "c=cache:partition_bytes=${cache^^},admission=$admission" \
        --rule '<*, r|w, //home/*> -> <IO, stage:c>' ;;
    sroute-rep3)
      mkdir -p "$work/state-rep3"
      mount_sroute sroute-rep3 off "${rep_addr[0]}" --state "$work/state-rep3" \
        --endpoint "R1=${rep_addr[0]}" --endpoint "R2=${rep_addr[1]}" \
        --endpoint "R3=${rep_addr[2]}" \
        --stage "rs=replica_set:member=R1,member=R2,member=R3,ack=${REP_ACK:-all},read=${REP_READ:-least_loaded}" \
        --rule '<*, *, //home/*> -> <IO, stage:rs>' ;;
    sroute-rep1)
      mkdir -p "$work/state-rep1"
      mount_sroute sroute-rep1 off "$rep1_addr" --state "$work/state-rep1" \
        --endpoint "R1=$rep1_addr" \
        --stage "rs=replica_set:member=R1,ack=${REP_ACK:-all},read=${REP_READ:-least_loaded}" \
        --rule '<*, *, //home/*> -> <IO, stage:rs>' ;;
    gluster-rep3) REPLICA=3 start_gluster gluster-rep3 "${vol}rep3" ;;
    gluster-iocache)
      gluster_mount_opts=direct-io-mode=enable \
        start_gluster gluster-iocache "${vol}ioc" performance.io-cache on \
        performance.cache-size "${cache^^}B" ;;
  esac
done
echo "# sroute-server ${server_addr:-none} pid ${server_pid:-none}; polling sroute-server ${poll_server_addr:-none} pid ${poll_server_pid:-none}; client pids: $(for s in $systems; do printf '%s=%s ' "$s" "${fuse_pid[$s]}"; done)" >&2

# The benchmark file, written once per server through a mount (GlusterFS
# keeps its own metadata for files, so it must be written through the
# volume); then read once through each mount to warm the servers' caches
# and connections.
for sys in $systems; do
  f=${mnt_of[$sys]}/fio.dat
  if [ ! -f "$(backing_file "$sys")" ]; then
    fio --name=prep --filename="$f" --size="$size" --rw=write --bs=1m \
      --ioengine=psync --direct=1 > /dev/null
  fi
  dd if="$f" of=/dev/null bs=1M iflag=direct status=none
done
# The servers write the files' pages back now, not during the timed runs.
sync

ticks() {  # pid -> utime+stime in clock ticks (0 if gone)
  awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0
}

resident() { fincore -n -o RES "$(backing_file "$1")" | tr -d ' '; }

# A cache system's counters summed over its partitions: "hits misses".
cache_counters() {  # system
  "$work/bin/sroutectl" --host "unix:${ctl_of[$1]}" stages ls --json |
    python3 -c '
import json, sys
hits = misses = 0
for host in json.load(sys.stdin).get("hosts", []):
  for st in host.get("stages", []):
    for k, v in st.get("counters", {}).items():
      if k.endswith(".hits"):
        hits += int(v)
      elif k.endswith(".misses") or k.endswith(".partial_hits"):
        misses += int(v)
print(hits, misses)'
}

run_fio() {  # system workload -> "iops mbps p50_us p99_us cpu_client cpu_server hit_ratio"
  local sys=$1 wl=$2 rw bs jobs cpid spid c0 s0 c1 s1 t0 t1 perf_pid="" hits_pid=""
  fio_workload "$wl"
  cpid=${fuse_pid[$sys]}
  spid=$(server_pid_of "$sys")
  if [ -n "${ctl_of[$sys]:-}" ]; then
    # The counters once the warm-up is over (the timed part's start).
    (sleep "$warmup"; cache_counters "$sys" > "$work/hits0") &
    hits_pid=$!
  fi
  if [[ " $perf_workloads " == *" $wl "* ]]; then
    # Starts after the warm-up, lasts the timed part.
    (sleep "$warmup"; exec perf record -q -g -o "$work/perf-$sys-$wl.data" \
      -p "$cpid,$spid" -- sleep "$runtime") > /dev/null 2>&1 &
    perf_pid=$!
  fi
  c0=$(ticks "$cpid"); s0=$(ticks "$spid"); t0=$(date +%s.%N)
  fio --name="$wl" --filename="${mnt_of[$sys]}/fio.dat" --size="$size" \
    --rw="$rw" --bs="$bs" --numjobs="$jobs" --ioengine=psync --iodepth=1 \
    --random_distribution="$dist" --direct="$direct" --time_based --ramp_time="$warmup" --runtime="$runtime" \
    --group_reporting --output-format=json > "$work/out.json" 2> "$work/fio.err" \
    || { echo "fio failed on $sys $wl: $(tail -2 "$work/fio.err")" >&2; exit 1; }
  c1=$(ticks "$cpid"); s1=$(ticks "$spid"); t1=$(date +%s.%N)
  [ -n "$perf_pid" ] && wait "$perf_pid"
  local hit_ratio=-1
  if [ -n "$hits_pid" ]; then
    wait "$hits_pid"
    hit_ratio=$(python3 -c "
h0, m0 = map(int, open('$work/hits0').read().split())
h1, m1 = map(int, '$(cache_counters "$sys")'.split())
print(f'{(h1 - h0) / max(1, h1 - h0 + m1 - m0):.4f}')")
  fi
  # CPU is averaged over the whole fio run (warm-up included): % of one CPU.
  echo "$(fio_figures "$work/out.json") $(python3 -c "
hz, t0, t1, c0, c1, s0, s1 = $hz, $t0, $t1, $c0, $c1, $s0, $s1
wall = t1 - t0
print(f'{(c1 - c0) / hz / wall * 100:.0f} {(s1 - s0) / hz / wall * 100:.0f}')") $hit_ratio"
}

: > "$results"
nsys=$(wc -w <<< "$systems")
for round in $(seq "$rounds"); do
  # Rotate which system goes first, so none always runs right after another.
  read -ra order <<< "$systems"
  shift_by=$(( (round - 1) % nsys ))
  order=("${order[@]:$shift_by}" "${order[@]:0:$shift_by}")
  for wl in $workloads; do
    for sys in "${order[@]}"; do
      echo "# $round $wl $sys: load $(cut -d' ' -f1 /proc/loadavg), server's page cache holds $(resident "$sys") of $size" >&2
      line=$(run_fio "$sys" "$wl")
      echo "$round $sys $wl $line" >> "$results"
      tail -1 "$results" >&2
    done
  done
done
echo "# done $(date -Is), load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$work/header.txt" >&2

python3 - "$results" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r, s, wl, *vals = line.split()
    rows[(wl, s)].append([float(v) for v in vals])
med = {k: [statistics.median(x) for x in zip(*v)] for k, v in rows.items()}
print(f'{"workload":15} {"system":12} {"IOPS":>8} {"MB/s":>8} {"p50us":>7} {"p99us":>7} '
      f'{"cpu%cli":>7} {"cpu%srv":>7} {"rounds":>6} {"hits":>6}')
for (wl, s), m in sorted(med.items()):
    hits = f'{m[6]:6.3f}' if len(m) > 6 and m[6] >= 0 else f'{"-":>6}'
    print(f'{wl:15} {s:12} {m[0]:8.0f} {m[1]:8.1f} {m[2]:7.1f} {m[3]:7.1f} '
          f'{m[4]:7.0f} {m[5]:7.0f} {len(rows[(wl, s)]):6} {hits}')

# Issue 4's targets, as ratios of medians from this run: sroute's 4 KiB
# random IOPS at least 2x GlusterFS's (default configuration), and its p99
# lower. Against gluster-rdio (not the default) the ratios are information.
print()
print(f'{"target":22} {"workload":15} {"system":11} {"peer":12} {"sroute":>9} {"peer":>9} {"ratio":>6}')
for peer in ["gluster", "gluster-rdio"]:
    for wl in ["randread4k-1", "randread4k-4", "randwrite4k-1", "randwrite4k-4"]:
        g = med.get((wl, peer))
        for s in ["sroute-off", "sroute-auto", "sroute-poll", "sroute-plain"]:
            m = med.get((wl, s))
            if not g or not m:
                continue
            r = m[0] / g[0]
            v = ("met" if r >= 2 else "MISSED") if peer == "gluster" else "(info)"
            print(f'{"IOPS >= 2x":22} {wl:15} {s:11} {peer:12} {m[0]:9.0f} {g[0]:9.0f} {r:6.2f}  {v}')
            r = m[3] / g[3]
            v = ("met" if r < 1 else "MISSED") if peer == "gluster" else "(info)"
            print(f'{"p99 lower (us)":22} {wl:15} {s:11} {peer:12} {m[3]:9.1f} {g[3]:9.1f} {r:6.2f}  {v}')
    for wl in ["zipfread4k-1", "zipfread4k-4"]:
        g = med.get((wl, "gluster-iocache"))
        c = med.get((wl, "sroute-cache"))
        o = med.get((wl, "sroute-off"))
        if peer == "gluster" and c and o:
            r = c[0] / o[0]
            print(f'{"cache IOPS >= 3x":22} {wl:15} {"sroute-cache":11} {"sroute-off":12} {c[0]:9.0f} {o[0]:9.0f} {r:6.2f}  {"met" if r >= 3 else "MISSED"}')
        uc = med.get((wl, "sroute-uring-cache"))
        uo = med.get((wl, "sroute-uring"))
        if peer == "gluster" and uc and uo:
            r = uc[0] / uo[0]
            print(f'{"cache IOPS >= 3x":22} {wl:15} {"s-uring-cache":11} {"sroute-uring":12} {uc[0]:9.0f} {uo[0]:9.0f} {r:6.2f}  {"met" if r >= 3 else "MISSED"}')
        ut = med.get((wl, "sroute-uring-tinylfu"))
        if peer == "gluster" and ut and uo:
            r = ut[0] / uo[0]
            print(f'{"cache IOPS (tinylfu)":22} {wl:15} {"s-uring-tlfu":11} {"sroute-uring":12} {ut[0]:9.0f} {uo[0]:9.0f} {r:6.2f}  (info)')
        pc = med.get((wl, "sroute-poll-cache"))
        po = med.get((wl, "sroute-poll"))
        if peer == "gluster" and pc and po:
            r = pc[0] / po[0]
            print(f'{"cache IOPS >= 3x":22} {wl:15} {"s-poll-cache":11} {"sroute-poll":12} {pc[0]:9.0f} {po[0]:9.0f} {r:6.2f}  {"met" if r >= 3 else "MISSED"}')
        if peer == "gluster" and c and g:
            r = c[0] / g[0]
            print(f'{"cache IOPS > io-cache":22} {wl:15} {"sroute-cache":11} {"gl-iocache":12} {c[0]:9.0f} {g[0]:9.0f} {r:6.2f}  {"met" if r > 1 else "MISSED"}')
    for wl in ["randread4k-1", "randread4k-4"]:
        b = med.get((wl, "sroute-rule"))
        for s in ["sroute-trace-1", "sroute-trace-10", "sroute-trace-100",
                  "sroute-tap-1", "sroute-tap-10", "sroute-tap-100"]:
            m = med.get((wl, s))
            if peer == "gluster" and b and m:
                limit = 0.95 if s.endswith("-100") else 0.99
                r = m[0] / b[0]
                print(f'{"trace IOPS kept":22} {wl:15} {s:11} {"sroute-rule":12} {m[0]:9.0f} {b[0]:9.0f} {r:6.3f}  {"met" if r >= limit else "MISSED"}')
                print(f'{"trace p99 (us)":22} {wl:15} {s:11} {"sroute-rule":12} {m[3]:9.1f} {b[3]:9.1f} {m[3]/b[3]:6.3f}')
    # Issue 23: replica sets.
    r3 = med.get(("randread4k-4", "sroute-rep3"))
    r1 = med.get(("randread4k-4", "sroute-rep1"))
    if peer == "gluster" and r3 and r1:
        r = r3[0] / r1[0]
        print(f'{"3 members >= 2.5x 1":22} {"randread4k-4":15} {"sroute-rep3":11} {"sroute-rep1":12} {r3[0]:9.0f} {r1[0]:9.0f} {r:6.2f}  {"met" if r >= 2.5 else "MISSED"}')
    for wl in ["randwrite4k-1", "randwrite4k-4"]:
        m = med.get((wl, "sroute-rep3"))
        g = med.get((wl, "gluster-rep3"))
        if peer == "gluster" and m and g:
            r = m[0] / g[0]
            print(f'{"rep3 IOPS >= 2x AFR":22} {wl:15} {"sroute-rep3":11} {"gluster-rep3":12} {m[0]:9.0f} {g[0]:9.0f} {r:6.2f}  {"met" if r >= 2 else "MISSED"}')
            r = m[3] / g[3]
            print(f'{"rep3 p99 lower (us)":22} {wl:15} {"sroute-rep3":11} {"gluster-rep3":12} {m[3]:9.1f} {g[3]:9.1f} {r:6.2f}  {"met" if r < 1 else "MISSED"}')
    for wl in ["seqread128k-1", "seqwrite128k-1"]:
        g = med.get((wl, peer))
        for s in ["sroute-off", "sroute-auto", "sroute-poll"]:
            m = med.get((wl, s))
            if g and m:
                print(f'{"MB/s (no target)":22} {wl:15} {s:11} {peer:12} {m[1]:9.1f} {g[1]:9.1f} {m[1]/g[1]:6.2f}')
PY
