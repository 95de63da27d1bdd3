#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, the documents and modules checks, lints, then
# every unit and end-to-end test, and the fuzz targets' seed replay.
# End-to-end tests start the real binaries, so those are built first.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
# The two checks below pass their right fixtures and fail their wrong ones (seconds, no build).
scripts/check-selftest.sh
# The documents name only files and Rust symbols that exist, where they say (seconds, no build).
scripts/check-docs.sh
# No import cycle between sibling modules, each type's impls in its room (seconds, no build).
python3 scripts/check-modules.py
# The README's tour and the list scripts/readme-examples.sh runs name the same commands.
scripts/readme-examples.sh --check
# The binaries and every test target in one build: `cargo test --workspace` below then compiles
# nothing. Every cargo command here selects the whole workspace, so each dependency is built with
# one set of features (a `-p` selection, or a build without the tests' dev-dependencies, unifies
# them differently and rebuilds tokio and all above it).
cargo build --workspace --bins --tests --locked
cargo clippy --workspace --all-targets --locked -- -D warnings
# The deployment files: promtool over the Prometheus configuration, the alert rules, their unit
# tests and the dashboard's queries; systemd-analyze over the units (Debian's prometheus and
# systemd, installed when missing; scripts/check-deploy.sh). tests/deploy.rs then requires
# promtool for `promtool check metrics` of every tier's /metrics.
scripts/check-deploy.sh
export E2E_PROMTOOL=1
# tests/resp.rs drives the shard nodes with real Redis clients and compares them with a real
# Redis: Debian's redis-server and redis-tools and the Python client `redis` (PyPI), installed
# when missing; E2E_PYTHON names the python that has the client.
E2E_PYTHON=$(scripts/resp-clients.sh)
export E2E_PYTHON
# tests/status_page.rs drives the aggregators' status pages in headless Chromium: Debian's
# chromium and chromium-driver and the Python package selenium (PyPI), installed when missing;
# E2E_BROWSER_PYTHON names the python that has it. Where they cannot be installed the test
# says so and passes.
if E2E_BROWSER_PYTHON=$(scripts/browser-tools.sh); then
  export E2E_BROWSER_PYTHON
else
  echo "test.sh: the status page's browser test will be skipped (see above)" >&2
fi
# Every example of the README's tour, in order, against a fresh cluster of config/local.toml
# (scripts/run-local.sh on the debug build just made; about a minute).
RUN_LOCAL_PROFILE=debug scripts/readme-examples.sh
cargo test --workspace --locked
# The simulation's seeds (ignored above: unoptimized they take minutes) in the `sim` profile of
# Cargo.toml: opt-level 1 with debug assertions and overflow checks, its own build of the crates
# the simulation runs (docs/testing.md, "How long each part takes").
cargo test --profile sim --locked -p geocount-sim -- --include-ignored
# The fuzz targets compile on stable and every seed replays (about 30 s the first time: libFuzzer).
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}" cargo test --manifest-path fuzz/Cargo.toml --locked
# The end-to-end suites of the tiers again, with TLS on every listener and every call between
# tiers (a test CA per test process; docs/testing.md): about a minute more.
# (`--workspace` so nothing is rebuilt; `--test resp` also runs crates/shard-node/tests/resp.rs,
# in-process and without TLS, a few seconds.)
E2E_TLS=1 cargo test --workspace --locked --test shard_node --test aggregation --test replication \
  --test windows --test topk --test openapi --test wan_cluster --test auth --test restore \
  --test fencing --test roles --test replicas --test partitions --test resp --test status_page
# Every tier's /openapi.json against the running tier, with and without [auth]: schemathesis
# with its default checks, installed when missing (about three minutes; scripts/openapi-check.sh).
scripts/openapi-check.sh
