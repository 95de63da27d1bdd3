#!/usr/bin/env bash
# Builds every binary and runs a whole topology on this machine until Ctrl-C.
# Usage: scripts/run-local.sh [TOPOLOGY [geocount-cluster flags...]]
#   e.g. scripts/run-local.sh config/geo-10dc.toml --fresh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --workspace --bins
exec target/release/geocount-cluster --config "${1:-config/local.toml}" "${@:2}"
