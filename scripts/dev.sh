#!/usr/bin/env bash
# Runs lineage on this machine: installs nats-server if missing, builds (the CLI and the ACP
# test agent that `lineage dev`'s acp-testagent and delegator profiles run), starts a local cluster
# (nats-server + 3 lineage nodes, all registry voters) and runs the demo workload, then leaves the
# cluster up for the CLI until Ctrl-C. Extra arguments go to `lineage dev` (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build -p lineage -p lineage-acp-testagent
exec target/debug/lineage dev "$@"
