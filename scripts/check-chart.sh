#!/usr/bin/env bash
# Checks the Helm chart in charts/lineage: installs helm if missing (go install), then lints and
# renders it with the default values, with voters=1 and voters=5, and checks that voters=2 is
# refused by both the values schema and the template guard. No cluster needed. Exits non-zero on
# the first failure.
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
  [ "$(grep -c '^    \[\[registry.voters\]\]$' "$tmp/$name.yaml")" = "$n" ] || fail "$name: lineage.toml does not list $n voters"
  grep -q 'podManagementPolicy: Parallel' "$tmp/$name.yaml" || fail "$name: podManagementPolicy is not Parallel"
  if command -v python3 >/dev/null 2>&1 && python3 -c 'import yaml, tomllib' 2>/dev/null; then
    python3 - "$tmp/$name.yaml" "$n" <<'PY' || fail "$name: rendered YAML/TOML check"
import sys, yaml, tomllib
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
cm = next(d for d in docs if d["kind"] == "ConfigMap")
cfg = tomllib.loads(cm["data"]["lineage.toml"])
assert [v["raft_id"] for v in cfg["registry"]["voters"]] == list(range(1, int(sys.argv[2]) + 1)), cfg
assert cfg["registry"]["bootstrap"] is False
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
if helm template --help 2>/dev/null | grep -q -- --skip-schema-validation; then
  refuse "template guard" "voters must be 1, 3 or 5" --set voters=2 --skip-schema-validation
else
  echo "check-chart: skip template-guard check (this helm has no --skip-schema-validation; needs >= 3.16)"
fi
echo "check-chart: all checks passed"
