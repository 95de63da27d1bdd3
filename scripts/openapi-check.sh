#!/usr/bin/env bash
# Checks that every tier's /openapi.json describes the API it serves: starts a real local
# cluster (one datacenter of two shard nodes, its aggregator and the global aggregator) on free
# loopback ports with temporary data, and runs schemathesis with its default checks against the
# shard node, the datacenter aggregator and the global aggregator: once without [auth], once
# with [auth] (an admin token on every request). Fails on any failure; stops its processes
# whatever happens. Installs schemathesis when `st` is missing.
# Usage: scripts/openapi-check.sh   (OPENAPI_CHECK_SECONDS: each run's time budget, default 20)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
seconds=${OPENAPI_CHECK_SECONDS:-20}
# The admin token of the [auth] run; the cluster lives only while this script runs.
admin_token="openapi-admin-3f9c1e7a5b2d4c8e9a0f6b1d7e2c5a48"
cluster_secret="openapi-cluster-8d2e6a1c9f4b7e3d0a5c2f8b1e6d9a47"

st=$(command -v st || true)
if [ -z "$st" ]; then
  venv=$root/target/schemathesis-venv
  if [ ! -x "$venv/bin/st" ]; then
    if ! python3 -m pip install --quiet schemathesis 2>"$root/target/pip.log"; then
      if grep -q externally-managed-environment "$root/target/pip.log"; then
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet schemathesis
      else
        cat "$root/target/pip.log" >&2
        exit 1
      fi
    fi
  fi
  st=$(command -v st || echo "$venv/bin/st")
fi

cargo build --workspace --bins --locked

work=$(mktemp -d)
launcher=""
stop_cluster() {
  if [ -n "$launcher" ]; then
    # The launcher stops every process of its cluster on SIGTERM.
    kill -TERM "$launcher" 2>/dev/null || true
    wait "$launcher" 2>/dev/null || true
    launcher=""
  fi
}
cleanup() {
  stop_cluster
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Four free loopback ports: the global aggregator, the datacenter aggregator, two shard nodes.
free_ports() {
  python3 - <<'EOF'
import socket
sockets = [socket.socket() for _ in range(4)]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in sockets))
EOF
}

# Starts the cluster of `$1` (a name) with the extra TOML `$2`; sets global, datacenter, shard.
start_cluster() {
  local name=$1 extra=$2 ports
  read -r -a ports <<<"$(free_ports)"
  global=http://127.0.0.1:${ports[0]}
  datacenter=http://127.0.0.1:${ports[1]}
  shard=http://127.0.0.1:${ports[2]}
  cat >"$work/$name.toml" <<EOF
[global]
listen = "127.0.0.1:${ports[0]}"

[shard]
data_dir = "$work/$name"
restore_timeout_ms = 200

[[datacenters]]
name = "USA_0"
aggregator = "127.0.0.1:${ports[1]}"
shards = ["127.0.0.1:${ports[2]}", "127.0.0.1:${ports[3]}"]

[trending]
window_seconds = 300
thresholds = { "#" = 5 }

$extra
EOF
  target/debug/geocount-cluster --config "$work/$name.toml" --new-cluster \
    >"$work/$name.log" 2>&1 &
  launcher=$!
  for _ in $(seq 300); do
    grep -q "Ctrl-C stops the cluster" "$work/$name.log" && return 0
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
  done
  cat "$work/$name.log" >&2
  echo "openapi-check: the $name cluster did not start" >&2
  exit 1
}

failed=()
# Runs schemathesis against the tier at `$2` (named `$1`), with the extra flags after.
check() {
  local tier=$1 url=$2
  shift 2
  echo "== schemathesis: $tier"
  # schemathesis keeps its example database under the working directory: the temporary one.
  if ! (cd "$work" && PYTHONPATH="$root/scripts" SCHEMATHESIS_HOOKS=openapi_check_hooks \
    "$st" --no-color --config-file "$root/scripts/schemathesis.toml" \
    run "$url/openapi.json" --max-time "$seconds" "$@"); then
    failed+=("$tier")
  fi
}

start_cluster open ""
check "shard node" "$shard"
check "datacenter aggregator" "$datacenter"
check "global aggregator" "$global"
stop_cluster

start_cluster auth "[auth]
cluster_secret = \"$cluster_secret\"

[[auth.tokens]]
name = \"ops\"
token = \"$admin_token\"
rights = [\"admin\"]"
bearer=(-H "Authorization: Bearer $admin_token")
check "shard node, [auth]" "$shard" "${bearer[@]}"
check "datacenter aggregator, [auth]" "$datacenter" "${bearer[@]}"
check "global aggregator, [auth]" "$global" "${bearer[@]}"
stop_cluster

if [ ${#failed[@]} -gt 0 ]; then
  printf 'openapi-check: schemathesis failed against: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "openapi-check: every tier's document matches its API, with and without [auth]"
