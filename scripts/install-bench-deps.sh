#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what bench/fuse_fio.sh and bench/server_fio.sh need beyond
# scripts/install-deps.sh (Debian 12, as root): fio, mergerfs as a FUSE peer
# to compare with, and GlusterFS (10.3: server and FUSE client) as a peer for
# the storage-server path. The scripts also use fincore (util-linux), python3
# and a C compiler.
set -euo pipefail
packages=(fio mergerfs glusterfs-server glusterfs-client)
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
