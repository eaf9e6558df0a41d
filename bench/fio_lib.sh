# SPDX-License-Identifier: Apache-2.0
# Shared by bench/fuse_fio.sh and bench/server_fio.sh (sourced).

# fio_workload WORKLOAD: sets rw, bs, jobs, dist and direct for one of the benchmarks'
# workload names (a "-cold" suffix is the caller's business).
fio_workload() {
  # dist: fio's --random_distribution; direct: fio's --direct (the Zipf
  # workloads leave it to the mounts to bypass the kernel's page cache, so
  # that a daemon's own cache, which O_DIRECT turns off in GlusterFS's
  # io-cache, can act).
  dist=random direct=1
  case $1 in
    zipfread4k-1) rw=randread bs=4k jobs=1 dist=zipf:0.99 direct=0 ;;
    zipfread4k-4) rw=randread bs=4k jobs=4 dist=zipf:0.99 direct=0 ;;
    randread4k-1) rw=randread bs=4k jobs=1 ;;
    randread4k-4) rw=randread bs=4k jobs=4 ;;
    randwrite4k-1) rw=randwrite bs=4k jobs=1 ;;
    randwrite4k-4) rw=randwrite bs=4k jobs=4 ;;
    seqread128k-1) rw=read bs=128k jobs=1 ;;
    seqwrite128k-1) rw=write bs=128k jobs=1 ;;
    *) echo "unknown workload $1" >&2; exit 2 ;;
  esac
}

# fio_figures JSON: "iops mbps p50_us p99_us" of the read or write side
# (whichever did IO) of fio's --output-format=json --group_reporting output.
fio_figures() {
  python3 - "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
d = j["read"] if j["read"]["io_bytes"] > 0 else j["write"]
pct = d["clat_ns"].get("percentile", {})
print(f'{d["iops"]:.0f} {d["bw_bytes"]/1e6:.1f} '
      f'{pct.get("50.000000", 0) / 1000:.1f} {pct.get("99.000000", 0) / 1000:.1f}')
PY
}

# FUSE over io_uring is a system-wide kernel switch, off by default, which
# installing sroute turns on (scripts/enable-fuse-uring.sh); sroute volumes
# use it by default.
# uring_switch_on SYSTEMS: turns it on when a system's name has "uring" or
# "sroute" in it, as installed (exits if a "uring" one needs it and the
# kernel has none) and sets uring_was for restore_uring_switch, which the
# caller's EXIT trap runs.
uring_switch=/sys/module/fuse/parameters/enable_uring
uring_was=""
uring_switch_on() {
  case " $1 " in
    *uring*|*sroute*) ;;
    *) return 0 ;;
  esac
  if [ ! -w "$uring_switch" ]; then
    case " $1 " in
      *uring*) echo "no $uring_switch: this kernel has no FUSE over io_uring" >&2; exit 1 ;;
    esac
    return 0  # sroute's defaults fall back to /dev/fuse
  fi
  uring_was=$(cat "$uring_switch")
  echo Y > "$uring_switch"
}
restore_uring_switch() {
  [ -z "$uring_was" ] || echo "$uring_was" > "$uring_switch"
}
