#!/usr/bin/env bash
# Checks the Helm chart in charts/lineage: installs helm if missing (go install), then lints and
# renders it with the default values, with voters=1 and voters=5, checks that the rendered
# lineage.toml has exactly the node's keys (config/lineage.toml), and that bad values (voters=2,
# a null or negative limits.maxDepth, a lease heartbeat >= the lease, old key names) are refused.
# When a lineage binary exists (target/debug or target/release, the newer one; or $LINEAGE_BIN),
# it also loads the rendered lineage.toml with it as a voter and a worker would (`lineage config
# show` with the pods' environment; the voters through the StatefulSet's own entrypoint snippet),
# and checks the effective values. No cluster needed. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/go/bin:/usr/local/go/bin"
CHART=${CHART:-charts/lineage}

if ! command -v helm >/dev/null 2>&1; then
  command -v go >/dev/null 2>&1 || { echo "check-chart: helm is missing and so is go to install it" >&2; exit 1; }
  echo "check-chart: installing helm (go install helm.sh/helm/v3/cmd/helm@latest)"
  go install helm.sh/helm/v3/cmd/helm@latest
fi
echo "check-chart: $(helm version --short 2>/dev/null || helm version)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check-chart: FAIL: $*" >&2; exit 1; }

helm lint --strict "$CHART" >"$tmp/lint" 2>&1 || { cat "$tmp/lint" >&2; fail "helm lint"; }
echo "check-chart: ok   helm lint --strict"
helm lint --strict "$CHART" --set voters=5 >"$tmp/lint5" 2>&1 || { cat "$tmp/lint5" >&2; fail "helm lint voters=5"; }
echo "check-chart: ok   helm lint --strict --set voters=5"

# render <name> <expected voters> [helm args...]
render() {
  local name=$1 n=$2; shift 2
  helm template t "$CHART" "$@" >"$tmp/$name.yaml" 2>"$tmp/$name.err" \
    || { cat "$tmp/$name.err" >&2; fail "helm template $*"; }
  grep -q "^  replicas: $n$" "$tmp/$name.yaml" || fail "$name: StatefulSet does not have replicas: $n"
  [ "$(grep '^    voters = {' "$tmp/$name.yaml" | grep -o '[0-9] = "' | wc -l)" = "$n" ] || fail "$name: lineage.toml does not list $n voters"
  grep -q 'podManagementPolicy: Parallel' "$tmp/$name.yaml" || fail "$name: podManagementPolicy is not Parallel"
  grep -A1 'name: LINEAGE_REGISTRY__ROLE$' "$tmp/$name.yaml" | grep -q 'value: client$' || fail "$name: workers do not set LINEAGE_REGISTRY__ROLE=client"
  grep -q 'name: RUST_LOG$' "$tmp/$name.yaml" || fail "$name: RUST_LOG is not set"
  if command -v python3 >/dev/null 2>&1 && python3 -c 'import yaml, tomllib' 2>/dev/null; then
    python3 - "$tmp/$name.yaml" "$n" <<'PY' || fail "$name: rendered YAML/TOML check"
import sys, yaml, tomllib
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
cm = next(d for d in docs if d["kind"] == "ConfigMap")
cfg = tomllib.loads(cm["data"]["lineage.toml"])
# Exactly the keys of crates/lineage-node/src/config.rs (deny_unknown_fields, nothing missing).
schema = {"cluster": None, "nats_url": None,
          "node": {"id", "data_dir", "http_addr"},
          "registry": {"role", "raft_id", "voters", "bootstrap", "heartbeat_ms", "election_min_ms", "election_max_ms"},
          "limits": {"max_depth"}, "lease": {"lease_ms", "heartbeat_ms", "takeover_after_ms"}}
assert set(cfg) == set(schema), sorted(cfg)
for table, keys in schema.items():
    if keys is not None:
        assert set(cfg[table]) == keys, (table, sorted(cfg[table]))
n = int(sys.argv[2])
assert list(cfg["registry"]["voters"]) == [str(i) for i in range(1, n + 1)], cfg["registry"]["voters"]
assert cfg["registry"]["bootstrap"] is False and cfg["registry"]["role"] == "voter"
assert cfg["node"]["data_dir"] == "/var/lib/lineage"
assert isinstance(cfg["limits"]["max_depth"], int) and cfg["limits"]["max_depth"] >= 0
PY
  fi
  echo "check-chart: ok   helm template $* (voters=$n)"
}
render default 3
render one 1 --set voters=1
render five 5 --set voters=5

# refuse <what> <error pattern> [helm args...]: rendering must fail with a matching message.
refuse() {
  local what=$1 pattern=$2; shift 2
  if helm template t "$CHART" "$@" >/dev/null 2>"$tmp/refuse.err"; then
    fail "helm template $* should have failed ($what)"
  fi
  grep -Eq "$pattern" "$tmp/refuse.err" || { cat "$tmp/refuse.err" >&2; fail "$what: error does not match /$pattern/"; }
  echo "check-chart: ok   helm template $* fails: $(grep -E "$pattern" "$tmp/refuse.err" | head -1 | sed 's/^ *//')"
}
refuse "values.schema.json" "at '/voters'|- voters:" --set voters=2
refuse "values.schema.json" "maxDepth" --set limits.maxDepth=null
refuse "values.schema.json" "maxDepth" --set limits.maxDepth=-1
refuse "values.schema.json" "additional properties 'raft'|raft" --set registry.raft.heartbeatIntervalMs=250
refuse "template guard" "lease.heartbeatMs" --set lease.heartbeatMs=3000
refuse "template guard" "registry.heartbeatMs" --set registry.electionMinMs=900
if helm template --help 2>/dev/null | grep -q -- --skip-schema-validation; then
  refuse "template guard" "voters must be 1, 3 or 5" --set voters=2 --skip-schema-validation
  refuse "template guard" "limits.maxDepth must be" --set limits.maxDepth=null --skip-schema-validation
else
  echo "check-chart: skip template-guard checks (this helm has no --skip-schema-validation; needs >= 3.16)"
fi

# ------------------------------------------------------------------ the real loader
bin=${LINEAGE_BIN:-}
if [ -z "$bin" ]; then
  for candidate in target/debug/lineage target/release/lineage; do
    if [ -x "$candidate" ] && { [ -z "$bin" ] || [ "$candidate" -nt "$bin" ]; }; then bin=$candidate; fi
  done
fi
if [ -z "$bin" ]; then
  echo "check-chart: skip loading lineage.toml with the node's loader (no target/debug/lineage or target/release/lineage; run cargo build -p lineage)"
  echo "check-chart: all checks passed"
  exit 0
fi
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
echo "check-chart: loading the rendered lineage.toml with $bin"

# lineage.toml of a rendered manifest (the ConfigMap's block scalar, 4-space indent).
extract_toml() {
  awk '/^  lineage.toml: \|$/ { on = 1; next }
       on && /^    / { sub(/^    /, ""); print; next }
       on && /^ *$/ { print ""; next }
       on { exit }' "$1"
}
# The voters' entrypoint snippet (the StatefulSet's `args: - |` block, 14-space indent).
extract_entrypoint() {
  awk '/^# Source: lineage\/templates\/voter-statefulset.yaml$/ { sts = 1 }
       sts && /^            - \|$/ { on = 1; next }
       on && /^              / { sub(/^              /, ""); print; next }
       on && /^ *$/ { print ""; next }
       on { exit }' "$1"
}
# value <config show output> <key>: the value column of `lineage config show`.
value() { awk -v k="$2" '$1 == k { sub(/^[^=]*= /, ""); sub(/ *# [^#]*$/, ""); print; exit }' "$1"; }
# expect <label> <config show output> <key> <value> [<source pattern>]
expect() {
  local got
  got=$(value "$2" "$3")
  [ "$got" = "$4" ] || { cat "$2" >&2; fail "$1: $3 is $got, expected $4"; }
  if [ -n "${5:-}" ]; then
    grep -E "^$3 " "$2" | grep -Eq "# .*$5" || { cat "$2" >&2; fail "$1: $3 does not come from /$5/"; }
  fi
}
# Runs with only the pod's environment: no stray LINEAGE_*, NATS_URL (the --nats flag's env) etc.
podenv() { env -i PATH="$tmp/shim:/usr/local/bin:/usr/bin:/bin" RUST_LOG=info "$@"; }

# loads <name> <voters> <expected: cluster nats_url http_addr max_depth lease_ms lease_hb raft_hb
#       election_min election_max> [helm args...]
loads() {
  local name=$1 n=$2 cluster=$3 nats=$4 http=$5 depth=$6 lease=$7 lease_hb=$8 hb=$9 emin=${10} emax=${11}
  shift 11
  helm template t "$CHART" "$@" >"$tmp/$name.yaml" 2>"$tmp/$name.err" \
    || { cat "$tmp/$name.err" >&2; fail "helm template $*"; }
  local toml=$tmp/$name.toml
  extract_toml "$tmp/$name.yaml" >"$toml"
  grep -q '^\[lease\]$' "$toml" || fail "$name: could not extract lineage.toml from the ConfigMap"
  extract_entrypoint "$tmp/$name.yaml" >"$tmp/$name.entrypoint.sh"
  grep -q '^exec lineage node --config /etc/lineage/lineage.toml$' "$tmp/$name.entrypoint.sh" \
    || fail "$name: could not extract the voters' entrypoint snippet"
  # The image's `lineage`, as the entrypoint execs it: `node --config /etc/lineage/lineage.toml`
  # becomes `config show` on the rendered file (same loader, same environment).
  mkdir -p "$tmp/shim"
  cat >"$tmp/shim/lineage" <<SH
#!/bin/sh
[ "\$*" = "node --config /etc/lineage/lineage.toml" ] || { echo "shim: unexpected arguments: \$*" >&2; exit 2; }
exec "$bin" config show --config "$toml"
SH
  chmod +x "$tmp/shim/lineage"

  local voters="{ 1 = \"t-lineage-voter-0\""
  local i
  for i in $(seq 2 "$n"); do voters="$voters, $i = \"t-lineage-voter-$((i - 1))\""; done
  voters="$voters }"
  common() { # <label> <output>
    expect "$1" "$2" cluster "\"$cluster\"" "TOML file"
    expect "$1" "$2" nats_url "\"$nats\"" "TOML file"
    expect "$1" "$2" node.data_dir '"/var/lib/lineage"' "TOML file"
    expect "$1" "$2" node.http_addr "\"$http\"" "TOML file"
    expect "$1" "$2" registry.voters "$voters" "TOML file"
    expect "$1" "$2" registry.heartbeat_ms "$hb" "TOML file"
    expect "$1" "$2" registry.election_min_ms "$emin" "TOML file"
    expect "$1" "$2" registry.election_max_ms "$emax" "TOML file"
    expect "$1" "$2" limits.max_depth "$depth" "TOML file"
    expect "$1" "$2" lease.lease_ms "$lease" "TOML file"
    expect "$1" "$2" lease.heartbeat_ms "$lease_hb" "TOML file"
  }

  local ordinal pod out
  for ordinal in $(printf '%s\n' 0 $((n - 1)) | sort -u); do
    pod=t-lineage-voter-$ordinal
    out=$tmp/$name.$pod.out
    podenv POD_NAME="$pod" LINEAGE_NODE__ID="$pod" /bin/sh -c "$(cat "$tmp/$name.entrypoint.sh")" \
      >"$out" 2>"$out.err" || { cat "$out.err" >&2; fail "$name: $pod: the node refuses its config"; }
    common "$name $pod" "$out"
    expect "$name $pod" "$out" node.id "\"$pod\"" "environment"
    expect "$name $pod" "$out" registry.role '"voter"' "TOML file"
    expect "$name $pod" "$out" registry.raft_id "$((ordinal + 1))" "environment"
    if [ "$ordinal" = 0 ]; then
      expect "$name $pod" "$out" registry.bootstrap true "environment"
    else
      expect "$name $pod" "$out" registry.bootstrap false "TOML file"
    fi
    echo "check-chart: ok   $name: $pod loads (raft_id $((ordinal + 1)), bootstrap $(value "$out" registry.bootstrap))"
  done
  [ "$n" = 1 ] || { [ "$(value "$tmp/$name.t-lineage-voter-0.out" registry.bootstrap)" = true ] \
    && [ "$(value "$tmp/$name.t-lineage-voter-$((n - 1)).out" registry.bootstrap)" = false ]; } \
    || fail "$name: bootstrap must be set on ordinal 0 only"

  pod=t-lineage-worker-5d8f7c9b6-x2x4k
  out=$tmp/$name.worker.out
  podenv LINEAGE_NODE__ID="$pod" LINEAGE_REGISTRY__ROLE=client "$bin" config show --config "$toml" \
    >"$out" 2>"$out.err" || { cat "$out.err" >&2; fail "$name: worker: the node refuses its config"; }
  common "$name worker" "$out"
  expect "$name worker" "$out" node.id "\"$pod\"" "environment"
  expect "$name worker" "$out" registry.role '"client"' "environment"
  expect "$name worker" "$out" registry.bootstrap false "TOML file"
  echo "check-chart: ok   $name: worker loads (role client)"

  # Without its environment a pod is refused instead of posing as another node.
  if podenv "$bin" config show --config "$toml" >/dev/null 2>"$tmp/$name.noenv.err"; then
    fail "$name: lineage.toml without LINEAGE_NODE__ID should be refused"
  fi
  grep -q 'node.id' "$tmp/$name.noenv.err" || { cat "$tmp/$name.noenv.err" >&2; fail "$name: no-env error does not name node.id"; }
  if podenv LINEAGE_NODE__ID=t-lineage-voter-0 "$bin" config show --config "$toml" >/dev/null 2>"$tmp/$name.noraft.err"; then
    fail "$name: a voter without LINEAGE_REGISTRY__RAFT_ID should be refused"
  fi
  grep -q 'registry.raft_id' "$tmp/$name.noraft.err" || { cat "$tmp/$name.noraft.err" >&2; fail "$name: no-raft-id error does not name registry.raft_id"; }
  echo "check-chart: ok   $name: refused without the per-pod environment: $(sed 's/ (from .*//' "$tmp/$name.noenv.err"); $(sed 's/ (from .*//' "$tmp/$name.noraft.err")"
}
loads defaults 3 lineage nats://nats:4222 0.0.0.0:9464 8 3000 500 100 400 800
loads custom 5 prod_1 nats://nats.messaging:4222 0.0.0.0:9500 0 10000 2000 250 1000 2000 \
  --set voters=5 --set cluster.name=prod_1 --set nats.url=nats://nats.messaging:4222 --set http.port=9500 \
  --set limits.maxDepth=0 --set lease.leaseMs=10000 --set lease.heartbeatMs=2000 \
  --set registry.heartbeatMs=250 --set registry.electionMinMs=1000 --set registry.electionMaxMs=2000
loads one 1 lineage nats://nats:4222 0.0.0.0:9464 8 3000 500 100 400 800 --set voters=1
echo "check-chart: all checks passed"
