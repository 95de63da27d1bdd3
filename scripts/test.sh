#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, then every unit and end-to-end test.
# End-to-end tests start the real binaries, so those are built first.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo build --workspace --bins --locked
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
