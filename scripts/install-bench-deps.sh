#!/usr/bin/env bash
# Installs what bench/fuse_fio.sh needs beyond scripts/install-deps.sh
# (Debian 12, as root): fio, and mergerfs as a peer to compare with. The
# script also uses fincore (util-linux), python3 and a C compiler.
set -euo pipefail
packages=(fio mergerfs)
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
