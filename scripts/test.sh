#!/usr/bin/env bash
# Runs every lineage test: installs nats-server if missing, then the whole workspace.
# Tests that need the bus start their own nats-server on a free port (lineage-testkit).
# `cargo test --workspace` runs every crate's tests and the root package's suites, tests/<suite>.rs
# and tests/<suite>/main.rs (o1_docs_verbatim: every ```sh command of README.md, docs/ and the
# chart's README, run against `lineage dev`); one alone: cargo test --test o1_docs_verbatim.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
export PATH="$PATH:$HOME/go/bin"
export RUST_BACKTRACE=1
cargo build --workspace --bins
exec cargo test --workspace -- --test-threads="${LINEAGE_TEST_THREADS:-2}"
