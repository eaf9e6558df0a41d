#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/enable-fuse-uring.sh, alone and as `cmake --install` runs it, on
# stand-ins for the kernel's switch and /etc/modprobe.d.
#   tests/scripts/enable_fuse_uring_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=$1
build=$2
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export SROUTE_MODPROBE_DIR=$t/modprobe.d SROUTE_URING_SWITCH=$t/enable_uring
conf=$SROUTE_MODPROBE_DIR/sroute-fuse-uring.conf
script=$top/scripts/enable-fuse-uring.sh
fail() { echo "FAILED: $*" >&2; exit 1; }

echo N > "$SROUTE_URING_SWITCH"
out=$("$script")
grep -qx "options fuse enable_uring=1" "$conf" || fail "no options line: $(cat "$conf")"
[ "$(cat "$SROUTE_URING_SWITCH")" = Y ] || fail "switch not on"
case $out in *"turned FUSE over io_uring on"*"--undo"*) ;; *) fail "says: $out" ;; esac
"$script" > /dev/null  # again: the same file, no error
[ "$(grep -c enable_uring=1 "$conf")" = 1 ] || fail "not idempotent"

out=$("$script" --undo)
[ ! -e "$conf" ] || fail "--undo left $conf"
[ "$(cat "$SROUTE_URING_SWITCH")" = N ] || fail "--undo left the switch on"
case $out in *"turned off"*) ;; *) fail "--undo says: $out" ;; esac

# A kernel without the feature: said, nothing written, success.
rm "$SROUTE_URING_SWITCH"
out=$("$script")
case $out in *"no FUSE over io_uring"*) ;; *) fail "no-feature says: $out" ;; esac
[ ! -e "$conf" ] || fail "wrote $conf for a kernel without the feature"

# `cmake --install` turns it on...
echo N > "$SROUTE_URING_SWITCH"
cmake --install "$build" --prefix "$t/prefix" > "$t/install.log"
[ "$(cat "$SROUTE_URING_SWITCH")" = Y ] || fail "install left the switch off"
[ -f "$conf" ] || fail "install wrote no $conf"
grep -q "turned FUSE over io_uring on" "$t/install.log" || fail "install said nothing"
[ -x "$t/prefix/sbin/sroute-enable-fuse-uring" ] || fail "script not installed"
# ...but not a staged install (a package's).
echo N > "$SROUTE_URING_SWITCH"
rm "$conf"
DESTDIR=$t/stage cmake --install "$build" --prefix /usr > /dev/null
[ "$(cat "$SROUTE_URING_SWITCH")" = N ] || fail "a DESTDIR install turned it on"
[ ! -e "$conf" ] || fail "a DESTDIR install wrote $conf"
echo PASSED
