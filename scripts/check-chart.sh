#!/usr/bin/env bash
# Checks the Helm chart in charts/lineage without a cluster. Exits non-zero on the first failure.
#  1. helm lint --strict, and `helm template` of the default values and of every value set in
#     charts/lineage/ci/*-values.yaml (plus voters=5); for each: the structure (voters, the
#     per-pod environment, which PDBs/HPA/NetworkPolicy/ServiceMonitor exist, where NATS
#     credentials come from) and the rendered lineage.toml has only the node's keys
#     (config/lineage.toml; [nats] and [agents] as in the issue-9 contract) with the expected
#     values, and no secret value in any ConfigMap; the voters' direct Raft links
#     (registry.direct, issue 35): with ci/direct-values.yaml the voters' own lineage.toml
#     (ConfigMap key lineage-voter.toml, mounted as lineage.toml) is the shared one plus
#     [registry.direct] (listen, peers naming every voter by its headless-Service DNS name and
#     port, token_file at the token Secret's mount), the voters have the `raft` containerPort,
#     the headless Service the `raft` port, the NetworkPolicy lets only voters reach it, the
#     chart's token Secret (random, resource-policy keep) is the only Secret and its value is in
#     no ConfigMap; the workers and the test pod get none of it; every other value set renders
#     no [registry.direct], no raft port and no Secret;
#  2. every rendered manifest validated offline against the real Kubernetes schemas in strict
#     mode (PyPI kubernetes-validate, Kubernetes $K8S_VERSIONS); the ServiceMonitor and the
#     PrometheusRule (CRDs it has no schema for) are skipped by name. The validator is shown to refuse a typo'd field and a
#     value set of ours (a typo in extraEnv, which the values schema lets through);
#  3. bad values are refused by values.schema.json or the templates (voters=2, a null max depth,
#     streamReplicas=2, auth without a Secret, an acp profile without a command, direct Raft links
#     with NATS TLS (each of nats.tls.required, nats.tls.existingSecret, a tls:// URL), ...);
#  4. the rendered NATS permissions (natsPermissions) load into a real nats-server (-t) with the
#     JetStream settings the README gives; a running nats-server with them (127.0.0.1) refuses a
#     wrong password and lets each role (voter, worker, operator, observer) publish/subscribe what
#     it should and nothing it should not (nats-py); when config/nats-server.conf exists, the
#     chart grants the same subjects per role as that file for cluster "dev";
#  5. the operations pack (issue 37, O2), with promtool (tools/promtool, built by
#     scripts/install-deps.sh into ~/go/bin/promtool-v0.316.0; missing promtool fails the check):
#     `promtool check rules` on charts/lineage/monitoring/rules.yaml and on the rules of the
#     rendered PrometheusRule (the same groups, changed only as the values ask: shown with and
#     without overrides), `promtool test rules` with monitoring/rules-test.yaml on both, every
#     expression of the rules and of the Grafana dashboard (dashboards/lineage.json, each panel
#     query checked by promtool as a recording rule) names only the metrics and labels of
#     monitoring/metrics.txt; a typo'd expression, an unknown metric and a broken panel query
#     are shown to fail; the PrometheusRule and the ServiceMonitor are validated against the
#     prometheus-operator CRD schemas (npm @kubernetes-models/prometheus-operator in
#     tools/prometheus-operator-models), shown to refuse a bad interval and a number label;
#  6. when a lineage binary exists ($LINEAGE_BIN, else the newer of <target dir>/{debug,release}/
#     lineage, the target dir from cargo metadata, so CARGO_TARGET_DIR counts), it loads the
#     rendered lineage.toml as voter 0, the last voter and a worker would (`lineage config show`
#     with the pods' environment; the voters through the StatefulSet's own entrypoint snippet and
#     their own lineage.toml when the value set gives them one), checks the effective values, the
#     NATS and agent keys, that a password is <redacted>, that the direct set's voters load
#     registry.direct.{listen,peers,token_file} (the token file is read at start, not by `config
#     show`) while its workers have none and would refuse the voters' file, and that no other
#     value set's node has registry.direct.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/go/bin:/usr/local/go/bin"
CHART=${CHART:-charts/lineage}
K8S_VERSIONS=${K8S_VERSIONS:-"1.30.0 1.35.0"}

if ! command -v helm >/dev/null 2>&1; then
  command -v go >/dev/null 2>&1 || { echo "check-chart: helm is missing and so is go to install it" >&2; exit 1; }
  echo "check-chart: installing helm (go install helm.sh/helm/v3/cmd/helm@v3.22.0)"
  go install helm.sh/helm/v3/cmd/helm@v3.22.0
fi
echo "check-chart: $(helm version --short 2>/dev/null || helm version)"
if ! { command -v python3 >/dev/null 2>&1 && python3 -c 'import yaml, tomllib' 2>/dev/null; }; then
  echo "check-chart: python3 with PyYAML and tomllib (3.11+) is needed" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check-chart: FAIL: $*" >&2; exit 1; }

# ------------------------------------------------------------------ 1. lint and render
sets=(default)
for f in "$CHART"/ci/*-values.yaml; do sets+=("$(basename "$f" -values.yaml)"); done
# args <set>: the helm arguments of a value set.
args() { [ "$1" = default ] || echo "-f $CHART/ci/$1-values.yaml"; }

for set in "${sets[@]}"; do
  # shellcheck disable=SC2046
  helm lint --strict "$CHART" $(args "$set") >"$tmp/lint" 2>&1 || { cat "$tmp/lint" >&2; fail "helm lint $set"; }
done
echo "check-chart: ok   helm lint --strict (${sets[*]})"
helm lint --strict "$CHART" --set voters=5 >"$tmp/lint5" 2>&1 || { cat "$tmp/lint5" >&2; fail "helm lint voters=5"; }
echo "check-chart: ok   helm lint --strict --set voters=5"

# render <name> <expected voters> [helm args...]: renders, checks the structure shared by all.
render() {
  local name=$1 n=$2; shift 2
  helm template t "$CHART" "$@" >"$tmp/$name.yaml" 2>"$tmp/$name.err" \
    || { cat "$tmp/$name.err" >&2; fail "helm template $*"; }
  grep -q "^  replicas: $n$" "$tmp/$name.yaml" || fail "$name: StatefulSet does not have replicas: $n"
  [ "$(grep -m1 '^    voters = {' "$tmp/$name.yaml" | grep -o '[0-9] = "' | wc -l)" = "$n" ] || fail "$name: lineage.toml does not list $n voters"
  grep -q 'podManagementPolicy: Parallel' "$tmp/$name.yaml" || fail "$name: podManagementPolicy is not Parallel"
  grep -A1 'name: LINEAGE_REGISTRY__ROLE$' "$tmp/$name.yaml" | grep 'value: client$' >/dev/null || fail "$name: workers do not set LINEAGE_REGISTRY__ROLE=client"
  grep -q 'name: RUST_LOG$' "$tmp/$name.yaml" || fail "$name: RUST_LOG is not set"
  python3 - "$tmp/$name.yaml" "$n" "$name" <<'PY' || fail "$name: rendered YAML/TOML check"
import base64, json, re, sys, tomllib, yaml
path, n, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
def kinds(kind):
    return [d for d in docs if d["kind"] == kind]
def one(kind, component=None):
    found = [d for d in kinds(kind) if component is None
             or d["metadata"]["labels"].get("app.kubernetes.io/component") == component]
    assert len(found) == 1, f"{len(found)} {kind} {component or ''}"
    return found[0]
cm = next(d for d in kinds("ConfigMap") if "lineage.toml" in d["data"])
toml_text = cm["data"]["lineage.toml"]
cfg = tomllib.loads(toml_text)

# Exactly the keys of crates/lineage-node/src/config.rs (deny_unknown_fields), [nats] and
# [agents] as in the issue-9 contract: always-rendered keys must be there, the rest may be.
schema = {"cluster": None, "nats_url": None,
          "node": {"id", "data_dir", "http_addr"},
          "registry": {"role", "raft_id", "voters", "bootstrap", "heartbeat_ms", "election_min_ms", "election_max_ms"},
          "limits": {"max_depth"}, "lease": {"lease_ms", "heartbeat_ms", "takeover_after_ms"},
          "nats": {"tls_required", "stream_replicas", "update_streams"},
          "agents": {"allow_raw_commands"},
          "retention": {"disposed_after_ms", "request_results_ms"},
          "shutdown": {"grace_ms"}}
nats_optional = {"creds", "nkey_seed_file", "user", "password", "password_file", "token", "token_file",
                 "tls_ca", "tls_cert", "tls_key"}
profile_keys = {"driver", "command", "args", "env", "pass_env", "workdir", "prompt_timeout_ms", "tools", "modes", "tools_transport",
                "isolation", "sandbox_read_only", "sandbox_read_write", "description"}
assert set(cfg) == set(schema), sorted(cfg)
for table, keys in schema.items():
    if table == "nats":
        assert keys <= set(cfg[table]) <= keys | nats_optional, (table, sorted(cfg[table]))
    elif table == "agents":
        assert keys <= set(cfg[table]), (table, sorted(cfg[table]))
        for prof, body in cfg[table].items():
            if prof in keys:
                continue
            assert isinstance(body, dict) and set(body) <= profile_keys and "driver" in body, (prof, body)
            assert body["driver"] in ("acp", "script"), (prof, body)
            assert body["driver"] == "script" or body.get("command"), (prof, "acp without command")
            assert isinstance(body.get("args", []), list) and all(isinstance(a, str) for a in body.get("args", []))
            assert isinstance(body.get("pass_env", []), list)
            wd = body.get("workdir", "session")
            assert wd in ("session", "data_dir") or wd.startswith("/"), (prof, wd)
    elif table == "limits":
        assert keys <= set(cfg[table]) <= keys | {"idle_root_ms"}, (table, sorted(cfg[table]))
        idle = cfg[table].get("idle_root_ms")
        assert idle is None or (isinstance(idle, int) and 1 <= idle <= 2592000000), cfg[table]
    elif keys is not None:
        assert set(cfg[table]) == keys, (table, sorted(cfg[table]))
assert list(cfg["registry"]["voters"]) == [str(i) for i in range(1, n + 1)], cfg["registry"]["voters"]
assert isinstance(cfg["retention"]["disposed_after_ms"], int) and cfg["retention"]["disposed_after_ms"] >= 0, cfg["retention"]
assert isinstance(cfg["retention"]["request_results_ms"], int) and 60000 <= cfg["retention"]["request_results_ms"] <= 86400000, cfg["retention"]
grace_ms = cfg["shutdown"]["grace_ms"]
assert isinstance(grace_ms, int) and 0 <= grace_ms <= 3600000, cfg["shutdown"]
assert cfg["registry"]["bootstrap"] is False and cfg["registry"]["role"] == "voter"
assert cfg["node"]["data_dir"] == "/var/lib/lineage"
assert isinstance(cfg["limits"]["max_depth"], int) and cfg["limits"]["max_depth"] >= 0
nats = cfg["nats"]
methods = [k for k in ("creds", "nkey_seed_file", "user", "token_file") if k in nats]
assert len(methods) <= 1, f"more than one NATS auth method: {methods}"
assert ("user" in nats) == ("password_file" in nats), "user without password_file (or the reverse)"
assert ("tls_cert" in nats) == ("tls_key" in nats), "tls_cert without tls_key (or the reverse)"
for k in ("creds", "nkey_seed_file", "password_file", "token_file", "tls_ca", "tls_cert", "tls_key"):
    if k in nats:
        assert nats[k].startswith("/etc/lineage/nats/"), (k, nats[k])

# No secret value in any ConfigMap: credentials are files from Secrets; permissions use $ENV.
for d in kinds("ConfigMap"):
    for key, text in d["data"].items():
        assert not re.search(r"^\s*(password|token)\s*=", text, re.M), f"{key}: a password/token value in a ConfigMap"
        for m in re.finditer(r"^\s*password\s*:\s*(\S+)", text, re.M):
            assert re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", m.group(1)), f"{key}: password {m.group(1)!r} is not an $ENV reference"
# The only Secret the chart may create: the voters' Raft token (registry.direct without
# existingSecret); its value appears in no ConfigMap.
for secret in kinds("Secret"):
    assert name == "direct" and secret["metadata"]["name"] == "t-lineage-raft-token", \
        f"the chart creates Secret {secret['metadata']['name']} (they are the user's: existingSecret)"
    for value in secret["data"].values():
        for form in (value, base64.b64decode(value).decode()):
            for d in kinds("ConfigMap"):
                assert not any(form in text for text in d["data"].values()), f"the Raft token is in ConfigMap {d['metadata']['name']}"

# registry.direct: the shared lineage.toml never has it (a client node refuses the section);
# only the voters may get their own file, the raft port and the token.
assert "direct" not in cfg["registry"], "the shared lineage.toml has [registry.direct]: the workers would refuse it"
voter_toml = cm["data"].get("lineage-voter.toml")
assert set(cm["data"]) <= {"lineage.toml", "lineage-voter.toml"}, sorted(cm["data"])
def config_sources(pod):
    vol = next(v for v in pod["volumes"] if v["name"] == "config")
    return vol["projected"]["sources"]
def ports(pod):
    return {p["name"]: p for p in pod["containers"][0].get("ports", [])}
headless = next(d for d in kinds("Service") if d["spec"].get("clusterIP") == "None")

sts, dep = one("StatefulSet"), one("Deployment")
def spec(workload):
    return workload["spec"]["template"]["spec"]
def env(pod):
    return {e["name"]: e for e in pod["containers"][0].get("env", [])}
def secrets_of(pod):
    vol = next(v for v in pod["volumes"] if v["name"] == "config")
    return [s["secret"]["name"] for s in vol["projected"]["sources"] if "secret" in s]
test = next((d for d in kinds("Pod") if d["metadata"]["labels"].get("app.kubernetes.io/component") == "test"), None)
assert test is not None, "no helm test pod"
assert test["metadata"]["annotations"]["helm.sh/hook"] == "test"
assert test["spec"]["containers"][0].get("resources", {}).get("limits"), "the test pod has no resource limits"
for pod in (spec(sts), spec(dep), test["spec"]):
    c = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 10001
    assert c["securityContext"]["readOnlyRootFilesystem"] and not c["securityContext"]["allowPrivilegeEscalation"]
    assert {"name": "config", "mountPath": "/etc/lineage", "readOnly": True} in c["volumeMounts"]
for w in (sts, dep):
    c = spec(w)["containers"][0]
    assert all(k in c for k in ("startupProbe", "livenessProbe", "readinessProbe", "resources")), w["kind"]
    # K1: Kubernetes waits out the node's grace (running turns finish) and the rest of its shutdown.
    tgps = spec(w)["terminationGracePeriodSeconds"]
    assert isinstance(tgps, int) and tgps * 1000 > grace_ms, (w["kind"], tgps, grace_ms)
    for tsc in spec(w).get("topologySpreadConstraints", []):
        assert tsc["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] in ("voter", "worker")

# Workers and the test pod: never the voters' file, the token or the raft port.
for pod in (spec(dep), test["spec"]):
    assert config_sources(pod)[0]["configMap"]["items"] == [{"key": "lineage.toml", "path": "lineage.toml"}], config_sources(pod)[0]
    assert all("raft" not in item["path"] for s in config_sources(pod) if "secret" in s for item in s["secret"]["items"])
    assert "raft" not in ports(pod), ports(pod)
if name != "direct":
    # registry.direct is opt-in: nothing of it without registry.direct.enabled.
    assert voter_toml is None, "lineage-voter.toml without registry.direct.enabled"
    assert config_sources(spec(sts))[0]["configMap"]["items"] == [{"key": "lineage.toml", "path": "lineage.toml"}]
    assert "raft" not in ports(spec(sts)) and [p["name"] for p in headless["spec"]["ports"]] == ["http"], "a raft port without registry.direct.enabled"
    assert not kinds("Secret")
    for d in kinds("NetworkPolicy"):
        assert '"app.kubernetes.io/component": "voter"' not in json.dumps(d["spec"]), "a voters' rule in the NetworkPolicy without registry.direct.enabled"
    anns = [w["spec"]["template"]["metadata"]["annotations"]["checksum/config"] for w in (sts, dep)]
    assert anns[0] == anns[1], "voters and workers hash different configs"

pdbs = {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in kinds("PodDisruptionBudget")}
workers = dep["spec"].get("replicas")
hpa = kinds("HorizontalPodAutoscaler")
assert ("voter" in pdbs) == (n > 1), f"voter PDB with {n} voters: {pdbs}"
assert ("worker" in pdbs) == (bool(hpa) or (workers or 0) > 1), f"worker PDB with {workers} workers, hpa {bool(hpa)}: {pdbs}"
assert (workers is None) == bool(hpa), "replicas must be left to the HPA exactly when it exists"

# Per value set: what this set is for.
if name in ("default", "five"):
    assert grace_ms == 30000 and spec(sts)["terminationGracePeriodSeconds"] == spec(dep)["terminationGracePeriodSeconds"] == 45
    assert not methods and not kinds("NetworkPolicy") and not kinds("ServiceMonitor")
    # The operations pack is off by default: no PrometheusRule, no dashboard ConfigMap.
    assert not kinds("PrometheusRule") and not [d for d in kinds("ConfigMap")
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == "dashboard"]
    assert set(cfg["agents"]) == {"allow_raw_commands", "script", "acp-testagent"}, sorted(cfg["agents"])
    assert cfg["agents"]["allow_raw_commands"] is False
    assert cfg["agents"]["acp-testagent"] == {"driver": "acp", "command": "lineage-acp-testagent", "args": [], "env": {},
        "pass_env": [], "workdir": "session", "prompt_timeout_ms": 600000, "tools": False,
        "description": "deterministic ACP test agent"}, cfg["agents"]["acp-testagent"]
    assert nats == {"tls_required": False, "stream_replicas": 1, "update_streams": False}, nats
    assert secrets_of(spec(sts)) == secrets_of(spec(dep)) == secrets_of(test["spec"]) == []
    # sandbox.enabled is off: the pods are the hardened default (no user namespace, masked /proc).
    for pod in (spec(sts), spec(dep)):
        assert "hostUsers" not in pod and pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not {"procMount", "appArmorProfile"} & set(pod["containers"][0]["securityContext"])
elif name == "minimal":
    assert n == 1 and workers == 0 and not pdbs, (n, workers, pdbs)
    assert nats["nkey_seed_file"] == "/etc/lineage/nats/nkey.seed", nats
    assert secrets_of(spec(sts)) == secrets_of(test["spec"]) == ["lineage-nats-nkey"]
    assert env(test["spec"])["NATS_NKEY"]["value"] == "/etc/lineage/nats/nkey.seed"
elif name == "secure":
    assert cfg["cluster"] == "prod-eu" and cfg["nats_url"] == "tls://nats.messaging:4222"
    assert nats == {"user": "voter", "password_file": "/etc/lineage/nats/password", "tls_required": True,
                    "tls_ca": "/etc/lineage/nats/tls/ca.crt", "tls_cert": "/etc/lineage/nats/tls/tls.crt",
                    "tls_key": "/etc/lineage/nats/tls/tls.key", "stream_replicas": 3, "update_streams": True}, nats
    assert secrets_of(spec(sts)) == ["lineage-nats-voter", "lineage-nats-tls"], secrets_of(spec(sts))
    assert secrets_of(spec(dep)) == ["lineage-nats-worker", "lineage-nats-tls"], secrets_of(spec(dep))
    assert secrets_of(test["spec"]) == ["lineage-nats-observer", "lineage-nats-tls"], secrets_of(test["spec"])
    assert env(spec(dep))["LINEAGE_NATS__USER"]["value"] == "worker"
    assert "LINEAGE_NATS__USER" not in env(spec(sts))
    te = env(test["spec"])
    assert te["NATS_USER"]["value"] == "observer"
    assert te["NATS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "lineage-nats-observer", "key": "password"}
    assert te["NATS_CA"]["value"] == "/etc/lineage/nats/tls/ca.crt" and te["NATS_KEY"]["value"] == "/etc/lineage/nats/tls/tls.key"
    assert "--tls-required" in test["spec"]["containers"][0]["args"]
    for w in (sts, dep):
        assert spec(w)["containers"][0]["envFrom"] == [{"secretRef": {"name": "agent-api-keys"}}]
    assert cfg["agents"]["claude"]["pass_env"] == ["ANTHROPIC_API_KEY"] and cfg["agents"]["claude"]["tools"] is True
    assert cfg["agents"]["fixed-dir"]["args"] == ["--name", "two words"]
    assert cfg["agents"]["fixed-dir"]["env"] == {"LANG": "C.UTF-8", "QUOTE": 'say "hi"'}
    np = one("NetworkPolicy")
    assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert np["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "lineage", "app.kubernetes.io/instance": "t"}
    assert [p["port"] for p in np["spec"]["egress"][0]["ports"]] == [4222]
    assert np["spec"]["ingress"][0]["ports"] == [{"port": "http", "protocol": "TCP"}]
    perms = one("ConfigMap", "nats-permissions")
    assert perms["metadata"]["namespace"] == "messaging"
    conf = perms["data"]["lineage-permissions.conf"]
    for user in ("voter", "worker", "operator", "observer"):
        assert f'user: "{user}"' in conf and f"$LINEAGE_NATS_{user.upper()}_PASSWORD" in conf, user
    assert '"lineage.prod-eu.raft.>"' in conf and '"$JS.ACK.LINEAGE_PROD_EU_INBOX.>"' in conf
elif name == "large":
    assert n == 5 and hpa and one("ServiceMonitor")
    # The operations pack (monitoring.rules, monitoring.dashboard); their content: section 5.
    pr = one("PrometheusRule")
    assert pr["apiVersion"] == "monitoring.coreos.com/v1" and pr["metadata"]["labels"]["release"] == "prometheus", pr["metadata"]
    assert pr["metadata"]["labels"]["app.kubernetes.io/component"] == "alerts" and pr["spec"]["groups"], pr["metadata"]
    dash = one("ConfigMap", "dashboard")
    assert dash["metadata"]["name"] == "t-lineage-dashboard", dash["metadata"]
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1", dash["metadata"]["labels"]
    assert dash["metadata"]["annotations"] == {"grafana_folder": "lineage"}, dash["metadata"]
    assert set(dash["data"]) == {"lineage.json"} and json.loads(dash["data"]["lineage.json"])["uid"] == "lineage-overview"
    assert grace_ms == 120500 and spec(sts)["terminationGracePeriodSeconds"] == spec(dep)["terminationGracePeriodSeconds"] == 136
    assert nats["creds"] == "/etc/lineage/nats/nats.creds" and nats["tls_ca"] == "/etc/lineage/nats/tls/ca.crt"
    assert "tls_cert" not in nats
    assert secrets_of(spec(sts)) == secrets_of(spec(dep)) == ["lineage-nats-creds", "lineage-nats-ca"]
    assert env(test["spec"])["NATS_CREDS"]["value"] == "/etc/lineage/nats/nats.creds"
    aff = spec(sts)["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" in aff
    assert spec(dep)["topologySpreadConstraints"][0]["matchLabelKeys"] == ["pod-template-hash"]
elif name == "token":
    assert nats["token_file"] == "/etc/lineage/nats/token" and workers == 1 and "worker" not in pdbs
    assert env(test["spec"])["NATS_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "lineage-nats-token", "key": "token"}
    assert cfg["agents"]["allow_raw_commands"] is True
    assert set(cfg["agents"]) == {"allow_raw_commands", "script", "echo"}, sorted(cfg["agents"])
elif name == "sandbox":
    # sandbox.enabled: voters and workers may make bubblewrap sandboxes; the rest stays hardened.
    for pod in (spec(sts), spec(dep)):
        assert pod["hostUsers"] is False, pod.get("hostUsers")
        assert pod["securityContext"]["seccompProfile"] == {"type": "Unconfined"}, pod["securityContext"]
        assert pod["securityContext"]["runAsUser"] == 10001 and pod["securityContext"]["runAsNonRoot"] is True
        assert pod["containers"][0]["securityContext"] == {"runAsNonRoot": True, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "procMount": "Unmasked", "appArmorProfile": {"type": "Unconfined"}}, pod["containers"][0]["securityContext"]
    assert "hostUsers" not in test["spec"] and test["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "procMount" not in test["spec"]["containers"][0]["securityContext"]
    a = cfg["agents"]
    assert a["acp-testagent"]["isolation"] == "sandbox" and "sandbox_read_only" not in a["acp-testagent"], a["acp-testagent"]
    assert a["confined"]["isolation"] == "sandbox", a["confined"]
    assert a["confined"]["sandbox_read_only"] == ["/usr/local/lib/node_modules", "/etc/lineage-agent"], a["confined"]
    assert a["confined"]["sandbox_read_write"] == ["/var/lib/lineage/shared-cache"], a["confined"]
    assert a["trusted"]["isolation"] == "none" and a["trusted"]["sandbox_read_only"] == [], a["trusted"]
elif name == "direct":
    # registry.direct (issue 35): the voters' own lineage.toml is the shared one plus
    # [registry.direct]; every voter named by its stable DNS name through the headless Service.
    port = 7201
    assert voter_toml is not None, "no lineage-voter.toml in the ConfigMap"
    vcfg = tomllib.loads(voter_toml)
    direct = vcfg["registry"].pop("direct", None)
    assert vcfg == cfg, "the voters' lineage.toml differs from the shared one beyond [registry.direct]"
    sts_name, svc = sts["metadata"]["name"], sts["spec"]["serviceName"]
    assert svc == headless["metadata"]["name"] == "t-lineage-voter-headless", (svc, headless["metadata"]["name"])
    assert direct == {"listen": f"0.0.0.0:{port}",
                      "peers": {str(i + 1): f"{sts_name}-{i}.{svc}:{port}" for i in range(n)},
                      "token_file": "/etc/lineage/raft/token"}, direct
    assert re.search(r"^\[registry\.direct\]$", voter_toml, re.M)
    # The voters mount it as lineage.toml, and the token from the chart's Secret beside it.
    pod = spec(sts)
    src = config_sources(pod)
    assert src[0]["configMap"]["items"] == [{"key": "lineage-voter.toml", "path": "lineage.toml"}], src[0]
    raft_src = [s["secret"] for s in src if "secret" in s]
    assert raft_src == [{"name": "t-lineage-raft-token", "items": [{"key": "token", "path": "raft/token", "mode": 0o440}]}], raft_src
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "config")
    assert mount == {"name": "config", "mountPath": "/etc/lineage", "readOnly": True}, mount
    assert direct["token_file"] == f"{mount['mountPath']}/{raft_src[0]['items'][0]['path']}"
    # 0440 root:fsGroup: readable by the node (runAsGroup/fsGroup 10001), by nobody else.
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"] == 10001
    assert ports(pod)["raft"] == {"name": "raft", "containerPort": port, "protocol": "TCP"}, ports(pod)
    assert {"name": "raft", "port": port, "targetPort": "raft", "protocol": "TCP"} in headless["spec"]["ports"], headless["spec"]["ports"]
    assert headless["spec"]["publishNotReadyAddresses"] is True, "voters must resolve each other before they are ready"
    # A change of [registry.direct] rolls the voters: they hash their own file.
    anns = [w["spec"]["template"]["metadata"]["annotations"]["checksum/config"] for w in (sts, dep)]
    assert anns[0] != anns[1], "the voters' checksum/config does not cover lineage-voter.toml"
    # The token Secret: the chart's, random, alphanumeric, 48 characters, kept on uninstall.
    (secret,) = kinds("Secret")
    assert secret["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}, secret["metadata"]
    assert set(secret["data"]) == {"token"} and secret.get("type") == "Opaque", secret
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert re.fullmatch(r"[A-Za-z0-9]{48}", token), "the token is not 48 alphanumeric characters"
    # NetworkPolicy: the raft port from and to the voters only.
    np = one("NetworkPolicy")
    voters_sel = [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "lineage", "app.kubernetes.io/instance": "t",
                                                   "app.kubernetes.io/component": "voter"}}}]
    raft_in = [r for r in np["spec"]["ingress"] if any(p.get("port") == port for p in r.get("ports", []))]
    raft_out = [r for r in np["spec"]["egress"] if any(p.get("port") == port for p in r.get("ports", []))]
    assert raft_in == [{"from": voters_sel, "ports": [{"port": port, "protocol": "TCP"}]}], raft_in
    assert raft_out == [{"to": voters_sel, "ports": [{"port": port, "protocol": "TCP"}]}], raft_out
    assert any(r.get("ports") == [{"port": "http", "protocol": "TCP"}] for r in np["spec"]["ingress"]), "the metrics rule is gone"
    # Nothing else changes: no NATS TLS (refused with direct links), the default agents.
    assert nats == {"tls_required": False, "stream_replicas": 1, "update_streams": False}, nats
    assert secrets_of(spec(dep)) == secrets_of(test["spec"]) == []
else:
    raise SystemExit(f"no expectations for value set {name}: add them to scripts/check-chart.sh")
PY
  echo "check-chart: ok   helm template ${*:-(default values)} (voters=$n)"
}
for set in "${sets[@]}"; do
  n=3
  [ "$set" = minimal ] && n=1
  [ "$set" = large ] && n=5
  # shellcheck disable=SC2046
  render "$set" "$n" $(args "$set")
done
render five 5 --set voters=5
# registry.direct's token Secret: random per render (helm template has no cluster for `lookup`;
# on one, an upgrade keeps the token it finds), and none with registry.direct.existingSecret,
# whose key the voters mount instead.
token_of() { python3 -c 'import sys, yaml
(s,) = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Secret"]
print(s["data"]["token"])' "$1"; }
helm template t "$CHART" -f "$CHART/ci/direct-values.yaml" >"$tmp/direct2.yaml" 2>"$tmp/direct2.err" || { cat "$tmp/direct2.err" >&2; fail "helm template direct (again)"; }
[ "$(token_of "$tmp/direct.yaml")" != "$(token_of "$tmp/direct2.yaml")" ] || fail "direct: the chart's Raft token is the same in two renders (not random)"
helm template t "$CHART" -f "$CHART/ci/direct-values.yaml" --set registry.direct.existingSecret=my-raft \
  --set registry.direct.secretKey=raft.token >"$tmp/direct-own.yaml" 2>"$tmp/direct-own.err" || { cat "$tmp/direct-own.err" >&2; fail "helm template direct with existingSecret"; }
python3 - "$tmp/direct-own.yaml" <<'PY' || fail "direct with registry.direct.existingSecret: a Secret is rendered or the voters do not mount the given one"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
assert not [d for d in docs if d["kind"] == "Secret"], "a Secret is rendered with registry.direct.existingSecret"
sts = next(d for d in docs if d["kind"] == "StatefulSet")
vol = next(v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == "config")
secrets = [s["secret"] for s in vol["projected"]["sources"] if "secret" in s]
assert secrets == [{"name": "my-raft", "items": [{"key": "raft.token", "path": "raft/token", "mode": 0o440}]}], secrets
PY
echo "check-chart: ok   registry.direct: a fresh random token per render; with existingSecret=my-raft (key raft.token) no Secret, the voters mount my-raft"

# ------------------------------------------------------------------ 2. Kubernetes schemas
# validate <file>...: strict validation of every document against each of $K8S_VERSIONS.
validate() {
  python3 - "$K8S_VERSIONS" "$@" <<'PY'
import sys, yaml
import kubernetes_validate as kv
versions, files = sys.argv[1].split(), sys.argv[2:]
# CRDs of the prometheus-operator: kubernetes-validate has no schema for them (section 5 checks
# them against the operator's CRD schemas, and the PrometheusRule's rules with promtool).
SKIP = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
bad = 0
for path in files:
    for doc in yaml.safe_load_all(open(path)):
        if not doc:
            continue
        what = f"{doc['kind']}/{doc['metadata']['name']}"
        if (doc["apiVersion"], doc["kind"]) in SKIP:
            print(f"check-chart: skip {path.rsplit('/', 1)[-1]}: {what} ({doc['apiVersion']} is a CRD kubernetes-validate has no schema for)")
            continue
        for v in versions:
            try:
                kv.validate(doc, v, strict=True)
            except kv.ValidationError as e:
                path_ = ".".join(str(p) for p in e.path)
                print(f"check-chart: {path.rsplit('/', 1)[-1]}: {what} is invalid for Kubernetes {v} (strict): {path_}: {e.message}", file=sys.stderr)
                bad += 1
            except kv.SchemaNotFoundError as e:
                print(f"check-chart: {path.rsplit('/', 1)[-1]}: {what}: no schema for Kubernetes {v}: {e}", file=sys.stderr)
                bad += 1
sys.exit(1 if bad else 0)
PY
}
if python3 -c 'import kubernetes_validate' 2>/dev/null; then
  kvv=$(python3 -c 'import kubernetes_validate; print(kubernetes_validate.__version__)')
  files=()
  for set in "${sets[@]}" five; do files+=("$tmp/$set.yaml"); done
  validate "${files[@]}" >"$tmp/validate.out" 2>&1 || { cat "$tmp/validate.out" >&2; fail "Kubernetes schema validation"; }
  sort -u "$tmp/validate.out"
  count=$(cat "${files[@]}" | grep -c '^kind: ')
  echo "check-chart: ok   kubernetes-validate $kvv --strict, Kubernetes $K8S_VERSIONS: $count manifests of ${sets[*]} five"
  # The validator refuses real mistakes: a typo'd field in a rendered manifest ...
  sed '0,/readinessProbe:/s//readinesProbe:/' "$tmp/default.yaml" >"$tmp/typo.yaml"
  if validate "$tmp/typo.yaml" >"$tmp/typo.out" 2>&1; then fail "strict validation accepts a typo'd field (readinesProbe)"; fi
  grep -q "'readinesProbe' was unexpected" "$tmp/typo.out" || { cat "$tmp/typo.out" >&2; fail "typo: unexpected message"; }
  echo "check-chart: ok   refused: $(grep -m1 readinesProbe "$tmp/typo.out" | sed 's/^check-chart: //')"
  # ... and a value set the values schema lets through (extraEnv is free-form) but Kubernetes does not.
  helm template t "$CHART" --set-json 'extraEnv=[{"name":"LINEAGE_LIMITS__MAX_DEPTH","valeu":"4"}]' >"$tmp/badenv.yaml" \
    || fail "helm template with a typo in extraEnv should render (the values schema does not check env entries)"
  if validate "$tmp/badenv.yaml" >"$tmp/badenv.out" 2>&1; then fail "strict validation accepts extraEnv [{name, valeu}]"; fi
  grep -q "'valeu' was unexpected" "$tmp/badenv.out" || { cat "$tmp/badenv.out" >&2; fail "extraEnv typo: unexpected message"; }
  echo "check-chart: ok   refused --set-json extraEnv=[{name,valeu}]: $(grep -m1 valeu "$tmp/badenv.out" | sed 's/^check-chart: //')"
else
  echo "check-chart: skip Kubernetes schema validation (pip install kubernetes-validate; scripts/install-deps.sh tries it)"
fi

# ------------------------------------------------------------------ 3. bad values are refused
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
refuse "values.schema.json" "streamReplicas" --set nats.streamReplicas=2
refuse "values.schema.json" "existingSecret" --set nats.auth.method=creds
refuse "values.schema.json" "/nats/auth/user|user" --set nats.auth.method=userPassword --set nats.auth.existingSecret=s
refuse "values.schema.json" "method" --set nats.auth.method=password --set nats.auth.existingSecret=s
refuse "values.schema.json" "command" --set agents.profiles.x.driver=acp
refuse "values.schema.json" "driver" --set agents.profiles.x.command=sh
refuse "values.schema.json" "additional properties 'cmd'|cmd" --set agents.profiles.acp-testagent.cmd=sh
refuse "values.schema.json" "workdir" --set agents.profiles.acp-testagent.workdir=relative/dir
refuse "values.schema.json" "allow_raw_commands" --set agents.profiles.allow_raw_commands.driver=script
refuse "values.schema.json" "whenUnsatisfiable" --set-json 'workers.topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"zone","whenUnsatisfiable":"Maybe"}]'
refuse "values.schema.json" "nkey" --set natsPermissions.users.voter.nkey=not-a-key
refuse "values.schema.json" "graceMs" --set shutdown.graceMs=-1
refuse "values.schema.json" "graceMs" --set shutdown.graceMs=3600001
refuse "template guard" "terminationGracePeriodSeconds \(30\) must be above shutdown.graceMs \(30 s\)" --set terminationGracePeriodSeconds=30
refuse "template guard" "lease.heartbeatMs" --set lease.heartbeatMs=3000
refuse "template guard" "registry.heartbeatMs" --set registry.electionMinMs=900
refuse "template guard" "nats.tls.clientCert is true" --set nats.tls.clientCert=true
refuse "template guard" "nats.auth.workers is set but nats.auth.method is empty" --set nats.auth.workers.existingSecret=w
refuse "template guard" "nats.tls.workers.existingSecret is set" --set nats.tls.workers.existingSecret=w
refuse "template guard" "natsPermissions.users.voter: set passwordEnv" --set natsPermissions.enabled=true --set natsPermissions.users.voter.passwordEnv=
# registry.direct: authenticated, not encrypted links; refused with any NATS TLS value.
tls_msg="registry.direct.enabled is true but NATS uses TLS"
tls_why="the direct Raft links are authenticated, not encrypted, so Raft would leave TLS; disable one of them"
refuse "template guard" "$tls_msg \(nats.tls.required\): $tls_why" --set registry.direct.enabled=true --set nats.tls.required=true
refuse "template guard" "$tls_msg \(nats.tls.existingSecret\): $tls_why" --set registry.direct.enabled=true --set nats.tls.existingSecret=lineage-nats-tls
refuse "template guard" "$tls_msg \(nats.url tls://nats:4222\): $tls_why" --set registry.direct.enabled=true --set nats.url=tls://nats:4222
refuse "template guard" "$tls_msg \(nats.tls.required, nats.tls.existingSecret, nats.url tls://nats.messaging:4222\)" \
  -f "$CHART/ci/direct-values.yaml" -f "$CHART/ci/secure-values.yaml"
refuse "template guard" "registry.direct.port and http.port are both 9464" --set registry.direct.enabled=true --set registry.direct.port=9464
refuse "values.schema.json" "/registry/direct/port|port" --set registry.direct.port=0
refuse "values.schema.json" "additional properties 'token'|token" --set registry.direct.token=an-inline-secret
if helm template --help 2>/dev/null | grep -- --skip-schema-validation >/dev/null; then
  refuse "template guard" "voters must be 1, 3 or 5" --set voters=2 --skip-schema-validation
  refuse "template guard" "limits.maxDepth must be" --set limits.maxDepth=null --skip-schema-validation
  refuse "template guard" "nats.auth.existingSecret is empty" --set nats.auth.method=token --skip-schema-validation
  refuse "template guard" "agents.profiles.x: driver acp needs a command" --set agents.profiles.x.driver=acp --skip-schema-validation
else
  echo "check-chart: skip template-guard checks (this helm has no --skip-schema-validation; needs >= 3.16)"
fi

# ------------------------------------------------------------------ 4. NATS permissions
# nats_conf <rendered manifest> <out>: the permissions snippet of the ConfigMap.
nats_conf() {
  python3 -c 'import sys, yaml
cm = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ConfigMap" and "lineage-permissions.conf" in d["data"])
open(sys.argv[2], "w").write(cm["data"]["lineage-permissions.conf"])' "$1" "$2"
}
helm template t "$CHART" --set natsPermissions.enabled=true --set cluster.name=dev >"$tmp/perms-dev.yaml" 2>"$tmp/perms.err" \
  || { cat "$tmp/perms.err" >&2; fail "helm template natsPermissions"; }
mkdir -p "$tmp/nats/nats-config" "$tmp/nats/lineage-nats"
nats_conf "$tmp/perms-dev.yaml" "$tmp/nats/lineage-nats/lineage-permissions.conf"
if command -v nats-server >/dev/null 2>&1; then
  # The NATS chart's nats.conf with the README's values: JetStream, sync_interval: always, and
  # the include (relative to /etc/nats-config/nats.conf; the ConfigMap mounted at /etc/lineage-nats).
  cat >"$tmp/nats/nats-config/nats.conf" <<EOF
port: -1
jetstream { store_dir: "$tmp/nats/js", sync_interval: always }
include ../lineage-nats/lineage-permissions.conf
EOF
  pw() { env LINEAGE_NATS_VOTER_PASSWORD=v LINEAGE_NATS_WORKER_PASSWORD=w LINEAGE_NATS_OPERATOR_PASSWORD=o LINEAGE_NATS_OBSERVER_PASSWORD=b "$@"; }
  pw nats-server -c "$tmp/nats/nats-config/nats.conf" -t >"$tmp/nats-t.out" 2>&1 \
    || { cat "$tmp/nats-t.out" >&2; fail "nats-server -t refuses the rendered natsPermissions"; }
  echo "check-chart: ok   nats-server $(nats-server --version | awk '{print $2}') -t accepts the rendered permissions (included as the README says)"
  if nats-server -c "$tmp/nats/nats-config/nats.conf" -t >"$tmp/nats-t.out" 2>&1; then
    fail "nats-server accepted the permissions without the password variables"
  fi
  grep -q "LINEAGE_NATS_VOTER_PASSWORD" "$tmp/nats-t.out" || { cat "$tmp/nats-t.out" >&2; fail "nats-server: unexpected error without the password variables"; }
  echo "check-chart: ok   nats-server refuses them when the server lacks \$LINEAGE_NATS_VOTER_PASSWORD (no built-in password)"
  # A real nats-server with those permissions (127.0.0.1, random port): what each role may do.
  if python3 -c 'import nats' 2>/dev/null; then
    echo "listen: 127.0.0.1:-1" >>"$tmp/nats/nats-config/nats.conf"
    echo "ports_file_dir: \"$tmp/nats\"" >>"$tmp/nats/nats-config/nats.conf"
    # Not through `pw`: a backgrounded shell function is a subshell, and killing its pid
    # would leave the nats-server running. `env` execs nats-server, so `$!` is the server.
    env LINEAGE_NATS_VOTER_PASSWORD=v LINEAGE_NATS_WORKER_PASSWORD=w LINEAGE_NATS_OPERATOR_PASSWORD=o LINEAGE_NATS_OBSERVER_PASSWORD=b \
      nats-server -c "$tmp/nats/nats-config/nats.conf" >"$tmp/nats/log" 2>&1 &
    nats_pid=$!
    trap 'kill "$nats_pid" 2>/dev/null; wait "$nats_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
    for _ in $(seq 50); do ls "$tmp"/nats/*.ports >/dev/null 2>&1 && break; sleep 0.1; done
    url=$(python3 -c 'import glob, json, sys; print(json.load(open(glob.glob(sys.argv[1] + "/*.ports")[0]))["nats"][0])' "$tmp/nats") \
      || { cat "$tmp/nats/log" >&2; fail "nats-server with the rendered permissions did not start"; }
    cat >"$tmp/probe.py" <<'PY'
import asyncio, sys
import nats
from nats.errors import Error as NatsError

URL, CLUSTER = sys.argv[1], sys.argv[2]
PW = {"voter": "v", "worker": "w", "operator": "o", "observer": "b"}
fails = []

async def connect(user, password):
    errors = []
    async def on_error(e):
        errors.append(str(e))
    nc = await nats.connect(URL, user=user, password=password, error_cb=on_error,
                            allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2)
    return nc, errors

async def pub(user, subject, allowed):
    nc, errors = await connect(user, PW[user])
    await nc.publish(subject, b"probe")
    await nc.flush()
    await asyncio.sleep(0.05)
    await nc.close()
    denied = any("permissions violation" in e.lower() for e in errors)
    if denied == allowed:
        fails.append(f"{user} publish {subject}: {'denied' if denied else 'allowed'}, expected {'allowed' if allowed else 'denied'}")
    else:
        print(f"check-chart: ok   {user} {'may' if allowed else 'may not'} publish {subject}")

async def sub(user, subject, allowed):
    nc, errors = await connect(user, PW[user])
    await nc.subscribe(subject)
    await nc.flush()
    await asyncio.sleep(0.05)
    await nc.close()
    denied = any("permissions violation" in e.lower() for e in errors)
    if denied == allowed:
        fails.append(f"{user} subscribe {subject}: {'denied' if denied else 'allowed'}, expected {'allowed' if allowed else 'denied'}")
    else:
        print(f"check-chart: ok   {user} {'may' if allowed else 'may not'} subscribe {subject}")

async def main():
    try:
        nc, _ = await connect("worker", "wrong")
        await nc.close()
        fails.append("a wrong password was accepted")
    except Exception as e:
        print(f"check-chart: ok   a wrong password is refused ({type(e).__name__}: {e})")
    c = f"lineage.{CLUSTER}"
    await pub("voter", f"{c}.registry.write", True)
    await pub("voter", f"{c}.raft.1.vote", True)
    await pub("voter", "lineage.other.registry.write", False)
    await pub("worker", f"{c}.registry.write", False)
    await pub("worker", f"{c}.registry.1.write", False)
    await pub("worker", f"{c}.raft.1.vote", False)
    await pub("worker", f"{c}.registry.write.t-lineage-worker-5d8f7c9b6-x2x4k", True)
    await pub("worker", f"{c}.registry.write.t-lineage-voter-0", False)
    await pub("worker", f"{c}.registry.2.write.t-lineage-voter-1", False)
    await pub("worker", f"{c}.registry.write.read", False)
    await pub("worker", f"$JS.API.STREAM.CREATE.LINEAGE_{CLUSTER.upper().replace('-', '_')}_INBOX", False)
    await sub("worker", f"{c}.node.t-lineage-voter-0.*", False)
    await sub("worker", f"{c}.node.t-lineage-worker-5d8f7c9b6-x2x4k.*", True)
    await pub("operator", f"{c}.ctl.spawn", True)
    await pub("operator", f"{c}.registry.write", False)
    await pub("observer", f"{c}.ctl.spawn", False)
    await pub("observer", f"{c}.ctl.status", True)
    await pub("observer", f"{c}.node.t-lineage-voter-0.status", True)
    await pub("observer", f"{c}.registry.read", True)
    await sub("observer", f"{c}.parent.>", True)
    await sub("observer", f"{c}.ctl.>", False)
    # The registry's read service (issue 15): its members serve discovery, observers ask.
    await sub("voter", "$SRV.PING.lineage-registry", True)
    await sub("voter", "$SRV.INFO.lineage-registry.x", True)
    await sub("worker", "$SRV.PING.lineage-registry", False)
    await pub("observer", "$SRV.INFO.lineage-registry", True)
    await pub("observer", "$SRV.STATS.lineage-registry.x", True)
    await pub("operator", "$SRV.INFO.lineage-registry", True)
    inbox = f"LINEAGE_{CLUSTER.upper().replace('-', '_')}_INBOX"
    await pub("observer", f"$JS.API.CONSUMER.INFO.{inbox}.inbox-x", True)
    await pub("observer", f"$JS.API.CONSUMER.DELETE.{inbox}.inbox-x", False)
    # Workspaces (issue 39): nodes and the operator use the bucket, the voters make it.
    bucket = f"LINEAGE_{CLUSTER.upper().replace('-', '_')}_WORKSPACES"
    await pub("voter", f"$JS.API.STREAM.CREATE.OBJ_{bucket}", True)
    await pub("worker", f"$JS.API.STREAM.CREATE.OBJ_{bucket}", False)
    await pub("worker", f"$O.{bucket}.C.x", True)
    await pub("operator", f"$JS.API.DIRECT.GET.OBJ_{bucket}", True)
    await pub("observer", f"$O.{bucket}.C.x", False)
    await pub("operator", "$O.LINEAGE_OTHER_WORKSPACES.C.x", False)

asyncio.run(main())
for f in fails:
    print(f"check-chart: {f}", file=sys.stderr)
sys.exit(1 if fails else 0)
PY
    python3 "$tmp/probe.py" "$url" dev || fail "the rendered permissions grant or deny the wrong subjects (nats-server $url)"
    kill "$nats_pid"; wait "$nats_pid" 2>/dev/null || true
    trap 'rm -rf "$tmp"' EXIT
  else
    echo "check-chart: skip probing the rendered permissions in a running nats-server (pip install nats-py)"
  fi
else
  echo "check-chart: skip nats-server -t of the rendered permissions (no nats-server; scripts/install-deps.sh installs it)"
fi
NATS_SERVER_CONF=${NATS_SERVER_CONF:-config/nats-server.conf}
if [ -f "$NATS_SERVER_CONF" ]; then
  python3 - "$tmp/nats/lineage-nats/lineage-permissions.conf" "$NATS_SERVER_CONF" <<'PY' || fail "the chart's natsPermissions and $NATS_SERVER_CONF disagree"
import re, sys

def parse(text):
    """A NATS server config (maps, arrays, quoted/bare strings, $VARs, comments, include)."""
    i = 0
    def ws():
        nonlocal i
        while i < len(text):
            if text[i] in " \t\r\n,;":
                i += 1
            elif text[i] == "#" or text.startswith("//", i):
                while i < len(text) and text[i] != "\n":
                    i += 1
            else:
                break
    def scalar():
        nonlocal i
        if text[i] in "\"'":
            q, j = text[i], i + 1
            while text[j] != q:
                j += 2 if text[j] == "\\" else 1
            s, i = text[i + 1:j], j + 1
            return s
        j = i
        while j < len(text) and text[j] not in " \t\r\n,;}]#":
            j += 1
        s, i = text[i:j], j
        return s
    def value():
        nonlocal i
        ws()
        if text[i] == "{":
            i += 1
            return mapping("}")
        if text[i] == "[":
            i += 1
            out = []
            while True:
                ws()
                if text[i] == "]":
                    i += 1
                    return out
                out.append(value())
        return scalar()
    def mapping(end):
        nonlocal i
        out = {}
        while True:
            ws()
            if i >= len(text) or text[i] == end:
                i += 1
                return out
            j = i
            while text[j] not in " \t\r\n:={":
                j += 1
            key, i = text[i:j].strip("\"'"), j
            while text[i] in " \t:=":
                i += 1
            if key == "include":
                scalar()
                continue
            out[key] = value()
    return mapping(None)

def users(tree):
    found = []
    def walk(x):
        if isinstance(x, dict):
            if "permissions" in x and ("user" in x or "nkey" in x):
                found.append(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(tree)
    return found

def roles(path):
    out = {}
    for u in users(parse(open(path).read())):
        name = str(u.get("user", u.get("nkey")))
        perms = u["permissions"]
        pub = perms.get("publish", {})
        pub = pub.get("allow", []) if isinstance(pub, dict) else pub
        # voter / operator / observer by name; a worker is named after its node id (or "worker")
        # and may write to the registry as that node only.
        if name in ("voter", "operator", "observer", "worker"):
            role = name
        elif any(re.fullmatch(rf"lineage\.[^.]+\.registry\.write\.{re.escape(name)}", x) for x in pub):
            role = "worker"
        else:
            continue
        def subjects(direction, kind):
            d = perms.get(direction, {})
            v = d if isinstance(d, list) and kind == "allow" else (d.get(kind, []) if isinstance(d, dict) else [])
            return [v] if isinstance(v, str) else list(v)
        entry = {f"{d}.{k}": subjects(d, k) for d in ("publish", "subscribe") for k in ("allow", "deny")}
        entry["allow_responses"] = bool(perms.get("allow_responses", False))
        out.setdefault(role, []).append((name, entry))
    return out

chart, shipped = roles(sys.argv[1]), roles(sys.argv[2])
bad = 0
for role in ("voter", "worker", "operator", "observer"):
    if role not in shipped:
        print(f"check-chart: config/nats-server.conf has no {role} user", file=sys.stderr)
        bad += 1
        continue
    (_, mine), = chart[role]
    for name, theirs in shipped[role]:
        # The shipped file names each worker's node id in its subjects; the chart's workers share one
        # user (a Deployment's pod names are not known in advance), so their <node> is '*'.
        def norm(subjects):
            if role != "worker":
                return set(subjects)
            node = next((m.group(1) for s in theirs["publish.allow"] for m in [re.fullmatch(r"lineage\.[^.]+\.registry\.write\.([^.]+)", s)] if m), None)
            return {re.sub(rf"\.{re.escape(node)}(\.|$)", r".*\1", s) if node else s for s in subjects}
        for key in ("publish.allow", "subscribe.allow"):
            a, b = set(mine[key]), norm(theirs[key])
            if a != b:
                print(f"check-chart: {role} ({name}) {key}: only in the chart: {sorted(a - b)}; only in {sys.argv[2]}: {sorted(b - a)}", file=sys.stderr)
                bad += 1
        for key in ("publish.deny", "subscribe.deny"):
            missing = norm(theirs[key]) - set(mine[key])
            if missing:
                print(f"check-chart: {role} ({name}) {key}: the chart lacks {sorted(missing)} of {sys.argv[2]}", file=sys.stderr)
                bad += 1
        if mine["allow_responses"] != theirs["allow_responses"]:
            print(f"check-chart: {role} ({name}): allow_responses {mine['allow_responses']} in the chart, {theirs['allow_responses']} in config/nats-server.conf", file=sys.stderr)
            bad += 1
sys.exit(1 if bad else 0)
PY
  echo "check-chart: ok   natsPermissions (cluster dev) grants voter, worker, operator, observer the subjects of $NATS_SERVER_CONF (the chart's workers share one user: <node> is *)"
else
  echo "check-chart: skip comparing natsPermissions with $NATS_SERVER_CONF (not in this tree yet)"
fi

# ------------------------------------------------------------------ 5. monitoring (operations pack)
# promtool of Prometheus v3.16.0 (Go module v0.316.0), pinned in tools/promtool and built by
# scripts/install-deps.sh. Not optional: without it the alerts would ship unchecked.
PROMTOOL=${PROMTOOL:-$HOME/go/bin/promtool-v0.316.0}
if [ ! -x "$PROMTOOL" ]; then
  fail "promtool is missing ($PROMTOOL): run scripts/install-deps.sh (it builds tools/promtool with Go into ~/go/bin/promtool-v0.316.0) or set PROMTOOL"
fi
echo "check-chart: $("$PROMTOOL" --version 2>&1 | head -1) ($PROMTOOL)"
MON=$CHART/monitoring
# promtool_ok <what> <promtool args...>: runs promtool, shows its output on failure.
promtool_ok() {
  local what=$1; shift
  "$PROMTOOL" "$@" >"$tmp/promtool.out" 2>&1 || { cat "$tmp/promtool.out" >&2; fail "promtool $*: $what"; }
}
promtool_ok "the chart's rules file" check rules "$MON/rules.yaml"
echo "check-chart: ok   promtool check rules $MON/rules.yaml: $(grep -o 'SUCCESS: .*' "$tmp/promtool.out")"
promtool_ok "unit tests of the alerts" test rules "$MON/rules-test.yaml"
echo "check-chart: ok   promtool test rules $MON/rules-test.yaml: $(grep -c 'eval_time' "$MON/rules-test.yaml") alert evaluations in $(grep -c '^  - name:' "$MON/rules-test.yaml") tests"

# The checks of the rules and the dashboard (python): metric and label names against
# monitoring/metrics.txt, the dashboard's structure, its queries as recording rules for promtool.
cat >"$tmp/monitoring.py" <<'PY'
import json, re, sys, yaml

def load_metrics(path):
    known = {}
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        name, kind = parts[0], parts[1]
        labels = set(parts[2].split(",")) if len(parts) > 2 else set()
        assert kind in ("counter", "gauge", "histogram"), f"metrics.txt: {line}: type {kind}"
        assert (kind == "counter") == name.endswith("_total"), f"metrics.txt: {name}: counters, and only they, end in _total"
        if kind == "histogram":
            known[name + "_bucket"] = labels | {"le"}
            known[name + "_sum"] = known[name + "_count"] = labels
        else:
            known[name] = labels
    return known

SCRAPE = {"lineage_node", "job", "instance", "namespace", "pod", "service", "endpoint", "container"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')

def names(expr):
    """(metrics {name: [matcher labels]}, grouping labels) of a PromQL expression."""
    e = STRING.sub('""', expr)
    e = re.sub(r"\[[^\]]*\]", "", e)                      # range selectors and subqueries
    e = re.sub(r"\boffset\s+-?[0-9a-z]+", "", e)
    grouping = []
    def group(m):
        grouping.extend(x.strip() for x in m.group(2).split(",") if x.strip())
        return " "
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", group, e)
    matchers = []
    def hold(m):
        matchers.append(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", m.group(1)))
        return "{#%d}" % (len(matchers) - 1)
    e = re.sub(r"\{([^}]*)\}", hold, e)
    metrics = {}
    for m in re.finditer(r"(?<![A-Za-z0-9_:.$#])[A-Za-z_:][A-Za-z0-9_:]*", e):
        rest = e[m.end():]
        if rest.lstrip().startswith("(") or m.group(0).lower() in KEYWORDS:
            continue
        sel = re.match(r"\s*\{#(\d+)\}", rest)
        metrics.setdefault(m.group(0), []).extend(matchers[int(sel.group(1))] if sel else [])
    assert not re.search(r"(?<![A-Za-z0-9_:])\{#", e.replace(" ", "")), f"a selector without a metric name: {expr}"
    return metrics, grouping

def check_expr(where, expr, known, bad, node_filter=False):
    metrics, grouping = names(expr)
    if not metrics:
        bad.append(f"{where}: names no metric: {expr}")
    for metric, labels in metrics.items():
        if metric not in known:
            bad.append(f"{where}: {metric} is not a metric of monitoring/metrics.txt: {expr}")
            continue
        for label in labels:
            if label not in known[metric] | SCRAPE:
                bad.append(f"{where}: {metric} has no label {label}: {expr}")
        if node_filter and metric != "up" and "lineage_node" not in labels:
            bad.append(f'{where}: {metric} without lineage_node=~"$lineage_node": {expr}')
    allowed = SCRAPE.union(*(known.get(m, set()) for m in metrics))
    for label in grouping:
        if label not in allowed:
            bad.append(f"{where}: grouping label {label} is on none of {sorted(metrics)}: {expr}")
    return metrics

def rules(path, known, bad):
    doc = yaml.safe_load(open(path))
    n = 0
    for g in doc["groups"]:
        for r in g["rules"]:
            n += 1
            where = f"{path.rsplit('/', 1)[-1]}: {r.get('alert') or r.get('record')}"
            check_expr(where, r["expr"], known, bad)
            if "alert" in r:
                if r.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
                    bad.append(f"{where}: severity label {r.get('labels', {}).get('severity')!r}")
                for a in ("summary", "description"):
                    if not r.get("annotations", {}).get(a):
                        bad.append(f"{where}: no {a} annotation")
    return n

def dashboard(path, known, bad, out):
    d = json.load(open(path))
    for key in ("uid", "title", "panels", "templating"):
        if not d.get(key):
            bad.append(f"dashboard: no {key}")
    var = {v["name"]: v for v in d["templating"]["list"]}
    if var.get("datasource", {}).get("type") != "datasource" or var["datasource"].get("query") != "prometheus":
        bad.append("dashboard: no `datasource` variable of type datasource (prometheus)")
    node = var.get("lineage_node", {})
    q = node.get("query", {})
    q = q.get("query") if isinstance(q, dict) else q
    if node.get("type") != "query" or not re.fullmatch(r"label_values\((\w+), *lineage_node\)", q or ""):
        bad.append(f"dashboard: the lineage_node variable is not label_values(<metric>, lineage_node): {q!r}")
    else:
        check_expr("dashboard variable lineage_node", re.fullmatch(r"label_values\((\w+), *lineage_node\)", q).group(1), known, bad)
    ids, cells, recording, used = set(), {}, [], set()
    for p in d["panels"]:
        where = f"dashboard panel {p.get('id')} {p.get('title')!r}"
        if p.get("id") in ids:
            bad.append(f"{where}: duplicate id")
        ids.add(p.get("id"))
        g = p["gridPos"]
        if g["x"] < 0 or g["x"] + g["w"] > 24:
            bad.append(f"{where}: gridPos {g} is outside the 24 columns")
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    bad.append(f"{where}: overlaps panel {cells[(x, y)]}")
                    break
                cells[(x, y)] = p.get("id")
        if p["type"] == "row":
            continue
        if p.get("datasource") != {"type": "prometheus", "uid": "${datasource}"}:
            bad.append(f"{where}: datasource is not the $datasource variable: {p.get('datasource')}")
        if not p.get("targets"):
            bad.append(f"{where}: no query")
        for t in p.get("targets", []):
            expr = t.get("expr", "")
            metrics = check_expr(where, expr, known, bad, node_filter=True)
            used |= set(metrics)
            for label in re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", t.get("legendFormat", "")):
                if label not in SCRAPE.union(*(known.get(m, set()) for m in metrics)):
                    bad.append(f"{where}: legend label {label} is on none of {sorted(metrics)}")
            # The query as Prometheus gets it: Grafana's variables substituted.
            promql = expr.replace("$lineage_node", ".*").replace("$__rate_interval", "5m").replace("$__interval", "1m")
            if "$" in promql:
                bad.append(f"{where}: an unknown variable in {expr}")
            recording.append({"record": f"lineage_dashboard:panel_{p['id']}_{t.get('refId', 'A')}", "expr": promql})
    yaml.safe_dump({"groups": [{"name": "lineage-dashboard-queries", "rules": recording}]}, open(out, "w"), sort_keys=False)
    return len(d["panels"]), len(recording), used

if __name__ == "__main__":
    metrics_txt, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    known = load_metrics(metrics_txt)
    bad, said = [], []
    for path in files:
        if path.endswith(".json"):
            panels, queries, used = dashboard(path, known, bad, out)
            said.append(f"{path.rsplit('/', 1)[-1]}: {panels} panels, {queries} queries, {len(used)} metrics")
        else:
            said.append(f"{path.rsplit('/', 1)[-1]}: {rules(path, known, bad)} rules")
    for b in bad:
        print(f"check-chart: {b}", file=sys.stderr)
    if bad:
        sys.exit(1)
    print("; ".join(said) + f" (of the {len(known)} series names of metrics.txt)")
PY
# prom_rules <rendered manifest> <out>: the rules file of its PrometheusRule (spec as it is).
prom_rules() {
  python3 -c 'import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "PrometheusRule"]
assert len(docs) == 1, f"{len(docs)} PrometheusRules"
assert docs[0]["apiVersion"] == "monitoring.coreos.com/v1" and set(docs[0]["spec"]) == {"groups"}
yaml.safe_dump(docs[0]["spec"], open(sys.argv[2], "w"), sort_keys=False)' "$1" "$2" || fail "$1: no PrometheusRule to extract"
}
# test_rules_on <rules file>: rules-test.yaml run on another rules file.
test_rules_on() {
  sed "s|^  - rules.yaml$|  - $1|" "$MON/rules-test.yaml" >"$tmp/rules-test-on.yaml"
  grep -q "^  - $1$" "$tmp/rules-test-on.yaml" || fail "could not point rules-test.yaml at $1"
  promtool_ok "unit tests on $1" test rules "$tmp/rules-test-on.yaml"
}

python3 "$tmp/monitoring.py" "$MON/metrics.txt" "$tmp/dashboard-rules.yaml" "$MON/rules.yaml" "$CHART/dashboards/lineage.json" \
  >"$tmp/mon.out" || fail "the rules' or the dashboard's queries name a metric or label not in $MON/metrics.txt (above)"
echo "check-chart: ok   metric and label names of monitoring/metrics.txt only: $(cat "$tmp/mon.out")"
promtool_ok "the dashboard's queries (as recording rules)" check rules "$tmp/dashboard-rules.yaml"
echo "check-chart: ok   promtool check rules on the dashboard's queries (one recording rule each, \$lineage_node = .*): $(grep -o 'SUCCESS: .*' "$tmp/promtool.out")"

# The rendered PrometheusRule (value set large): the groups of rules.yaml, LineageNodeDown's
# up{job="lineage"} on the ServiceMonitor's job and namespace; promtool checks and tests them.
prom_rules "$tmp/large.yaml" "$tmp/rendered-rules.yaml"
promtool_ok "the rendered PrometheusRule's rules" check rules "$tmp/rendered-rules.yaml"
echo "check-chart: ok   promtool check rules on the rendered PrometheusRule (large): $(grep -o 'SUCCESS: .*' "$tmp/promtool.out")"
python3 - "$MON/rules.yaml" "$tmp/rendered-rules.yaml" <<'PY' || fail "the rendered PrometheusRule is not monitoring/rules.yaml"
import sys, yaml
shipped, rendered = (yaml.safe_load(open(p)) for p in sys.argv[1:])
for g in shipped["groups"]:
    for r in g["rules"]:
        r["expr"] = r["expr"].replace('up{job="lineage"}', 'up{job="t-lineage", namespace="default"}')
assert rendered == shipped, "the rendered groups differ from rules.yaml beyond the up selector"
PY
echo "check-chart: ok   the rendered PrometheusRule's groups are monitoring/rules.yaml's, up{job=\"t-lineage\", namespace=\"default\"} in LineageNodeDown"
cat >"$tmp/mon-upselector.yaml" <<'EOF'
monitoring:
  rules:
    enabled: true
    upSelector: job="lineage"
EOF
helm template t "$CHART" -f "$tmp/mon-upselector.yaml" >"$tmp/mon-up.yaml" 2>"$tmp/mon.err" || { cat "$tmp/mon.err" >&2; fail "helm template monitoring.rules.upSelector"; }
prom_rules "$tmp/mon-up.yaml" "$tmp/rendered-up-rules.yaml"
python3 -c 'import sys, yaml; a, b = (yaml.safe_load(open(p)) for p in sys.argv[1:]); sys.exit(a != b)' \
  "$MON/rules.yaml" "$tmp/rendered-up-rules.yaml" || fail "with upSelector job=\"lineage\" the rendered rules differ from rules.yaml"
test_rules_on "$tmp/rendered-up-rules.yaml"
echo "check-chart: ok   with monitoring.rules.upSelector=job=\"lineage\" the rendered rules are rules.yaml's and pass rules-test.yaml"

# Overrides: threshold, for, severity, enabled, additionalRuleLabels, namespace, labels.
cat >"$tmp/mon-overrides.yaml" <<'EOF'
monitoring:
  rules:
    enabled: true
    namespace: monitoring
    labels: {release: kube-prometheus-stack}
    additionalRuleLabels: {team: agents, severity: ignored}
    alerts:
      LineageInboxLagHigh: {threshold: 10, for: 15m}
      LineageRegistryWriteLatencyHigh: {threshold: 0.5}
      LineageNatsReconnecting: {for: 5m, severity: critical}
      LineageDrainFailures: {enabled: false}
  dashboard:
    enabled: true
    namespace: grafana
    sidecarLabel: grafana.example.com/dashboard
    sidecarLabelValue: lineage
    labels: {team: agents}
EOF
helm template t "$CHART" -f "$tmp/mon-overrides.yaml" >"$tmp/mon-ov.yaml" 2>"$tmp/mon.err" || { cat "$tmp/mon.err" >&2; fail "helm template with monitoring overrides"; }
prom_rules "$tmp/mon-ov.yaml" "$tmp/rendered-ov-rules.yaml"
promtool_ok "the rendered rules with overrides" check rules "$tmp/rendered-ov-rules.yaml"
python3 - "$MON/rules.yaml" "$tmp/mon-ov.yaml" "$CHART/dashboards/lineage.json" <<'PY' || fail "monitoring overrides are not applied as values.yaml says"
import json, sys, yaml
shipped = {r["alert"]: r for g in yaml.safe_load(open(sys.argv[1]))["groups"] for r in g["rules"]}
docs = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d]
pr = next(d for d in docs if d["kind"] == "PrometheusRule")
assert pr["metadata"]["namespace"] == "monitoring" and pr["metadata"]["labels"]["release"] == "kube-prometheus-stack", pr["metadata"]
got = {r["alert"]: r for g in pr["spec"]["groups"] for r in g["rules"]}
assert set(got) == set(shipped) - {"LineageDrainFailures"}, sorted(set(shipped) ^ set(got))
lag = got["LineageInboxLagHigh"]
assert lag["expr"].rstrip().endswith("> 10") and lag["for"] == "15m", lag
assert lag["expr"].rstrip()[:-len("> 10")] == shipped["LineageInboxLagHigh"]["expr"].rstrip()[:-len("> 5")], lag["expr"]
assert got["LineageRegistryWriteLatencyHigh"]["expr"].rstrip().endswith("> 0.5"), got["LineageRegistryWriteLatencyHigh"]
assert got["LineageNatsReconnecting"]["for"] == "5m" and got["LineageNatsReconnecting"]["labels"]["severity"] == "critical"
assert got["LineageNodeDown"]["expr"] == 'up{job="t-lineage", namespace="default"} == 0', got["LineageNodeDown"]["expr"]
for name, r in got.items():
    assert r["labels"]["team"] == "agents", (name, r["labels"])
    if name != "LineageNatsReconnecting":
        assert r["labels"]["severity"] == shipped[name]["labels"]["severity"], (name, r["labels"])
        assert r.get("for") == shipped[name].get("for") or name == "LineageInboxLagHigh", name
    assert r["annotations"] == shipped[name]["annotations"], name
cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "t-lineage-dashboard")
assert cm["metadata"]["namespace"] == "grafana" and "annotations" not in cm["metadata"], cm["metadata"]
assert cm["metadata"]["labels"]["grafana.example.com/dashboard"] == "lineage" and cm["metadata"]["labels"]["team"] == "agents"
assert "grafana_dashboard" not in cm["metadata"]["labels"], cm["metadata"]["labels"]
assert json.loads(cm["data"]["lineage.json"]) == json.load(open(sys.argv[3])), "the ConfigMap's dashboard is not dashboards/lineage.json"
PY
echo "check-chart: ok   monitoring overrides (threshold 10 and for 15m, threshold 0.5, severity, enabled false, additionalRuleLabels, namespaces, sidecar label) render as asked and pass promtool check rules"
# The prometheus-operator CRD schemas (monitoring.coreos.com/v1, npm @kubernetes-models/
# prometheus-operator in tools/prometheus-operator-models, installed by scripts/install-deps.sh):
# the PrometheusRule and the ServiceMonitor that kubernetes-validate skips (section 2).
MODELS=tools/prometheus-operator-models
tojson() { python3 -c 'import json, sys, yaml; json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d], open(sys.argv[2], "w"))' "$1" "$2"; }
if command -v node >/dev/null 2>&1 && [ -d "$MODELS/node_modules/@kubernetes-models/prometheus-operator" ]; then
  tojson "$tmp/large.yaml" "$tmp/large.json"
  tojson "$tmp/mon-ov.yaml" "$tmp/mon-ov.json"
  node "$MODELS/validate.mjs" "$tmp/large.json" "$tmp/mon-ov.json" >"$tmp/crd.out" 2>&1 || { cat "$tmp/crd.out" >&2; fail "the prometheus-operator CRD schemas refuse a rendered object"; }
  grep -q 'ok large.json: PrometheusRule/' "$tmp/crd.out" && grep -q 'ok large.json: ServiceMonitor/' "$tmp/crd.out" \
    || { cat "$tmp/crd.out" >&2; fail "the CRD check did not see the large set's PrometheusRule and ServiceMonitor"; }
  models=$(node -p 'require("./'"$MODELS"'/node_modules/@kubernetes-models/prometheus-operator/package.json").version')
  echo "check-chart: ok   prometheus-operator CRD schemas (@kubernetes-models/prometheus-operator $models): $(grep -c '^ok ' "$tmp/crd.out") objects ($(sed 's/^ok //' "$tmp/crd.out" | paste -sd, | sed 's/,/, /g'))"
  # ... and they refuse what the values schema and promtool let through: a ServiceMonitor
  # interval that is no Prometheus duration, a rule's label that is not a string.
  helm template t "$CHART" --set serviceMonitor.enabled=true --set 'serviceMonitor.interval=30 seconds' >"$tmp/bad-sm.yaml" \
    || fail "helm template with serviceMonitor.interval='30 seconds' should render (the values schema does not check durations)"
  tojson "$tmp/bad-sm.yaml" "$tmp/bad-sm.json"
  if node "$MODELS/validate.mjs" "$tmp/bad-sm.json" >"$tmp/bad-sm.out" 2>&1; then fail "the CRD schema accepts serviceMonitor.interval '30 seconds'"; fi
  grep -q 'interval must match pattern' "$tmp/bad-sm.out" || { cat "$tmp/bad-sm.out" >&2; fail "CRD check: unexpected message for a bad interval"; }
  echo "check-chart: ok   refused --set serviceMonitor.interval='30 seconds': $(grep -o 'ServiceMonitor.*interval must match pattern' "$tmp/bad-sm.out")"
  python3 -c 'import json, sys
docs = json.load(open(sys.argv[1]))
pr = next(d for d in docs if d["kind"] == "PrometheusRule")
pr["spec"]["groups"][0]["rules"][0]["labels"]["priority"] = 1
json.dump(docs, open(sys.argv[2], "w"))' "$tmp/large.json" "$tmp/bad-pr.json"
  if node "$MODELS/validate.mjs" "$tmp/bad-pr.json" >"$tmp/bad-pr.out" 2>&1; then fail "the CRD schema accepts a rule label that is a number"; fi
  grep -q 'labels/priority must be string' "$tmp/bad-pr.out" || { cat "$tmp/bad-pr.out" >&2; fail "CRD check: unexpected message for a number label"; }
  echo "check-chart: ok   refused: a rule label that is a number: $(grep -o 'PrometheusRule.*must be string' "$tmp/bad-pr.out")"
else
  echo "check-chart: skip the prometheus-operator CRD schemas (node and npm ci in $MODELS; scripts/install-deps.sh does it)"
fi

# Values the schema or the templates refuse.
refuse "values.schema.json" "LineageNoSuchAlert" --set monitoring.rules.enabled=true --set monitoring.rules.alerts.LineageNoSuchAlert.for=5m
refuse "values.schema.json" "for" --set monitoring.rules.enabled=true --set monitoring.rules.alerts.LineageInboxLagHigh.for=ten
refuse "template guard" "LineageNatsDisconnected.threshold: this alert has no threshold" --set monitoring.rules.enabled=true --set monitoring.rules.alerts.LineageNatsDisconnected.threshold=1
if helm template --help 2>/dev/null | grep -- --skip-schema-validation >/dev/null; then
  refuse "template guard" "monitoring.rules.alerts.LineageNoSuchAlert: no such alert in monitoring/rules.yaml" \
    --set monitoring.rules.enabled=true --set monitoring.rules.alerts.LineageNoSuchAlert.for=5m --skip-schema-validation
fi
# The schema's list of alert names is rules.yaml's.
python3 - "$MON/rules.yaml" "$CHART/values.schema.json" <<'PY' || fail "values.schema.json's monitoring.rules.alerts names are not the alerts of rules.yaml"
import json, sys, yaml
alerts = sorted(r["alert"] for g in yaml.safe_load(open(sys.argv[1]))["groups"] for r in g["rules"])
schema = json.load(open(sys.argv[2]))["properties"]["monitoring"]["properties"]["rules"]["properties"]["alerts"]
assert sorted(schema["propertyNames"]["enum"]) == alerts, sorted(set(alerts) ^ set(schema["propertyNames"]["enum"]))
PY
echo "check-chart: ok   values.schema.json lists the $(grep -c '  - alert: ' "$MON/rules.yaml") alerts of rules.yaml for monitoring.rules.alerts"

# The checks catch real mistakes: a typo'd expression (promtool check rules), a metric that does
# not exist (the names check), a broken panel query (promtool on the dashboard's queries), and a
# rule that does not fire (promtool test rules).
sed 's/^        expr: lineage_nats_connected == 0$/        expr: lineage_nats_connected === 0/' "$MON/rules.yaml" >"$tmp/broken-rules.yaml"
! cmp -s "$MON/rules.yaml" "$tmp/broken-rules.yaml" || fail "the mutation (=== in LineageNatsDisconnected) did not apply"
if "$PROMTOOL" check rules "$tmp/broken-rules.yaml" >"$tmp/broken.out" 2>&1; then fail "promtool check rules accepts 'lineage_nats_connected === 0'"; fi
grep -q 'parse error' "$tmp/broken.out" || { cat "$tmp/broken.out" >&2; fail "promtool: unexpected message for a typo'd expression"; }
echo "check-chart: ok   refused: a typo'd rule (===): $(grep -m1 -o 'parse error.*' "$tmp/broken.out")"
sed 's/lineage_drain_failures_total\[15m\]/lineage_drain_failure_total[15m]/' "$MON/rules.yaml" >"$tmp/typo-metric.yaml"
! cmp -s "$MON/rules.yaml" "$tmp/typo-metric.yaml" || fail "the mutation (lineage_drain_failure_total) did not apply"
if python3 "$tmp/monitoring.py" "$MON/metrics.txt" "$tmp/unused.yaml" "$tmp/typo-metric.yaml" >/dev/null 2>"$tmp/typo-metric.out"; then
  fail "the names check accepts lineage_drain_failure_total"
fi
grep -q 'lineage_drain_failure_total is not a metric' "$tmp/typo-metric.out" || { cat "$tmp/typo-metric.out" >&2; fail "names check: unexpected message"; }
echo "check-chart: ok   refused: a metric that does not exist: $(head -1 "$tmp/typo-metric.out" | sed 's/^check-chart: //' | cut -c1-110)"
python3 - "$CHART/dashboards/lineage.json" "$tmp/broken-dashboard.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = next(p for p in d["panels"] if p["type"] == "timeseries")["targets"][0]
t["expr"] = t["expr"].replace("sum by", "sum byy", 1)
json.dump(d, open(sys.argv[2], "w"))
PY
python3 "$tmp/monitoring.py" "$MON/metrics.txt" "$tmp/broken-dashboard-rules.yaml" "$tmp/broken-dashboard.json" >/dev/null 2>&1 || true
if "$PROMTOOL" check rules "$tmp/broken-dashboard-rules.yaml" >"$tmp/broken.out" 2>&1; then fail "promtool accepts a panel query with 'sum byy'"; fi
grep -q 'parse error' "$tmp/broken.out" || { cat "$tmp/broken.out" >&2; fail "promtool: unexpected message for a broken panel query"; }
echo "check-chart: ok   refused: a broken panel query (sum byy): $(grep -m1 -o 'parse error.*' "$tmp/broken.out")"
sed 's/^        expr: lineage_nats_connected == 0$/        expr: lineage_nats_connected == 2/' "$MON/rules.yaml" >"$tmp/silent-rules.yaml"
! cmp -s "$MON/rules.yaml" "$tmp/silent-rules.yaml" || fail "the mutation (== 2 in LineageNatsDisconnected) did not apply"
sed "s|^  - rules.yaml$|  - $tmp/silent-rules.yaml|" "$MON/rules-test.yaml" >"$tmp/rules-test-silent.yaml"
if "$PROMTOOL" test rules "$tmp/rules-test-silent.yaml" >"$tmp/silent.out" 2>&1; then fail "promtool test rules passes a LineageNatsDisconnected that never fires"; fi
grep -q 'alertname: LineageNatsDisconnected' "$tmp/silent.out" || { cat "$tmp/silent.out" >&2; fail "promtool test rules: unexpected message"; }
echo "check-chart: ok   refused: rules-test.yaml fails when LineageNatsDisconnected never fires (== 2)"

# ------------------------------------------------------------------ 6. the real loader
bin=${LINEAGE_BIN:-}
if [ -z "$bin" ]; then
  target=$(cargo metadata --format-version 1 --no-deps 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null || echo target)
  for candidate in "$target/debug/lineage" "$target/release/lineage"; do
    if [ -x "$candidate" ] && { [ -z "$bin" ] || [ "$candidate" -nt "$bin" ]; }; then bin=$candidate; fi
  done
fi
if [ -z "$bin" ]; then
  echo "check-chart: skip loading lineage.toml with the node's loader (no lineage binary in the target dir; run cargo build -p lineage)"
  echo "check-chart: all checks passed"
  exit 0
fi
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
# Runs with only the pod's environment: no stray LINEAGE_*, NATS_URL (the --nats flag's env) etc.
podenv() { env -i PATH="$tmp/shim:/usr/local/bin:/usr/bin:/bin" RUST_LOG=info "$@"; }
podenv "$bin" config show >"$tmp/defaults.show" 2>&1 || { cat "$tmp/defaults.show" >&2; fail "$bin config show (built-in defaults) fails"; }
grep -q '^nats\.stream_replicas ' "$tmp/defaults.show" \
  || fail "$bin was built before the [nats]/[agents] config keys the chart renders: rebuild it (cargo build -p lineage) or point LINEAGE_BIN at a current one"
echo "check-chart: loading the rendered lineage.toml with $bin"

# extract_toml <manifest> [<key>]: a lineage.toml of a rendered manifest (the ConfigMap's block
# scalar, 4-space indent): key lineage.toml (every pod's), or lineage-voter.toml (the voters' own,
# with registry.direct; empty output when there is none).
extract_toml() {
  awk -v key="${2:-lineage.toml}" '$0 == "  " key ": |" { on = 1; next }
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
    grep -E "^$3 " "$2" | grep -E "# .*$5" >/dev/null || { cat "$2" >&2; fail "$1: $3 does not come from /$5/"; }
  fi
}

# The files lineage.toml names under /etc/lineage/nats/ are the pods' Secret mounts, absent
# here: `config show` checks the shape of [nats] (one kind of credentials, no half-configured
# TLS), the node reads the files when it connects.
# loads <name> <voters> <expected: cluster nats_url http_addr max_depth lease_ms lease_hb raft_hb
#       election_min election_max> [helm args...]
loads() {
  local name=$1 n=$2 cluster=$3 nats=$4 http=$5 depth=$6 lease=$7 lease_hb=$8 hb=$9 emin=${10} emax=${11}
  shift 11
  helm template t "$CHART" "$@" >"$tmp/$name.yaml" 2>"$tmp/$name.err" \
    || { cat "$tmp/$name.err" >&2; fail "helm template $*"; }
  local toml=$tmp/$name.toml vtoml=$tmp/$name.voter.toml
  extract_toml "$tmp/$name.yaml" >"$toml"
  grep -q '^\[lease\]$' "$toml" || fail "$name: could not extract lineage.toml from the ConfigMap"
  # The voters' own file when the value set gives them one (registry.direct), else the shared one.
  extract_toml "$tmp/$name.yaml" lineage-voter.toml >"$vtoml"
  if [ -s "$vtoml" ]; then
    grep -q '^\[registry\.direct\]$' "$vtoml" || fail "$name: could not extract lineage-voter.toml from the ConfigMap"
  else
    cp "$toml" "$vtoml"
  fi
  extract_entrypoint "$tmp/$name.yaml" >"$tmp/$name.entrypoint.sh"
  grep -q '^exec lineage node --config /etc/lineage/lineage.toml$' "$tmp/$name.entrypoint.sh" \
    || fail "$name: could not extract the voters' entrypoint snippet"
  # The image's `lineage`, as the entrypoint execs it: `node --config /etc/lineage/lineage.toml`
  # becomes `config show` on the rendered file (same loader, same environment).
  mkdir -p "$tmp/shim"
  cat >"$tmp/shim/lineage" <<SH
#!/bin/sh
[ "\$*" = "node --config /etc/lineage/lineage.toml" ] || { echo "shim: unexpected arguments: \$*" >&2; exit 2; }
exec "$bin" config show --config "$vtoml"
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
    expect "$1" "$2" nats.stream_replicas "$(awk '/^\[nats\]$/ { on = 1 } on && $1 == "stream_replicas" { print $3; exit }' "$toml")" "TOML file"
    expect "$1" "$2" nats.tls_required "$(awk '/^\[nats\]$/ { on = 1 } on && $1 == "tls_required" { print $3; exit }' "$toml")" "TOML file"
    expect "$1" "$2" agents.allow_raw_commands "$(awk '/^\[agents\]$/ { on = 1 } on && $1 == "allow_raw_commands" { print $3; exit }' "$toml")" "TOML file"
    expect "$1" "$2" agents.script.driver '"script"' "TOML file"
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
    if cmp -s "$toml" "$vtoml"; then
      ! grep -q '^registry\.direct\.' "$out" || { cat "$out" >&2; fail "$name $pod: registry.direct without registry.direct.enabled"; }
    fi
    echo "check-chart: ok   $name: $pod loads (raft_id $((ordinal + 1)), bootstrap $(value "$out" registry.bootstrap))"
  done
  [ "$n" = 1 ] || { [ "$(value "$tmp/$name.t-lineage-voter-0.out" registry.bootstrap)" = true ] \
    && [ "$(value "$tmp/$name.t-lineage-voter-$((n - 1)).out" registry.bootstrap)" = false ]; } \
    || fail "$name: bootstrap must be set on ordinal 0 only"

  # A worker, with the environment the Deployment gives it (LINEAGE_NATS__USER when it has its own user).
  local wenv
  wenv=$(python3 -c 'import sys, yaml
d = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment")
print(" ".join(e["name"] + "=" + e["value"] for e in d["spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e and e["name"].startswith("LINEAGE_")))' "$tmp/$name.yaml")
  pod=t-lineage-worker-5d8f7c9b6-x2x4k
  out=$tmp/$name.worker.out
  # shellcheck disable=SC2086
  podenv LINEAGE_NODE__ID="$pod" $wenv "$bin" config show --config "$toml" \
    >"$out" 2>"$out.err" || { cat "$out.err" >&2; fail "$name: worker: the node refuses its config"; }
  common "$name worker" "$out"
  ! grep -q '^registry\.direct\.' "$out" || { cat "$out" >&2; fail "$name worker: registry.direct on a worker"; }
  expect "$name worker" "$out" node.id "\"$pod\"" "environment"
  expect "$name worker" "$out" registry.role '"client"' "environment"
  expect "$name worker" "$out" registry.bootstrap false "TOML file"
  echo "check-chart: ok   $name: worker loads (role client${wenv:+; $wenv})"

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
loads secure 3 prod-eu tls://nats.messaging:4222 0.0.0.0:9464 8 3000 500 100 400 800 -f "$CHART/ci/secure-values.yaml"
loads large 5 lineage nats://nats:4222 0.0.0.0:9464 8 3000 500 100 400 800 -f "$CHART/ci/large-values.yaml"
loads token 3 lineage nats://nats:4222 0.0.0.0:9464 8 3000 500 100 400 800 -f "$CHART/ci/token-values.yaml"
# registry.direct: each voter loads its own file's [registry.direct] (the token file is read when
# the node starts, so its absence here is fine); the workers have none of it, and would refuse
# the voters' file (a client node refuses [registry.direct]: why the voters have their own).
loads direct 3 lineage nats://nats:4222 0.0.0.0:9464 8 3000 500 100 400 800 -f "$CHART/ci/direct-values.yaml"
peers='{ 1 = "t-lineage-voter-0.t-lineage-voter-headless:7201", 2 = "t-lineage-voter-1.t-lineage-voter-headless:7201", 3 = "t-lineage-voter-2.t-lineage-voter-headless:7201" }'
for pod in t-lineage-voter-0 t-lineage-voter-2; do
  out=$tmp/direct.$pod.out
  expect "direct $pod" "$out" registry.direct.listen '"0.0.0.0:7201"' "TOML file"
  expect "direct $pod" "$out" registry.direct.peers "$peers" "TOML file"
  expect "direct $pod" "$out" registry.direct.token_file '"/etc/lineage/raft/token"' "TOML file"
done
if podenv LINEAGE_NODE__ID=w LINEAGE_REGISTRY__ROLE=client "$bin" config show --config "$tmp/direct.voter.toml" >/dev/null 2>"$tmp/direct.client.err"; then
  fail "direct: a worker (role client) accepts the voters' lineage.toml with [registry.direct]"
fi
grep -q 'registry.direct: direct Raft links are for voters' "$tmp/direct.client.err" || { cat "$tmp/direct.client.err" >&2; fail "direct: unexpected refusal of the voters' file as a client"; }
echo "check-chart: ok   direct: voters 0 and 2 load registry.direct.{listen,peers,token_file} from their own file; the workers' file has none, and a client refuses the voters': $(sed 's/ (from .*//' "$tmp/direct.client.err")"

# The NATS keys as the node sees them (secure: user + password file, mutual TLS, R3).
out=$tmp/secure.worker.out
expect "secure worker" "$out" nats.user '"worker"' "environment"
expect "secure t-lineage-voter-0" "$tmp/secure.t-lineage-voter-0.out" nats.user '"voter"' "TOML file"
expect "secure worker" "$out" nats.update_streams true "TOML file"
expect "secure worker" "$out" nats.password_file '"/etc/lineage/nats/password"' "TOML file"
expect "secure worker" "$out" nats.tls_ca '"/etc/lineage/nats/tls/ca.crt"' "TOML file"
expect "secure worker" "$out" nats.tls_cert '"/etc/lineage/nats/tls/tls.crt"' "TOML file"
expect "secure worker" "$out" nats.tls_key '"/etc/lineage/nats/tls/tls.key"' "TOML file"
expect "secure worker" "$out" agents.claude.pass_env '["ANTHROPIC_API_KEY"]' "TOML file"
expect "secure worker" "$out" agents.claude.tools true "TOML file"
expect "secure worker" "$out" agents.fixed-dir.args '["--name", "two words"]' "TOML file"
expect "secure worker" "$out" agents.fixed-dir.workdir '"/var/lib/lineage/shared"' "TOML file"
echo "check-chart: ok   secure: nats.user (voter / worker from LINEAGE_NATS__USER), password_file, tls_ca/cert/key, update_streams, agent profiles"
# A password given as a value (env here; the chart never renders one) is shown as <redacted>.
sed '/^password_file = /d' "$tmp/secure.toml" >"$tmp/secure-pw.toml"
podenv LINEAGE_NODE__ID=w LINEAGE_REGISTRY__ROLE=client LINEAGE_NATS__PASSWORD=hunter2-not-shown \
  "$bin" config show --config "$tmp/secure-pw.toml" >"$tmp/pw.out" 2>&1 \
  || { cat "$tmp/pw.out" >&2; fail "a user + password config is refused"; }
! grep -q hunter2 "$tmp/pw.out" || fail "config show prints the NATS password"
value "$tmp/pw.out" nats.password | grep -E '^"?<redacted>"?$' >/dev/null || { cat "$tmp/pw.out" >&2; fail "config show does not show nats.password as <redacted>"; }
echo "check-chart: ok   nats.password is shown as $(value "$tmp/pw.out" nats.password), its value nowhere in the output"
expect "large worker" "$tmp/large.worker.out" nats.creds '"/etc/lineage/nats/nats.creds"' "TOML file"
expect "large worker" "$tmp/large.worker.out" shutdown.grace_ms 120500 "TOML file"
loads minimal 1 lineage nats://nats:4222 0.0.0.0:9464 8 3000 500 100 400 800 -f "$CHART/ci/minimal-values.yaml"
expect "minimal worker" "$tmp/minimal.worker.out" nats.nkey_seed_file '"/etc/lineage/nats/nkey.seed"' "TOML file"
expect "token worker" "$tmp/token.worker.out" nats.token_file '"/etc/lineage/nats/token"' "TOML file"
expect "token worker" "$tmp/token.worker.out" agents.allow_raw_commands true "TOML file"
echo "check-chart: ok   large: nats.creds; minimal: nats.nkey_seed_file; token: nats.token_file, allow_raw_commands"
# The sandbox keys as the node sees them (config show: whether this host can make a sandbox is
# the node's start-up probe, not the loader's).
loads sandbox 3 lineage nats://nats:4222 0.0.0.0:9464 8 3000 500 100 400 800 -f "$CHART/ci/sandbox-values.yaml"
out=$tmp/sandbox.worker.out
expect "sandbox worker" "$out" agents.acp-testagent.isolation '"sandbox"' "TOML file"
expect "sandbox worker" "$out" agents.confined.isolation '"sandbox"' "TOML file"
expect "sandbox worker" "$out" agents.confined.sandbox_read_only '["/usr/local/lib/node_modules", "/etc/lineage-agent"]' "TOML file"
expect "sandbox worker" "$out" agents.confined.sandbox_read_write '["/var/lib/lineage/shared-cache"]' "TOML file"
expect "sandbox worker" "$out" agents.trusted.isolation '"none"' "TOML file"
expect "sandbox worker" "$out" agents.script.isolation '"auto"' "default"
echo "check-chart: ok   sandbox: agents.<name>.isolation, sandbox_read_only, sandbox_read_write"
# The helm test pod's flags and NATS_* variables (of every value set) are the CLI's.
"$bin" status --help >"$tmp/status-help"
for flag in --nats --cluster --tls-required; do
  grep -q -- "$flag" "$tmp/status-help" || fail "lineage status has no $flag (the helm test pod passes it)"
done
test_env=$(for set in "${sets[@]}"; do grep -A200 '^# Source: lineage/templates/tests/test-status.yaml' "$tmp/$set.yaml" | grep -o 'name: NATS_[A-Z_]*' | awk '{ print $2 }'; done | sort -u)
for var in $test_env; do
  grep -Eq "\[env: ${var}[]=]" "$tmp/status-help" || fail "the helm test pod sets $var, which lineage status does not read"
done
echo "check-chart: ok   lineage status reads the test pod's flags (--nats --cluster --tls-required) and variables ($(echo "$test_env" | tr '\n' ' '))"
echo "check-chart: all checks passed"
