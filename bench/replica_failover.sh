#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Replica failover benchmark (issue 23): the time from a replica member's
# SIGKILL to the first successful read after it, through an sroute-fuse
# volume whose IO goes through a replica_set stage of three sroute-servers
# (sroute-rep3) and through a GlusterFS replica 3 volume (AFR) of three
# bricks on this host mounted with its FUSE client (gluster-rep3), in
# GlusterFS's default configuration (network.ping-timeout stays at its
# default, 42 s).
#
#  - sroute-rep3: three sroute-servers on loopback (R1, R2, R3; roots are
#    plain directories WORK/data/r1..r3 on the file system that holds WORK,
#    not a loop file system of their own), one sroute-fuse mount with
#    --kernel-cache off and a control socket whose every IO goes through the
#    stage `rs=replica_set:member=R1,member=R2,member=R3,read=primary,
#    probe_ms=100`: R1 is the primary and serves every read, so R1 is the
#    member killed.
#  - gluster-rep3: a replica 3 volume of three bricks (WORK/data/b1..b3, the
#    same file system), mounted with direct-io-mode=enable so that reads
#    reach the bricks. AFR reads a file from one brick; the one killed is
#    the busiest of the three glusterfsd processes (CPU time from
#    /proc/PID/stat over 0.5 s of reading).
#
# A 16 MiB file is written through each mount once. A trial: a python3
# reader opens the file O_DIRECT (4 KiB-aligned buffer) and issues 4 KiB
# preads at random aligned offsets, one at a time, in a loop. After 1 s (for
# GlusterFS plus the 0.5 s of sampling) it records t0 = time.monotonic() and
# sends SIGKILL to the member (os.kill, what `kill -9 PID` does), waits on a
# pidfd until the member has died, and takes t1 = the completion time of the
# first read that completes successfully after the member died (a read in
# flight at the kill counts when it completes). The failover time is
# t1 - t0; a trial without a good read within 120 s (TIMEOUT) counts as
# >= 120 s. A failed read is counted (with its errno), and the reader tries
# again 1 ms later. After each trial the member is started again on the same
# port and root (sroute: the same sroute-server command; GlusterFS: `gluster
# volume start VOL force`) and the next trial waits until it is back and
# current: for sroute, `sroutectl replicas status rs --json` shows every
# member "current" and R1 serves reads again; for GlusterFS, every brick is
# online, `gluster volume heal VOL info` shows every brick connected with 0
# entries, and the FUSE client is connected to every brick's port again.
# (The check that R1 serves reads again needs a sroutectl whose JSON has the
# members' "reads"; with an older one only the states are checked.)
#
# What t1 - t0 includes: the kernel's tear-down of the killed process (a few
# ms here; the reader prints it as "dead after"), since a read completing
# before the member has died may have been served by it. A SIGKILL on this
# host closes the member's TCP connections at once, so the clients see the
# loss at once; network.ping-timeout only matters for a peer that goes
# silent (a host crash or a partition), which this benchmark does not make.
#
# The script prints one line per trial and at the end a table per system:
# trials, p50 and max failover time in ms, read errors; then the ratio
# gluster-rep3 p50 / sroute-rep3 p50.
#
#   sudo bench/replica_failover.sh                 # 20 trials per system
#   TRIALS=2 bench/replica_failover.sh             # a quick look
#   SIGNAL=STOP TRIALS=5 bench/replica_failover.sh # a member that hangs
#   SIGNAL=STOP REP_READ=hedged SYSTEMS=sroute-rep3 bench/replica_failover.sh
#
# SIGNAL=STOP (default KILL) freezes the member instead (a hung server, or
# one behind a partition: no connection is closed); it is let go (SIGCONT)
# after the trial. Then sroute fails reads over once the member misses the
# host's --remote-timeout-ms (10 s by default), or at once with
# REP_READ=hedged; GlusterFS once network.ping-timeout (42 s) ends.
# REP_READ: sroute's read policy (primary).
#   BUILD=build-gl SYSTEMS=sroute-rep3 bench/replica_failover.sh
#
# Env knobs:
#   TRIALS (20), SYSTEMS ("sroute-rep3 gluster-rep3"), TIMEOUT (120 s: a
#   trial's limit), READY_TIMEOUT (300 s: how long a restarted member may
#   take to be back and current), WORK (/tmp/sroute-failover-bench: roots,
#   bricks, mounts, logs, results), BUILD (build: the sroute build directory;
#   or SROUTE_FUSE=PATH SROUTE_SERVER=PATH SROUTECTL=PATH), GLUSTER_VOLUME
#   (gvfailover).
#
# Needs root, glusterfs-server and glusterfs-client
# (scripts/install-bench-deps.sh), python3 (3.9 or later: os.pidfd_open),
# ss (iproute2) and a built sroute (sroute-fuse, sroute-server, sroutectl).
# It is idempotent: a GlusterFS volume of the same name left from an earlier
# run is stopped, deleted and made again on fresh bricks, and everything the
# script started (mounts, daemons, glusterd, the volume) is stopped at the
# end, also when it fails. A glusterd that was running before (not started
# by this script) is used and left running.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
work=${WORK:-/tmp/sroute-failover-bench}
trials=${TRIALS:-20}
systems=${SYSTEMS:-"sroute-rep3 gluster-rep3"}
timeout_s=${TIMEOUT:-120}
signal=${SIGNAL:-KILL}
rep_read=${REP_READ:-primary}
case $signal in KILL|STOP) ;; *) echo "SIGNAL: KILL or STOP, not $signal" >&2; exit 2 ;; esac
ready_timeout=${READY_TIMEOUT:-300}
build=${BUILD:-build}
case $build in /*) ;; *) build=$top/$build ;; esac
sroute_fuse=${SROUTE_FUSE:-$build/fuse/sroute-fuse}
sroute_server=${SROUTE_SERVER:-$build/server/sroute-server}
sroutectl=${SROUTECTL:-$build/tools/sroutectl/sroutectl}
vol=${GLUSTER_VOLUME:-gvfailover}
file_name=failover.dat

for sys in $systems; do
  case $sys in
    sroute-rep3|gluster-rep3) ;;
    *) echo "unknown system $sys" >&2; exit 2 ;;
  esac
done

data=$work/data
mkdir -p "$data" "$work/bin"
results=$work/results.txt

# What the figures depend on, printed first (and kept with the results).
{
  echo "# $(date -Is) $(uname -r), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# sroute $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?'), $(glusterfsd --version 2>/dev/null | sed -n 1p)"
  echo "# TRIALS=$trials SYSTEMS=\"$systems\" TIMEOUT=$timeout_s SIGNAL=$signal REP_READ=$rep_read"
} | tee "$work/header.txt" >&2

# Copies of the binaries, so that a rebuild during the run changes nothing.
cp "$sroute_fuse" "$work/bin/sroute-fuse"
cp "$sroute_server" "$work/bin/sroute-server"
cp "$sroutectl" "$work/bin/sroutectl"

# State of what this run started, for cleanup.
made_volumes=()
started_glusterd=0
glusterd_pid=""
reader_pid=""
declare -a rep_pid=() rep_addr=() rep_port=()
declare -A fuse_pid=()    # system -> client daemon pid
declare -A mnt_of=()      # system -> mount point

cleanup() {
  set +e
  [ -n "$reader_pid" ] && { kill -KILL "$reader_pid" 2>/dev/null; wait "$reader_pid" 2>/dev/null; }
  for sys in "${!mnt_of[@]}"; do
    local m=${mnt_of[$sys]}
    if [[ $sys == gluster* ]]; then
      mountpoint -q "$m" && { umount "$m" || umount -l "$m"; }
    else
      mountpoint -q "$m" && { fusermount3 -u "$m" || umount -l "$m"; }
      [ -n "${fuse_pid[$sys]:-}" ] && wait "${fuse_pid[$sys]}" 2>/dev/null
    fi
  done
  for pid in "${rep_pid[@]}"; do
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  # volume stop also stops the brick daemons.
  for v in "${made_volumes[@]}"; do
    gluster --mode=script volume stop "$v" force > /dev/null 2>&1
    gluster --mode=script volume delete "$v" > /dev/null 2>&1
  done
  if [ "$started_glusterd" = 1 ]; then
    kill -TERM "$glusterd_pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$glusterd_pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$work/glusterd.pid"
  fi
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

# The reader of a trial (see the header). Arguments: file, timeout (s),
# warm-up (s), sampling (s), then the candidate pids; it kills the busiest
# (the only one if there is one). Prints "pid failover_ms dead_ms errors
# reads timed_out errnos".
cat > "$work/reader.py" <<'PY'
import errno, mmap, os, random, select, signal, sys, threading, time

path, timeout, warm, sample = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
pids = [int(p) for p in sys.argv[5:]]
BS = 4096
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
nblocks = os.fstat(fd).st_size // BS
buf = mmap.mmap(-1, BS)  # page-aligned, as O_DIRECT wants
lock = threading.Lock()
stop = os.environ.get("FAILOVER_SIGNAL", "KILL") == "STOP"
st = {"t0": None, "dead": None, "good": [], "errors": 0, "reads": 0, "errnos": {}}
done = threading.Event()

def reader():
    rnd = random.Random()
    while True:
        off = rnd.randrange(nblocks) * BS
        started = time.monotonic()
        err = None
        try:
            if os.preadv(fd, [buf], off) != BS:
                err = "short"
        except OSError as e:
            err = errno.errorcode.get(e.errno, str(e.errno))
        t = time.monotonic()
        with lock:
            if err is None:
                st["reads"] += 1
                # A stopped member may still answer what it served before it
                # stopped: only reads issued after that count.
                if st["t0"] is not None and t >= st["t0"] and (
                        not stop or (st["dead"] is not None and started >= st["dead"])):
                    st["good"].append(t)
                    if st["dead"] is not None and t >= st["dead"]:
                        done.set()
                        return
            else:
                st["errors"] += 1
                st["errnos"][err] = st["errnos"].get(err, 0) + 1
        if err is not None:
            time.sleep(0.001)

def ticks(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except OSError:
        return 0

threading.Thread(target=reader, daemon=True).start()
time.sleep(warm)
victim = pids[0]
if len(pids) > 1:
    before = [ticks(p) for p in pids]
    time.sleep(sample)
    used = [ticks(p) - b for p, b in zip(pids, before)]
    victim = pids[used.index(max(used))]
    print(f"# CPU ticks of {pids} over {sample} s: {used}", file=sys.stderr)
pidfd = os.pidfd_open(victim)
with lock:
    t0 = time.monotonic()
    st["t0"] = t0
os.kill(victim, signal.SIGSTOP if stop else signal.SIGKILL)
if not stop:
    # The member is gone when its pidfd turns readable (it has exited).
    select.select([pidfd], [], [], timeout)
else:
    # Stopped once its state says so (every thread: the group stop).
    while open(f"/proc/{victim}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
        time.sleep(0.0001)
# A stopped member answers nothing from now on.
dead = time.monotonic()
with lock:
    st["dead"] = dead
    if any(t >= dead for t in st["good"]):
        done.set()
ok = done.wait(max(0.0, t0 + timeout - time.monotonic()))
with lock:
    good = [t for t in st["good"] if t >= dead]
    ms = (min(good) - t0) * 1000 if ok and good else timeout * 1000
    errs = ",".join(f"{k}:{v}" for k, v in sorted(st["errnos"].items())) or "-"
    print(f"{victim} {ms:.3f} {(dead - t0) * 1000:.3f} {st['errors']} {st['reads']} "
          f"{0 if ok else 1} {errs}", flush=True)
# A read may still hang in the mount: leave without waiting for it.
os._exit(0)
PY

run_reader() {  # file candidate-pid... -> WORK/reader.out, the reader's line
  local f=$1 sample=0
  shift
  [ $# -gt 1 ] && sample=0.5
  # In the background so that a signal's trap runs at once (cleanup kills it).
  FAILOVER_SIGNAL=$signal python3 "$work/reader.py" "$f" "$timeout_s" 1 "$sample" "$@" > "$work/reader.out" 2> "$work/reader.err" &
  reader_pid=$!
  wait "$reader_pid" || { echo "the reader failed: $(tail -3 "$work/reader.err")" >&2; exit 1; }
  reader_pid=""
  grep '^#' "$work/reader.err" >&2 || true
}

# --- sroute: three members and one mount.
start_member() {  # index port -> rep_pid[index], rep_addr[index], rep_port[index]
  local i=$1 port=$2 root=$data/r$(( $1 + 1 )) out=$work/r$(( $1 + 1 )).out addr=""
  mkdir -p "$root"
  # A restarted member takes its old port; if that is not free yet, again.
  for _ in $(seq 50); do
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

ctl_sock=$work/rep3.sock

# "STATE1 STATE2 STATE3 R1_READS" of the replica set (nothing if sroutectl
# fails; R1_READS "-" if this sroutectl does not report members' reads).
rs_status() {
  local json
  json=$("$work/bin/sroutectl" --host "unix:$ctl_sock" replicas status rs --json 2>/dev/null) || return 0
  python3 -c '
import json, sys
m = json.loads(sys.argv[1])["sets"][0]["members"]
print(" ".join(x["state"] for x in m), m[0].get("reads", "-"))' "$json"
}

# Waits until every member is current and R1 (the primary) serves reads
# again; prints the seconds it took.
wait_sroute_current() {
  local start now st reads0 f=${mnt_of[sroute-rep3]}/$file_name
  start=$(date +%s.%N)
  while :; do
    st=$(rs_status)
    if [[ $st == "current current current "* ]]; then
      reads0=${st##* }
      dd if="$f" of=/dev/null bs=4k count=8 iflag=direct status=none 2>/dev/null || true
      st=$(rs_status)
      if [[ $st == "current current current "* ]] &&
        { [ "$reads0" = - ] || [ "${st##* }" -gt "$reads0" ]; }; then
        now=$(date +%s.%N)
        python3 -c "print(f'{$now - $start:.1f}')"
        return 0
      fi
    fi
    now=$(date +%s.%N)
    if python3 -c "import sys; sys.exit(0 if $now - $start > $ready_timeout else 1)"; then
      echo "sroute-rep3: the members were not all current after ${ready_timeout} s: ${st:-no status}" >&2
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
  local m=$work/mnt-sroute-rep3 state=$work/state-rep3
  mkdir -p "$m"
  mountpoint -q "$m" && { fusermount3 -u "$m" || umount -l "$m"; }
  rm -rf "$state"
  mkdir -p "$state"
  rm -f "$ctl_sock"
  "$work/bin/sroute-fuse" "$m" --backing "${rep_addr[0]}" --secret-file "$secret" \
    -f --kernel-cache off --state "$state" --control "$ctl_sock" \
    --endpoint "R1=${rep_addr[0]}" --endpoint "R2=${rep_addr[1]}" \
    --endpoint "R3=${rep_addr[2]}" \
    --stage "rs=replica_set:member=R1,member=R2,member=R3,read=$rep_read,probe_ms=100" \
    --rule '<*, *, //home/*> -> <IO, stage:rs>' 2> "$work/sroute-rep3.log" &
  fuse_pid[sroute-rep3]=$!
  mnt_of[sroute-rep3]=$m
  wait_mounted "$m" sroute-rep3
  echo "# sroute-rep3: R1 ${rep_addr[0]} pid ${rep_pid[0]}, R2 ${rep_addr[1]} pid ${rep_pid[1]}, R3 ${rep_addr[2]} pid ${rep_pid[2]}; sroute-fuse pid ${fuse_pid[sroute-rep3]}" >&2
}

trial_sroute() {  # trial -> a line of results
  local n=$1 victim ms dead_ms errs reads timed_out errnos ready
  # Out of bash's job table: no "Killed" notice when it dies (bash still
  # reaps it).
  disown "${rep_pid[0]}" 2>/dev/null || true  # (a stopped one was already)
  run_reader "${mnt_of[sroute-rep3]}/$file_name" "${rep_pid[0]}"
  read -r victim ms dead_ms errs reads timed_out errnos < "$work/reader.out"
  if [ "$signal" = STOP ]; then
    kill -CONT "$victim"
  else
    # Start it again on its port.
    start_member 0 "${rep_port[0]}"
  fi
  ready=$(wait_sroute_current)
  echo "sroute-rep3 trial $n: killed R1 (pid $victim, dead after $dead_ms ms); first good read after $ms ms$([ "$timed_out" = 1 ] && echo " (none: >= $timeout_s s)"); $errs read errors ($errnos) in $reads reads; all current again after $ready s" >&2
  echo "sroute-rep3 $n $ms $timed_out $errs" >> "$results"
}

# --- GlusterFS: glusterd, a fresh replica 3 volume, its FUSE mount.
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

# "PORT ONLINE PID" of each brick of the volume, from `volume status --xml`
# (nothing if glusterd does not answer).
brick_status() {
  local xml
  xml=$(gluster --mode=script volume status "$vol" --xml 2>/dev/null) || return 0
  python3 -c '
import sys, xml.etree.ElementTree as ET
for n in ET.fromstring(sys.argv[1]).iter("node"):
    if (n.findtext("path") or "").startswith("/"):
        print(n.findtext("port"), n.findtext("status"), n.findtext("pid"))' "$xml" 2>/dev/null || true
}

brick_pids() {
  local port online pid pids=()
  while read -r port online pid; do
    [ "$online" = 1 ] && pids+=("$pid")
  done <<< "$(brick_status)"
  echo "${pids[*]}"
}

# Succeeds when every brick is online, heal info shows every brick connected
# with 0 entries, and the FUSE client is connected to every brick's port.
gluster_current() {
  local bricks port online pid heal conns n=0
  bricks=$(brick_status)
  [ "$(grep -c ' 1 ' <<< "$bricks")" = 3 ] || return 1
  heal=$(timeout 30 gluster --mode=script volume heal "$vol" info 2>/dev/null) || return 1
  [ "$(grep -c '^Status: Connected' <<< "$heal")" = 3 ] || return 1
  [ "$(grep -c '^Number of entries: 0$' <<< "$heal")" = 3 ] || return 1
  conns=$(ss -Htnp state established)
  while read -r port online pid; do
    awk -v p=":$port" -v c="pid=${fuse_pid[gluster-rep3]}," \
      'substr($4, length($4) - length(p) + 1) == p && index($0, c) { f = 1 } END { exit !f }' \
      <<< "$conns" && n=$(( n + 1 ))
  done <<< "$bricks"
  [ "$n" = 3 ]
}

wait_gluster_current() {  # -> the seconds it took
  local start now
  start=$(date +%s.%N)
  while ! gluster_current; do
    now=$(date +%s.%N)
    if python3 -c "import sys; sys.exit(0 if $now - $start > $ready_timeout else 1)"; then
      echo "gluster-rep3: not all bricks back and healed after ${ready_timeout} s: $(brick_status | tr '\n' ';')" >&2
      exit 1
    fi
    sleep 0.2
  done
  now=$(date +%s.%N)
  python3 -c "print(f'{$now - $start:.1f}')"
}

setup_gluster() {
  local m=$work/mnt-gluster-rep3 bricks=() i
  [ -n "$glusterd_pid" ] || start_glusterd
  mkdir -p "$m"
  mountpoint -q "$m" && umount "$m"
  if gluster --mode=script volume info "$vol" > /dev/null 2>&1; then
    gluster --mode=script volume stop "$vol" force > /dev/null 2>&1 || true
    gluster --mode=script volume delete "$vol" > /dev/null
  fi
  # A used brick carries GlusterFS's xattrs and .glusterfs/: start clean.
  for i in 1 2 3; do
    rm -rf "$data/b$i"
    mkdir -p "$data/b$i"
    bricks+=("$(hostname):$data/b$i")
  done
  # glusterd refuses 127.0.0.1 and localhost as a brick's host, but takes
  # this host's name (which resolves to a loopback address here); "force"
  # because the bricks are not on dedicated mounts of their own.
  gluster --mode=script volume create "$vol" replica 3 "${bricks[@]}" force > /dev/null
  made_volumes+=("$vol")
  gluster --mode=script volume start "$vol" > /dev/null
  mount -t glusterfs -o direct-io-mode=enable 127.0.0.1:/"$vol" "$m"
  mnt_of[gluster-rep3]=$m
  wait_mounted "$m" gluster-rep3
  fuse_pid[gluster-rep3]=$(ps -eo pid=,args= | awk -v m="$m" '$2 ~ /glusterfs$/ && $NF == m {print $1; exit}')
  echo "# gluster-rep3: volume $vol, bricks (port online pid): $(brick_status | tr '\n' ';') network.ping-timeout $(gluster --mode=script volume get "$vol" network.ping-timeout | awk '$1 == "network.ping-timeout" {print $2}'); glusterfs client pid ${fuse_pid[gluster-rep3]}" >&2
}

# Starts the killed brick again. glusterd takes a brick whose pid file names
# a process that is still there (a zombie not reaped yet) for running and
# does not start it: wait until the process is gone, and start again if the
# brick is not online soon after.
restart_brick() {  # killed-pid
  local _i pids
  for _i in $(seq 300); do [ -e "/proc/$1" ] || break; sleep 0.1; done
  for _i in $(seq 10); do
    gluster --mode=script volume start "$vol" force > /dev/null
    for _ in $(seq 50); do
      # Three online, none of them the killed one.
      pids=$(brick_pids)
      [ "$(wc -w <<< "$pids")" = 3 ] && [[ " $pids " != *" $1 "* ]] && return 0
      sleep 0.1
    done
  done
  echo "gluster-rep3: the killed brick did not start again: $(brick_status | tr '\n' ';')" >&2
  exit 1
}

trial_gluster() {  # trial -> a line of results
  local n=$1 victim ms dead_ms errs reads timed_out errnos ready pids
  pids=$(brick_pids)
  [ "$(wc -w <<< "$pids")" = 3 ] || { echo "gluster-rep3: bricks not all online: $pids" >&2; exit 1; }
  # shellcheck disable=SC2086  # three pids
  run_reader "${mnt_of[gluster-rep3]}/$file_name" $pids
  read -r victim ms dead_ms errs reads timed_out errnos < "$work/reader.out"
  if [ "$signal" = STOP ]; then
    kill -CONT "$victim"
  else
    restart_brick "$victim"
  fi
  ready=$(wait_gluster_current)
  echo "gluster-rep3 trial $n: killed brick pid $victim (dead after $dead_ms ms); first good read after $ms ms$([ "$timed_out" = 1 ] && echo " (none: >= $timeout_s s)"); $errs read errors ($errnos) in $reads reads; back and healed after $ready s" >&2
  echo "gluster-rep3 $n $ms $timed_out $errs" >> "$results"
}

# Set-up: every system, its file written through its mount, all current.
for sys in $systems; do
  case $sys in
    sroute-rep3) setup_sroute ;;
    gluster-rep3) setup_gluster ;;
  esac
  f=${mnt_of[$sys]}/$file_name
  dd if=/dev/urandom of="$f" bs=1M count=16 oflag=direct conv=fsync status=none
  dd if="$f" of=/dev/null bs=1M iflag=direct status=none
  case $sys in
    sroute-rep3) ready=$(wait_sroute_current) ;;
    gluster-rep3) ready=$(wait_gluster_current) ;;
  esac
  echo "# $sys: file written; all members current after $ready s" >&2
done

: > "$results"
for sys in $systems; do
  for n in $(seq "$trials"); do
    case $sys in
      sroute-rep3) trial_sroute "$n" ;;
      gluster-rep3) trial_gluster "$n" ;;
    esac
  done
done
echo "# done $(date -Is), load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$work/header.txt" >&2

python3 - "$results" "$timeout_s" <<'PY'
import collections, statistics, sys
limit = float(sys.argv[2]) * 1000
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    s, n, ms, timed_out, errs = line.split()
    rows[s].append((float(ms), int(timed_out), int(errs)))

def fmt(v):
    return f">={limit:.0f}" if v >= limit else f"{v:.1f}"

p50 = {}
print(f'{"system":14} {"trials":>6} {"p50 ms":>10} {"max ms":>10} {"read errors":>11}')
for s in ["sroute-rep3", "gluster-rep3"]:
    if s not in rows:
        continue
    ms = [r[0] for r in rows[s]]
    p50[s] = statistics.median(ms)
    print(f'{s:14} {len(ms):6} {fmt(p50[s]):>10} {fmt(max(ms)):>10} {sum(r[2] for r in rows[s]):11}')
if "sroute-rep3" in p50 and "gluster-rep3" in p50:
    g, r = p50["gluster-rep3"], p50["sroute-rep3"]
    ratio = f"{g / r:.2f}" if r > 0 else "inf"
    print(f'\ngluster-rep3 p50 / sroute-rep3 p50: {fmt(g)} / {fmt(r)} ms = {ratio}'
          f'{" (a lower bound: gluster timed out)" if g >= limit else ""}')
PY
