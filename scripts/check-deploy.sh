#!/usr/bin/env bash
# Checks the deployment files under deploy/ (docs/operations.md, "Deploying with systemd" and
# "Monitoring"):
#
#   - Prometheus: `promtool check config` of prometheus.yml, `promtool check rules` of
#     alerts.yml and its unit tests (`promtool test rules alerts.test.yml`), and every query of
#     the Grafana dashboard parsed as PromQL by promtool.
#   - systemd: `systemd-analyze verify` of an instance of every unit, with /usr/local/bin/
#     pointing at the built binaries (BIN_DIR, default $CARGO_TARGET_DIR/debug or target/debug),
#     and the shell in each ExecStart run to show the flags an instance gets.
#
# That every metric the dashboard and the rules name is exported, and that every tier's
# /metrics passes `promtool check metrics`, is tests/deploy.rs (it starts a cluster).
# Installs Debian's `prometheus` (promtool) and `systemd` (systemd-analyze) when missing; skips
# the systemd check, saying why, only where systemd-analyze cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir=${BIN_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/debug}
bin_dir=$(cd "$bin_dir" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

apt_install() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    $sudo apt-get install -y -qq --no-install-recommends "$@"; } >"$work/apt.log" 2>&1 ||
    { cat "$work/apt.log" >&2; echo "check-deploy: could not install $*" >&2; exit 1; }
}
command -v promtool >/dev/null || apt_install prometheus
command -v systemd-analyze >/dev/null || apt_install systemd

# Prometheus.
promtool check config deploy/prometheus/prometheus.yml
promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/alerts.test.yml
# Each dashboard query as a recording rule, Grafana's variables given values.
python3 - deploy/grafana/geocount.json >"$work/dashboard-rules.yml" <<'PY'
import json, sys
dash = json.load(open(sys.argv[1]))
print("groups:\n  - name: dashboard\n    rules:")
for panel in dash["panels"]:
    for target in panel.get("targets", []):
        expr = target["expr"].replace("$__rate_interval", "1m").replace("$datacenter", ".*")
        print("      - record: dashboard:panel_%d_%s" % (panel["id"], target["refId"]))
        print("        expr: %s" % json.dumps(expr))
PY
echo "dashboard queries:"
promtool check rules "$work/dashboard-rules.yml"

# systemd.
if ! systemd-analyze --version >/dev/null 2>&1; then
  echo "check-deploy: systemd-analyze does not run here; the units are not verified" >&2
  exit 0
fi
units="$work/units"
mkdir -p "$units"
for binary in $(grep -oh '/usr/local/bin/[a-z-]*' deploy/systemd/*.service | sort -u); do
  [ -x "$bin_dir/${binary##*/}" ] ||
    { echo "check-deploy: deploy/systemd names $binary; no ${binary##*/} in $bin_dir" >&2; exit 1; }
done
# One instance of each unit, as systemd would load it.
instances="geocount-shard@DC_USA_0_VAL_1 geocount-aggregator@USA_0 geocount-aggregator@USA_0-1
  geocount-global geocount-global@1"
for instance in $instances; do
  template=${instance%%@*}
  [ "$template" = "$instance" ] && file=$template.service || file=$template@.service
  sed "s#/usr/local/bin/#$bin_dir/#g" "deploy/systemd/$file" >"$units/$instance.service"
done
(
  cd "$units"
  for instance in $instances; do
    out=$(systemd-analyze verify --man=no "./$instance.service" 2>&1) ||
      { echo "$out" >&2; echo "check-deploy: systemd-analyze verify $instance failed" >&2; exit 1; }
    # Any warning (an unknown key, a bad value) fails too: verify exits 0 on those.
    [ -z "$out" ] || { echo "$out" >&2; echo "check-deploy: $instance: warnings" >&2; exit 1; }
    echo "systemd-analyze verify $instance: ok"
  done
)
# The ExecStart shell of the templates, unescaped as systemd does, with the binary echoed.
exec_line() { # unit instance
  sed -n 's/^ExecStart=//p' "deploy/systemd/$1" |
    sed -e "s/%i/$2/g" -e 's/%%/%/g' -e 's/\$\$/$/g' -e 's#exec /usr/local/bin/#echo #'
}
expect() { # unit instance environment expected
  local got
  got=$(env $3 bash -c "$(exec_line "$1" "$2")")
  [ "$got" = "$4" ] || { echo "check-deploy: $1 for $2 runs: $got; expected: $4" >&2; exit 1; }
  echo "$1 $2: $got"
}
config=/etc/geocount/topology.toml
expect geocount-shard@.service DC_USA_0_VAL_1 "RESTORE=required STATE_DIRECTORY=/s" \
  "shard-node --config $config --dc USA_0 --slot 1 --data-dir /s --restore required"
expect geocount-shard@.service DC_A_VAL_B_VAL_12 "RESTORE=empty STATE_DIRECTORY=/s" \
  "shard-node --config $config --dc A_VAL_B --slot 12 --data-dir /s --restore empty"
expect geocount-aggregator@.service USA_0 "" \
  "datacenter-aggregator --config $config --dc USA_0 --replica 0"
expect geocount-aggregator@.service ASIA_0-2 "" \
  "datacenter-aggregator --config $config --dc ASIA_0 --replica 2"
