#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Turns on FUSE over io_uring, which sroute volumes use by default when the
# kernel offers it (Linux 6.14+ built with CONFIG_FUSE_IO_URING): now (the
# fuse module's enable_uring parameter) and at every boot (a modprobe.d
# file). `ninja install` and scripts/demo.sh run it as root; run it again
# with --undo to turn the switch off and remove the file (volumes mounted
# meanwhile keep their queues until unmounted; later ones use /dev/fuse).
#
#   scripts/enable-fuse-uring.sh           # on, now and at boot
#   scripts/enable-fuse-uring.sh --undo    # off, now and at boot
#
# SROUTE_MODPROBE_DIR and SROUTE_URING_SWITCH name other paths (for tests).
set -eu
conf_dir=${SROUTE_MODPROBE_DIR:-/etc/modprobe.d}
switch=${SROUTE_URING_SWITCH:-/sys/module/fuse/parameters/enable_uring}
conf=$conf_dir/sroute-fuse-uring.conf
say() { echo "sroute: $*"; }

if [ "${1:-}" = "--undo" ]; then
  rm -f "$conf"
  if [ -w "$switch" ]; then echo N > "$switch"; fi
  say "FUSE over io_uring turned off ($switch = N, $conf removed);" \
    "volumes mounted from now on use /dev/fuse"
  exit 0
fi
if [ -n "${1:-}" ]; then
  echo "usage: $0 [--undo]" >&2
  exit 2
fi
if [ ! -e "$switch" ]; then
  say "this kernel has no FUSE over io_uring (no $switch; it needs Linux" \
    "6.14+ with CONFIG_FUSE_IO_URING): volumes use /dev/fuse"
  exit 0
fi
if ! [ -w "$switch" ] || ! { [ -d "$conf_dir" ] || mkdir -p "$conf_dir"; } ||
  ! [ -w "$conf_dir" ]; then
  say "may not turn FUSE over io_uring on (not root?): volumes use /dev/fuse" \
    "until root runs $0"
  exit 0
fi
{
  echo "# Written by sroute (scripts/enable-fuse-uring.sh): FUSE over io_uring"
  echo "# for sroute volumes. Remove with: enable-fuse-uring.sh --undo"
  echo "options fuse enable_uring=1"
} > "$conf"
echo Y > "$switch"
say "turned FUSE over io_uring on: $switch = Y now, and $conf at boot;" \
  "undo with $0 --undo"
# A fuse built into the kernel (no initstate: not a loaded module) takes
# its parameters from the command line, not modprobe.d.
if [ -z "${SROUTE_URING_SWITCH:-}" ] && [ ! -e /sys/module/fuse/initstate ]; then
  say "fuse is built into this kernel: to keep the switch on after a" \
    "reboot, add fuse.enable_uring=1 to the kernel command line"
fi
