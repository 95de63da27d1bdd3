#!/usr/bin/env bash
# What the status page's browser test (tests/status_page.rs) and scripts/screenshots.sh drive
# the page with: Debian's headless-capable `chromium` and its `chromium-driver`, and the
# Python package `selenium` from PyPI. Installs what is missing, quietly (the installers'
# output goes to target/browser-install.log, shown on failure), and prints the python that has
# selenium: `python3` when it already does, else one of a virtual environment under target/
# (for a Debian python that refuses pip installs, PEP 668). Safe to run again: it installs
# nothing that is there. Exits 1 naming what it could not install.
# Usage: E2E_BROWSER_PYTHON=$(scripts/browser-tools.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p target
log=$PWD/target/browser-install.log
venv=$PWD/target/browser-venv
# Selenium 4 drives chromedriver by its W3C protocol; a given driver path needs no download.
package='selenium>=4.10,<5'
: >"$log"

fail() {
  cat "$log" >&2
  echo "browser-tools: $1" >&2
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
command -v chromium >/dev/null || missing="$missing chromium"
command -v chromedriver >/dev/null || missing="$missing chromium-driver"
# shellcheck disable=SC2086 # one word per package
[ -z "$missing" ] || apt_install $missing

has_selenium() { "$1" -c 'import selenium.webdriver' 2>/dev/null; }

if has_selenium python3; then
  echo python3
  exit 0
fi
if [ -x "$venv/bin/python" ] && has_selenium "$venv/bin/python"; then
  echo "$venv/bin/python"
  exit 0
fi
# A python whose site-packages pip may write (pyenv, a virtual environment, a user site).
if python3 -m pip install --quiet "$package" >>"$log" 2>&1 && has_selenium python3; then
  echo python3
  exit 0
fi
# Debian's python: pip refuses (externally managed) or is absent; a virtual environment
# needs python3-venv.
python3 -m venv --help >/dev/null 2>&1 && python3 -c 'import ensurepip' 2>/dev/null ||
  apt_install python3-venv
rm -rf "$venv"
python3 -m venv "$venv" >>"$log" 2>&1 || fail "could not make the virtual environment $venv"
"$venv/bin/python" -m pip install --quiet "$package" >>"$log" 2>&1 ||
  fail "could not install the Python package $package from PyPI"
has_selenium "$venv/bin/python" || fail "the Python package $package does not import"
echo "$venv/bin/python"
