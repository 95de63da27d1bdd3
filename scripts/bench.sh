#!/usr/bin/env bash
# The benchmark: geocount against Redis and a bare hyper server, on this machine, in
# one go; the resp step runs the same redis-benchmark command lines against Redis and against
# shard nodes' RESP ports. Prints one Markdown table (each geocount figure beside its peer, as a
# ratio from the same run) and saves it with every sample as bench/results/<unix time>.json.
#
# Usage: scripts/bench.sh [--quick] [geocount-bench flags...]
#   --quick                      one short repeat of each figure (a few minutes); default: three
#                                repeats of 10 s runs, the full growth curve (~15 minutes)
#   --steps redis,ceiling,node,resp,curve,cluster,memory,restore,scan,keys,reclaim,bounds
#                                only these (bounds runs the topology under --wan)
#   --curve 1000,1000000         the growth curve at these counter counts only
#
# Needs redis-server, redis-benchmark (redis-tools) and wrk: installed from Debian's packages
# when missing (as root, or through sudo).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-benchmark >/dev/null || missing+=(redis-tools)
command -v wrk >/dev/null || missing+=(wrk)
if ((${#missing[@]})); then
    sudo=()
    if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
    echo "installing ${missing[*]} (Debian packages)"
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"; then
        "${sudo[@]}" apt-get update
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
    fi
fi

cargo build --release -p geocount-bench -p shard-node -p geocount-aggregator -p geoctl \
    -p geocount-wan
exec "${CARGO_TARGET_DIR:-target}/release/geocount-bench" "$@"
