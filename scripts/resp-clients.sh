#!/usr/bin/env bash
# The real Redis clients the Redis protocol tests (tests/resp.rs) drive geocount with, and the
# Redis they compare it to: Debian's redis-server, redis-cli and redis-benchmark
# (`redis-server redis-tools`), and the Python client `redis` from PyPI. Installs what is
# missing, quietly (the installers' output goes to target/resp-install.log, shown on failure),
# and prints the python that has the client: `python3` when it already does, else one of a
# virtual environment under target/ (for a Debian python that refuses pip installs, PEP 668).
# Safe to run again: it installs nothing that is there.
# Usage: E2E_PYTHON=$(scripts/resp-clients.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p target
log=$PWD/target/resp-install.log
venv=$PWD/target/resp-venv
# The client versions the tests are written for (its RESP parsers, redis._parsers, since 5).
client='redis>=5,<9'
: >"$log"

fail() {
  cat "$log" >&2
  echo "resp-clients: $1" >&2
  exit 1
}

# Installs Debian packages `$@`, as root or through sudo.
apt_install() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@"; } \
    >>"$log" 2>&1 || fail "could not install $* from Debian's packages"
}

missing=""
command -v redis-server >/dev/null || missing="$missing redis-server"
for tool in redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null || { missing="$missing redis-tools"; break; }
done
# shellcheck disable=SC2086 # one word per package
[ -z "$missing" ] || apt_install $missing

has_client() { "$1" -c 'import redis, redis._parsers' 2>/dev/null; }

if has_client python3; then
  echo python3
  exit 0
fi
if [ -x "$venv/bin/python" ] && has_client "$venv/bin/python"; then
  echo "$venv/bin/python"
  exit 0
fi
# A python whose site-packages pip may write (pyenv, a virtual environment, a user site).
if python3 -m pip install --quiet "$client" >>"$log" 2>&1 && has_client python3; then
  echo python3
  exit 0
fi
# Debian's python: pip refuses (externally managed) or is absent; a virtual environment
# needs python3-venv.
python3 -m venv --help >/dev/null 2>&1 && python3 -c 'import ensurepip' 2>/dev/null ||
  apt_install python3-venv
rm -rf "$venv"
python3 -m venv "$venv" >>"$log" 2>&1 || fail "could not make the virtual environment $venv"
"$venv/bin/python" -m pip install --quiet "$client" >>"$log" 2>&1 ||
  fail "could not install the Python client $client from PyPI"
has_client "$venv/bin/python" || fail "the Python client $client does not import"
echo "$venv/bin/python"
