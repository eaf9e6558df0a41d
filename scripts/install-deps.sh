#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what sroute needs to build, test and benchmark (Debian 12, as root).
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
  clang-format
  libfuse3-dev fuse3
  libboost-dev libboost-system-dev
  libprotobuf-dev protobuf-compiler
  librocksdb-dev libre2-dev libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libspdlog-dev libcli11-dev libssl-dev libncurses-dev
  libsqlite3-dev rsync git
  libsimgrid-dev  # sroute-sim's network (flow level)
  systemd  # systemd-analyze verify checks the units (packaging/systemd)
  etcd-server  # the controllers' shared store (tests start their own)
  iproute2  # tests bring up loopback in private network namespaces
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
