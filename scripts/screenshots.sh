#!/usr/bin/env bash
# Makes the status page screenshots of the documents (docs/images/status-global.png,
# docs/images/status-datacenter.png): starts config/local.toml's cluster on other ports (7xxx
# becomes 47xxx, SCREENSHOT_PORT_PREFIX) with temporary data and a trending threshold for `#`,
# puts some load on it (geoctl load over hashtag counters, and a bounded counter, written
# through every shard node), and photographs the global aggregator's page and datacenter USA_0's with headless
# Chromium (`--screenshot`), the bounded counter looked up. Stops its processes whatever
# happens. Needs chromium (scripts/browser-tools.sh installs it) and curl.
# Usage: scripts/screenshots.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
prefix=${SCREENSHOT_PORT_PREFIX:-4}
target=${CARGO_TARGET_DIR:-target}
out=$root/docs/images
command -v chromium >/dev/null || { echo "screenshots: chromium is missing (scripts/browser-tools.sh)" >&2; exit 1; }

cargo build --workspace --bins --locked

work=$(mktemp -d)
launcher=""
load=""
tickets=""
cleanup() {
  [ -z "$load" ] || kill "$load" 2>/dev/null || true
  [ -z "$tickets" ] || kill "$tickets" 2>/dev/null || true
  if [ -n "$launcher" ]; then
    # The launcher stops every process of its cluster on SIGTERM.
    kill -TERM "$launcher" 2>/dev/null || true
    wait "$launcher" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

sed -e "s/127\.0\.0\.1:7/127.0.0.1:${prefix}7/g" -e "s|^data_dir = .*|data_dir = \"$work/data\"|" \
  config/local.toml >"$work/local.toml"
printf '\n[trending]\nwindow_seconds = 300\nthresholds = { "#" = 400 }\n' >>"$work/local.toml"
"$target/debug/geocount-cluster" --config "$work/local.toml" --new-cluster >"$work/cluster.log" 2>&1 &
launcher=$!
for _ in $(seq 300); do
  grep -q "Ctrl-C stops the cluster" "$work/cluster.log" && break
  kill -0 "$launcher" 2>/dev/null || { cat "$work/cluster.log" >&2; exit 1; }
  sleep 0.1
done
grep -q "Ctrl-C stops the cluster" "$work/cluster.log" || { cat "$work/cluster.log" >&2; exit 1; }

shards=("${prefix}7101" "${prefix}7102" "${prefix}7103" "${prefix}7201" "${prefix}7202" "${prefix}7301")
write() { # port id delta
  curl -s -o /dev/null -X PATCH "http://127.0.0.1:$1/counter/$2/write?op=INCREMENT" -d "{\"delta\": $3}"
}
curl -s -o /dev/null -X POST "http://127.0.0.1:${shards[0]}/counter" \
  -d '{"id": "tickets:launch", "min": 0, "max": 5000}'
# Some load: 300 writes a second over 40 hashtags, a few of them hot (geoctl load), and
# tickets taken from the bounded counter, through every node.
"$target/debug/geoctl" load --config "$work/local.toml" --duration-secs 120 --rate 300 \
  --counters 40 --distribution zipf --counter-prefix "#topic" >"$work/load.log" 2>&1 &
load=$!
(
  trap - EXIT INT TERM
  n=0
  while true; do
    n=$((n + 1))
    write "${shards[$((n % ${#shards[@]}))]}" "tickets:launch" 1
    sleep 0.2
  done
) &
tickets=$!
sleep 12

shoot() { # url file
  chromium --headless --no-sandbox --disable-background-networking --disable-gpu \
    --hide-scrollbars --force-device-scale-factor=0.8 --window-size=1200,1760 \
    --virtual-time-budget=9000 --screenshot="$2" "$1" >"$work/chromium.log" 2>&1 ||
    { cat "$work/chromium.log" >&2; exit 1; }
  echo "screenshots: $2 ($(wc -c <"$2") bytes)"
}
mkdir -p "$out"
shoot "http://127.0.0.1:${prefix}7000/#counter=tickets:launch" "$out/status-global.png"
shoot "http://127.0.0.1:${prefix}7100/#counter=tickets:launch" "$out/status-datacenter.png"
