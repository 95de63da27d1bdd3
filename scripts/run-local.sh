#!/usr/bin/env bash
# Builds every binary and runs a whole topology on this machine until Ctrl-C.
# Usage: scripts/run-local.sh [TOPOLOGY [geocount-cluster flags...]]
#   e.g. scripts/run-local.sh config/geo-10dc.toml --fresh
# RUN_LOCAL_PROFILE=debug runs the debug build instead of the release one (scripts/test.sh,
# which has built it already).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
profile="${RUN_LOCAL_PROFILE:-release}"
case "$profile" in
  release) cargo build --release --workspace --bins ;;
  debug) cargo build --workspace --bins ;;
  *) echo "run-local.sh: RUN_LOCAL_PROFILE is release or debug, not $profile" >&2; exit 2 ;;
esac
exec "${CARGO_TARGET_DIR:-target}/$profile/geocount-cluster" --config "${1:-config/local.toml}" "${@:2}"
