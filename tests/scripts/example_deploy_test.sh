#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The deployment examples of examples/configs run as an administrator would
# install them: the three etcd members of etcd/e*.yml form a cluster, a
# controller started the way sroute-controller.service starts it with
# default/sroute-controller.etcd leads over it, and one started with
# default/sroute-controller (its RocksDB store) answers. All in private
# mount, PID and network namespaces (/etc/sroute, /var/lib/etcd,
# /var/lib/sroute and /run are empty tmpfs there; ports are the examples').
# usage: example_deploy_test.sh SOURCE_DIR BIN_DIR...
set -euo pipefail
src=$1
shift
path=""
for d in "$@"; do path+="$d:"; done
for d in /etc/sroute /var/lib/etcd /var/lib/sroute; do mkdir -p "$d"; done
exec timeout 120 unshare --mount --propagation private --pid --net --fork \
  --kill-child --mount-proc env PATH="$path$PATH" bash -euo pipefail -c '
src=$1
ip link set lo up
for d in /etc/sroute /var/lib/etcd /var/lib/sroute /run; do
  mount -t tmpfs -o mode=0755 tmpfs "$d"
done
head -c 32 /dev/urandom | base64 > /etc/sroute/secret
chmod 600 /etc/sroute/secret
ctl() { sroutectl --secret-file /etc/sroute/secret "$@"; }
# As the unit: --store ${SROUTE_CONTROLLER_STORE} ... $SROUTE_CONTROLLER_OPTS.
start_controller() {  # DEFAULTS_FILE LOG
  (
    SROUTE_CONTROLLER_STORE=rocksdb:/var/lib/sroute/controller
    . "$1"
    # shellcheck disable=SC2086  # the unit splits the options the same way
    exec sroute-controller --store "$SROUTE_CONTROLLER_STORE" \
      --secret-file /etc/sroute/secret $SROUTE_CONTROLLER_OPTS 2>"$2"
  ) &
}
wait_for() {  # SECONDS COMMAND...: until COMMAND succeeds
  local end=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $end ]; then echo "timed out: $*"; return 1; fi
    sleep 0.2
  done
}

for i in 1 2 3; do
  etcd --config-file "$src/examples/configs/etcd/e$i.yml" \
    2>/var/lib/sroute/etcd-e$i.log &
done
start_controller "$src/examples/configs/default/sroute-controller.etcd" \
  /var/lib/sroute/c1.log
leads() { ctl --controller 127.0.0.1:7501 controllers | grep -q "^leader 127.0.0.1:7501$"; }
if ! wait_for 60 leads; then
  tail -n 20 /var/lib/sroute/*.log
  exit 1
fi
out=$(ctl --controller 127.0.0.1:7501 controllers)
echo "$out"
healthy=$(grep -cE "^127\.0\.0\.1:1[123]379 +healthy" <<<"$out" || true)
[ "$healthy" = 3 ] || { echo "expected 3 healthy etcd members"; exit 1; }

start_controller "$src/examples/configs/default/sroute-controller" \
  /var/lib/sroute/c0.log
if ! wait_for 30 ctl --controller 127.0.0.1:7500 hosts; then
  tail -n 20 /var/lib/sroute/c0.log
  exit 1
fi
wait_for 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/9472" ||
  { echo "no metrics listener at 127.0.0.1:9472"; exit 1; }
ctl --controller 127.0.0.1:7500 apps ls | grep -E "^tail_latency " ||
  { echo "tail_latency is not running"; exit 1; }
echo "the deployment examples run"
' _ "$src"
