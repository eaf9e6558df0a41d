#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A volume that leaves its terminal keeps logging: under systemd (stderr is
# the journal, JOURNAL_STREAM names it) its lines go on there, with their
# priorities, after the mount returned; a rule changed through the control
# socket is one of them.
# usage: daemon_log_test.sh SROUTE_FUSE SROUTECTL
set -euo pipefail
fuse=$1 ctl=$2
work=$(mktemp -d)
mnt=$work/mnt home=$work/home log=$work/journal sock=$work/vol.sock
mkdir -p "$mnt" "$home"
cleanup() {
  fusermount3 -u "$mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
: >"$log"
# A stand-in journal: a file, named by JOURNAL_STREAM as systemd names its
# stream (device:inode of stderr).
JOURNAL_STREAM=$(stat -c '%d:%i' "$log") \
  "$fuse" "$mnt" --backing "$home" --control "$sock" 2>>"$log"
"$ctl" --host "unix:$sock" rules add '<*, *, //home/a> -> <IO, //home/b>' \
  >/dev/null
fusermount3 -u "$mnt"
if ! grep -qE '^<6>sroute-fuse: rules changed through the control socket .*: now version [0-9]+$' "$log"; then
  echo "the detached volume's log line is not in its journal stream:"
  cat "$log"
  exit 1
fi
echo "a detached volume logs to the journal"
