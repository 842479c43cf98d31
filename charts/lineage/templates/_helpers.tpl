{{/* ------------------------------------------------------------------ names */}}

{{- define "lineage.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name. Pod names built from it become lineage node ids, which are NATS
subject tokens (letters, digits, '-', '_'), so it must not contain dots (checked in
lineage.validate).
*/}}
{{- define "lineage.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "lineage.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* StatefulSet of voters. At most 52 characters so the controller-revision-hash label fits. */}}
{{- define "lineage.voterName" -}}
{{- printf "%s-voter" (include "lineage.fullname" .) | trunc 52 | trimSuffix "-" }}
{{- end }}

{{/* Headless Service governing the voters' stable DNS names. */}}
{{- define "lineage.voterHeadlessName" -}}
{{- printf "%s-voter-headless" (include "lineage.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "lineage.workerName" -}}
{{- printf "%s-worker" (include "lineage.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The Secret holding the voters' shared Raft token (registry.direct): registry.direct.existingSecret,
else the one the chart creates (templates/raft-token-secret.yaml).
*/}}
{{- define "lineage.raftTokenSecret" -}}
{{- .Values.registry.direct.existingSecret | default (printf "%s-raft-token" (include "lineage.fullname" .) | trunc 63 | trimSuffix "-") }}
{{- end }}

{{- define "lineage.configName" -}}
{{- printf "%s-config" (include "lineage.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "lineage.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lineage.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "lineage.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* ------------------------------------------------------------------ labels */}}

{{- define "lineage.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lineage.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "lineage.labels" -}}
helm.sh/chart: {{ include "lineage.chart" . }}
{{ include "lineage.selectorLabels" . }}
app.kubernetes.io/version: {{ (.Values.image.tag | default .Chart.AppVersion) | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: lineage
{{- end }}

{{/* ------------------------------------------------------------------ validation */}}

{{/*
Refuses values the schema cannot express (and repeats the voters check, so it still holds when
the schema is skipped with --skip-schema-validation). Included by every template.
*/}}
{{- define "lineage.validate" -}}
{{- $v := .Values.voters }}
{{- $isNumber := or (kindIs "int" $v) (kindIs "int64" $v) (kindIs "float64" $v) }}
{{- if or (not $isNumber) (and $isNumber (ne (float64 $v) (float64 (int $v)))) (and $isNumber (not (has (int $v) (list 1 3 5)))) }}
{{- fail (printf "voters must be 1, 3 or 5 (got %v): a Raft group needs an odd number of voters to keep a majority, and more than 5 only slows commits. Scale the non-voting workers with workers.replicas instead." $v) }}
{{- end }}
{{- $full := include "lineage.fullname" . }}
{{- if not (regexMatch "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$" $full) }}
{{- fail (printf "the chart's full name %q must be letters, digits and '-' only (no dots): pod names become lineage node ids, which are NATS subject tokens. Set fullnameOverride." $full) }}
{{- end }}
{{- $md := .Values.limits.maxDepth }}
{{- $mdIsNumber := or (kindIs "int" $md) (kindIs "int64" $md) (kindIs "float64" $md) }}
{{- if or (not $mdIsNumber) (and $mdIsNumber (ne (float64 $md) (float64 (int64 $md)))) (and $mdIsNumber (or (lt (float64 $md) 0.0) (gt (float64 $md) 9007199254740991.0))) }}
{{- fail (printf "limits.maxDepth must be a non-negative integer of at most 2^53-1 (got %v): it becomes limits.max_depth, which the node requires (there is no \"no cap\")" $md) }}
{{- end }}
{{- $lease := .Values.lease }}
{{- if or (le (int64 $lease.heartbeatMs) 0) (le (int64 $lease.leaseMs) (int64 $lease.heartbeatMs)) }}
{{- fail (printf "need 0 < lease.heartbeatMs (%v) < lease.leaseMs (%v), or every node loses its lease between heartbeats" (int64 $lease.heartbeatMs) (int64 $lease.leaseMs)) }}
{{- end }}
{{- $r := .Values.registry }}
{{- if or (le (int64 $r.heartbeatMs) 0) (le (int64 $r.electionMinMs) (int64 $r.heartbeatMs)) (le (int64 $r.electionMaxMs) (int64 $r.electionMinMs)) }}
{{- fail (printf "need 0 < registry.heartbeatMs (%v) < registry.electionMinMs (%v) < registry.electionMaxMs (%v)" (int64 $r.heartbeatMs) (int64 $r.electionMinMs) (int64 $r.electionMaxMs)) }}
{{- end }}
{{- if and .Values.workers.autoscaling.enabled (gt (int .Values.workers.autoscaling.minReplicas) (int .Values.workers.autoscaling.maxReplicas)) }}
{{- fail "workers.autoscaling.minReplicas must not exceed workers.autoscaling.maxReplicas" }}
{{- end }}
{{- $auth := .Values.nats.auth }}
{{- if and $auth.method (not $auth.existingSecret) }}
{{- fail (printf "nats.auth.method is %q but nats.auth.existingSecret is empty: create a Secret with the credentials (charts/lineage/README.md \"NATS credentials and TLS\") and name it there" $auth.method) }}
{{- end }}
{{- if and (eq $auth.method "userPassword") (not $auth.user) }}
{{- fail "nats.auth.method is userPassword but nats.auth.user is empty: set the voters' NATS user name" }}
{{- end }}
{{- range $role := list "workers" "test" }}
{{- $r := get $auth $role | default dict }}
{{- if and (or $r.existingSecret $r.user) (not $auth.method) }}
{{- fail (printf "nats.auth.%s is set but nats.auth.method is empty: choose creds, nkey, userPassword or token" $role) }}
{{- end }}
{{- end }}
{{- $tls := .Values.nats.tls }}
{{- if $tls.existingSecret }}
{{- if not (or $tls.ca $tls.clientCert) }}
{{- fail "nats.tls.existingSecret is set but neither nats.tls.ca nor nats.tls.clientCert: nothing to mount from it" }}
{{- end }}
{{- else }}
{{- if $tls.clientCert }}
{{- fail "nats.tls.clientCert is true but nats.tls.existingSecret is empty: name the Secret holding tls.crt and tls.key" }}
{{- end }}
{{- range $role := list "workers" "test" }}
{{- if (get $tls $role | default dict).existingSecret }}
{{- fail (printf "nats.tls.%s.existingSecret is set but nats.tls.existingSecret is empty: set the default Secret too (it decides which TLS files lineage.toml names)" $role) }}
{{- end }}
{{- end }}
{{- end }}
{{- $direct := .Values.registry.direct }}
{{- if $direct.enabled }}
{{- /* The node refuses [registry.direct] with tls_required, tls_ca or tls_cert; a tls:// URL is
TLS to NATS too, which the direct links would leave. */}}
{{- $natsTls := list }}
{{- if $tls.required }}{{ $natsTls = append $natsTls "nats.tls.required" }}{{ end }}
{{- if $tls.existingSecret }}{{ $natsTls = append $natsTls "nats.tls.existingSecret" }}{{ end }}
{{- if contains "tls://" .Values.nats.url }}{{ $natsTls = append $natsTls (printf "nats.url %s" .Values.nats.url) }}{{ end }}
{{- with $natsTls }}
{{- fail (printf "registry.direct.enabled is true but NATS uses TLS (%s): the direct Raft links are authenticated, not encrypted, so Raft would leave TLS; disable one of them (registry.direct.enabled=false keeps Raft on NATS, under TLS)" (join ", " .)) }}
{{- end }}
{{- if eq (int $direct.port) (int .Values.http.port) }}
{{- fail (printf "registry.direct.port and http.port are both %d: the voters' Raft links need a port of their own; change registry.direct.port" (int $direct.port)) }}
{{- end }}
{{- if not $direct.secretKey }}
{{- fail "registry.direct.secretKey is empty: name the token's key in the Secret (default token)" }}
{{- end }}
{{- end }}
{{- range $name, $p := .Values.agents.profiles }}
{{- if and $p (eq $p.driver "acp") (not $p.command) }}
{{- fail (printf "agents.profiles.%s: driver acp needs a command (a program on the image's PATH or an absolute path)" $name) }}
{{- end }}
{{- end }}
{{- if .Values.natsPermissions.enabled }}
{{- range $role, $u := .Values.natsPermissions.users }}
{{- if eq (len (compact (list $u.passwordEnv $u.nkey))) 0 }}
{{- fail (printf "natsPermissions.users.%s: set passwordEnv (the NATS server's env var with the password) or nkey (the public key)" $role) }}
{{- end }}
{{- if and $u.passwordEnv $u.nkey }}
{{- fail (printf "natsPermissions.users.%s: set passwordEnv or nkey, not both" $role) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* ------------------------------------------------------------------ config */}}

{{/*
lineage.toml in the node's documented format (config/lineage.toml in the lineage repository;
loader crates/lineage-node/src/config.rs). The loader refuses unknown keys, so render exactly its
keys and nothing else. Strings go through toJson: a JSON string is a valid TOML basic string.
Per-pod settings (node.id, registry.raft_id, registry.bootstrap, registry.role) come from the
environment; the file's node.id and raft_id are deliberately invalid placeholders, so a pod
missing its environment refuses to start instead of posing as another node.
*/}}
{{- define "lineage.config" -}}
{{- include "lineage.configFor" (dict "root" . "voters" false) }}
{{- end }}

{{/*
The voters' lineage.toml (ConfigMap key lineage-voter.toml, mounted as lineage.toml), rendered
only with registry.direct.enabled: lineage.config plus [registry.direct], which a client node
(the workers) refuses.
*/}}
{{- define "lineage.voterConfig" -}}
{{- include "lineage.configFor" (dict "root" . "voters" true) }}
{{- end }}

{{/* Usage: include "lineage.configFor" (dict "root" $ "voters" true|false) */}}
{{- define "lineage.configFor" -}}
{{- $root := .root }}
{{- $direct := and .voters $root.Values.registry.direct.enabled }}
{{- with $root -}}
# lineage.toml rendered by Helm chart {{ include "lineage.chart" . }} (release {{ .Release.Name }}).
# Format: config/lineage.toml of the lineage repository; unknown keys stop the node.
# Per-pod settings come from LINEAGE_* environment variables, which override this file
# (figment: `__` nests; `lineage config show --config <this file>` shows each value's source):
#   LINEAGE_NODE__ID             = pod name                   (every pod)
#   LINEAGE_REGISTRY__RAFT_ID    = StatefulSet ordinal + 1    (voters)
#   LINEAGE_REGISTRY__BOOTSTRAP  = true                       (voter ordinal 0 only)
#   LINEAGE_REGISTRY__ROLE       = client                     (workers)
# Logging is not configured here: RUST_LOG filters it and the lines are JSON.

cluster = {{ .Values.cluster.name | toJson }}
nats_url = {{ .Values.nats.url | toJson }}

[node]
# Placeholder: every pod sets LINEAGE_NODE__ID to its pod name (an empty id is refused).
id = ""
# Voters: registry/ (raft-log/, registry.redb, snapshot) on the PVC; every node: the ACP agents' working directory.
data_dir = "/var/lib/lineage"
http_addr = {{ printf "0.0.0.0:%d" (int .Values.http.port) | toJson }}

[registry]
# Workers override this with LINEAGE_REGISTRY__ROLE=client.
role = "voter"
# Placeholder: each voter sets LINEAGE_REGISTRY__RAFT_ID (ordinal + 1); 0 is not in `voters`, so
# a voter without it is refused. Clients ignore raft_id.
raft_id = 0
{{- if $direct }}
# Raft id -> node id (pod name). Raft RPC between the voters goes over the direct links of
# [registry.direct] below; everything else over NATS.
{{- else }}
# Raft id -> node id (pod name). Raft RPC travels over NATS subjects keyed by raft id, so no
# host addresses are needed.
{{- end }}
voters = { {{- range $ordinal := until (int .Values.voters) }}{{ if $ordinal }},{{ end }} {{ add1 $ordinal }} = {{ printf "%s-%d" (include "lineage.voterName" $root) $ordinal | toJson }}{{- end }} }
# Only voter ordinal 0 overrides this (LINEAGE_REGISTRY__BOOTSTRAP=true); it initializes the
# group only when its data dir holds no Raft state, so restarts never re-initialize.
bootstrap = false
heartbeat_ms = {{ int64 .Values.registry.heartbeatMs }}
election_min_ms = {{ int64 .Values.registry.electionMinMs }}
election_max_ms = {{ int64 .Values.registry.electionMaxMs }}
{{- with .Values.registry.snapshotAfterCommands }}
snapshot_after_commands = {{ int64 . }}
{{- end }}
{{- with .Values.registry.logKeptBehindSnapshot }}
log_kept_behind_snapshot = {{ int64 . }}
{{- end }}
{{- if $direct }}
{{- $port := int .Values.registry.direct.port }}

[registry.direct]
# registry.direct.enabled: the voters send their Raft RPCs to each other over TCP, not through
# nats-server. Each link proves the shared token (HMAC over nonces; the token is never sent):
# authenticated, not encrypted. Voters only: a client node (the workers) refuses this section.
listen = {{ printf "0.0.0.0:%d" $port | toJson }}
# Raft id -> host:port: every voter by its stable name through the headless Service (a voter's
# own entry is unused).
peers = { {{- range $ordinal := until (int .Values.voters) }}{{ if $ordinal }},{{ end }} {{ add1 $ordinal }} = {{ printf "%s-%d.%s:%d" (include "lineage.voterName" $root) $ordinal (include "lineage.voterHeadlessName" $root) $port | toJson }}{{- end }} }
# The Secret registry.direct.existingSecret (or the chart's <full>-raft-token), key
# registry.direct.secretKey, mounted from the Secret; this file never holds the token.
token_file = "/etc/lineage/raft/token"
{{- end }}

[limits]
max_depth = {{ int64 .Values.limits.maxDepth }}
{{- with .Values.limits.idleRootMs }}
idle_root_ms = {{ int64 . }}
{{- end }}

[lease]
lease_ms = {{ int64 .Values.lease.leaseMs }}
heartbeat_ms = {{ int64 .Values.lease.heartbeatMs }}
takeover_after_ms = {{ int64 .Values.lease.takeoverAfterMs }}

[retention]
disposed_after_ms = {{ int64 .Values.retention.disposedAfterMs }}
request_results_ms = {{ int64 .Values.retention.requestResultsMs }}

[shutdown]
grace_ms = {{ int64 .Values.shutdown.graceMs }}

[nats]
{{- $auth := .Values.nats.auth }}
{{- $tls := .Values.nats.tls }}
# Credentials are files mounted from Secrets under /etc/lineage/nats/ (this file never holds a
# secret). Each role mounts its own Secret at the same paths (nats.auth.{existingSecret,workers,test}).
{{- if eq $auth.method "creds" }}
creds = "/etc/lineage/nats/nats.creds"
{{- else if eq $auth.method "nkey" }}
nkey_seed_file = "/etc/lineage/nats/nkey.seed"
{{- else if eq $auth.method "userPassword" }}
# Workers with their own user override it with LINEAGE_NATS__USER (nats.auth.workers.user).
user = {{ $auth.user | toJson }}
password_file = "/etc/lineage/nats/password"
{{- else if eq $auth.method "token" }}
token_file = "/etc/lineage/nats/token"
{{- else }}
# No authentication (nats.auth.method is empty).
{{- end }}
tls_required = {{ $tls.required }}
{{- if $tls.existingSecret }}
{{- if $tls.ca }}
tls_ca = "/etc/lineage/nats/tls/ca.crt"
{{- end }}
{{- if $tls.clientCert }}
tls_cert = "/etc/lineage/nats/tls/tls.crt"
tls_key = "/etc/lineage/nats/tls/tls.key"
{{- end }}
{{- end }}
stream_replicas = {{ int .Values.nats.streamReplicas }}
update_streams = {{ .Values.nats.updateStreams }}

[agents]
# Sessions name one of these profiles; a raw command line from the wire is refused unless
# allow_raw_commands (dev only).
allow_raw_commands = {{ .Values.agents.allowRawCommands }}
{{- range $name, $p := .Values.agents.profiles }}
{{- if $p }}

[agents.{{ $name }}]
driver = {{ $p.driver | toJson }}
{{- if hasKey $p "command" }}
command = {{ $p.command | toJson }}
{{- end }}
{{- if hasKey $p "args" }}
args = [{{ range $i, $a := ($p.args | default list) }}{{ if $i }}, {{ end }}{{ $a | toString | toJson }}{{ end }}]
{{- end }}
{{- if hasKey $p "env" }}
{{- $pairs := list }}
{{- range $k, $v := ($p.env | default dict) }}
{{- $pairs = append $pairs (printf "%s = %s" ($k | toJson) ($v | toString | toJson)) }}
{{- end }}
env = {{ if $pairs }}{ {{ join ", " $pairs }} }{{ else }}{}{{ end }}
{{- end }}
{{- if hasKey $p "passEnv" }}
pass_env = [{{ range $i, $a := ($p.passEnv | default list) }}{{ if $i }}, {{ end }}{{ $a | toJson }}{{ end }}]
{{- end }}
{{- if hasKey $p "workdir" }}
workdir = {{ $p.workdir | toJson }}
{{- end }}
{{- if hasKey $p "promptTimeoutMs" }}
prompt_timeout_ms = {{ int64 $p.promptTimeoutMs }}
{{- end }}
{{- if hasKey $p "tools" }}
tools = {{ $p.tools }}
{{- end }}
{{- if hasKey $p "toolsTransport" }}
tools_transport = {{ $p.toolsTransport | toJson }}
{{- end }}
{{- if hasKey $p "modes" }}
{{- $modes := list }}
{{- range $k, $v := ($p.modes | default dict) }}
{{- $modes = append $modes (printf "%s = %s" ($k | toJson) ($v | toString | toJson)) }}
{{- end }}
modes = {{ if $modes }}{ {{ join ", " $modes }} }{{ else }}{}{{ end }}
{{- end }}
{{- if hasKey $p "isolation" }}
isolation = {{ $p.isolation | toJson }}
{{- end }}
{{- if hasKey $p "sandboxReadOnly" }}
sandbox_read_only = [{{ range $i, $a := ($p.sandboxReadOnly | default list) }}{{ if $i }}, {{ end }}{{ $a | toJson }}{{ end }}]
{{- end }}
{{- if hasKey $p "sandboxReadWrite" }}
sandbox_read_write = [{{ range $i, $a := ($p.sandboxReadWrite | default list) }}{{ if $i }}, {{ end }}{{ $a | toJson }}{{ end }}]
{{- end }}
{{- if hasKey $p "description" }}
description = {{ $p.description | toJson }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* ------------------------------------------------------------------ pod pieces */}}

{{/* Environment shared by every lineage container. */}}
{{- define "lineage.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: LINEAGE_NODE__ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: RUST_LOG
  value: {{ .Values.log.level | quote }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* ------------------------------------------------------------------ NATS credentials */}}

{{/*
The Secret a role mounts NATS credentials from ("" for none). Roles: "voters" (the default),
"workers", "test". Usage: include "lineage.natsAuthSecret" (dict "root" $ "role" "workers")
*/}}
{{- define "lineage.natsAuthSecret" -}}
{{- $auth := .root.Values.nats.auth }}
{{- if $auth.method }}
{{- (get $auth .role | default dict).existingSecret | default $auth.existingSecret }}
{{- end }}
{{- end }}

{{/* The Secret a role mounts TLS files from ("" for none). */}}
{{- define "lineage.natsTlsSecret" -}}
{{- $tls := .root.Values.nats.tls }}
{{- if $tls.existingSecret }}
{{- (get $tls .role | default dict).existingSecret | default $tls.existingSecret }}
{{- end }}
{{- end }}

{{/* The NATS user name of a role (method userPassword), "" otherwise. */}}
{{- define "lineage.natsUser" -}}
{{- $auth := .root.Values.nats.auth }}
{{- if eq $auth.method "userPassword" }}
{{- (get $auth .role | default dict).user | default $auth.user }}
{{- end }}
{{- end }}

{{/* Secret key and file name (under /etc/lineage/nats/) of the chosen method. */}}
{{- define "lineage.natsAuthFile" -}}
{{- $auth := .Values.nats.auth }}
{{- $k := $auth.keys }}
{{- if eq $auth.method "creds" }}{{ dict "key" $k.creds "file" "nats.creds" | toJson }}
{{- else if eq $auth.method "nkey" }}{{ dict "key" $k.nkeySeed "file" "nkey.seed" | toJson }}
{{- else if eq $auth.method "userPassword" }}{{ dict "key" $k.password "file" "password" | toJson }}
{{- else if eq $auth.method "token" }}{{ dict "key" $k.token "file" "token" | toJson }}
{{- else }}{}
{{- end }}
{{- end }}

{{- define "lineage.ports" -}}
- name: http
  containerPort: {{ .Values.http.port }}
  protocol: TCP
{{- end }}

{{- define "lineage.probes" -}}
{{- $p := .Values.probes }}
{{- if $p.startup.enabled }}
startupProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: {{ $p.startup.periodSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
  timeoutSeconds: {{ $p.startup.timeoutSeconds }}
{{- end }}
livenessProbe:
  httpGet:
    path: /healthz
    port: http
  {{- with $p.liveness.initialDelaySeconds }}
  initialDelaySeconds: {{ . }}
  {{- end }}
  periodSeconds: {{ $p.liveness.periodSeconds }}
  failureThreshold: {{ $p.liveness.failureThreshold }}
  timeoutSeconds: {{ $p.liveness.timeoutSeconds }}
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  {{- with $p.readiness.initialDelaySeconds }}
  initialDelaySeconds: {{ . }}
  {{- end }}
  periodSeconds: {{ $p.readiness.periodSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
  timeoutSeconds: {{ $p.readiness.timeoutSeconds }}
{{- end }}

{{/* Mounts shared by every lineage container (the data dir is added per workload). */}}
{{- define "lineage.volumeMounts" -}}
- name: config
  mountPath: /etc/lineage
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Volumes of a role's pods. /etc/lineage is one projected volume: lineage.toml from the ConfigMap
and, under nats/, the role's NATS credentials and TLS files from its Secrets (mode 0440: readable
through the pod's fsGroup). With registry.direct.enabled the voters get their own lineage.toml
(key lineage-voter.toml: with [registry.direct]) and raft/token from the token Secret (0440).
A key missing from a Secret keeps the pod from starting (the event names the key).
Usage: include "lineage.volumes" (dict "root" $ "role" "voters")
*/}}
{{- define "lineage.volumes" -}}
{{- $root := .root }}
{{- $authSecret := include "lineage.natsAuthSecret" . }}
{{- $tlsSecret := include "lineage.natsTlsSecret" . }}
{{- $tls := $root.Values.nats.tls }}
{{- $direct := and (eq .role "voters") $root.Values.registry.direct.enabled -}}
- name: config
  projected:
    defaultMode: 292 # 0444
    sources:
      - configMap:
          name: {{ include "lineage.configName" $root }}
          items:
            - key: {{ if $direct }}lineage-voter.toml{{ else }}lineage.toml{{ end }}
              path: lineage.toml
      {{- if $authSecret }}
      {{- $f := include "lineage.natsAuthFile" $root | fromJson }}
      - secret:
          name: {{ $authSecret }}
          items:
            - key: {{ $f.key }}
              path: nats/{{ $f.file }}
              mode: 288 # 0440
      {{- end }}
      {{- if $tlsSecret }}
      - secret:
          name: {{ $tlsSecret }}
          items:
            {{- if $tls.ca }}
            - key: {{ $tls.keys.ca }}
              path: nats/tls/ca.crt
              mode: 288 # 0440
            {{- end }}
            {{- if $tls.clientCert }}
            - key: {{ $tls.keys.cert }}
              path: nats/tls/tls.crt
              mode: 288 # 0440
            - key: {{ $tls.keys.key }}
              path: nats/tls/tls.key
              mode: 288 # 0440
            {{- end }}
      {{- end }}
      {{- if $direct }}
      # registry.direct.token_file: the voters' shared Raft token.
      - secret:
          name: {{ include "lineage.raftTokenSecret" $root }}
          items:
            - key: {{ $root.Values.registry.direct.secretKey }}
              path: raft/token
              mode: 288 # 0440
      {{- end }}
- name: tmp
  emptyDir: {}
{{- with $root.Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
topologySpreadConstraints of a component; an entry without labelSelector gets the component's
labels. Usage: include "lineage.topologySpread" (dict "root" $ "component" "voter" "constraints" list)
*/}}
{{- define "lineage.topologySpread" -}}
{{- $root := .root }}
{{- $out := list }}
{{- range .constraints }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}
{{- $labels := include "lineage.selectorLabels" $root | fromYaml }}
{{- $_ := set $labels "app.kubernetes.io/component" $.component }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" $labels) }}
{{- end }}
{{- $out = append $out $c }}
{{- end }}
{{- with $out }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The pods' terminationGracePeriodSeconds: the node's shutdown.grace_ms (running turns finish),
rounded up to seconds, plus 15 s for the rest of its shutdown (hand-off, service, registry
member: each step bounded by 5 s). An explicit value must exceed the grace.
*/}}
{{- define "lineage.terminationGracePeriodSeconds" -}}
{{- $grace := div (add (int64 .Values.shutdown.graceMs) 999) 1000 }}
{{- $explicit := .Values.terminationGracePeriodSeconds }}
{{- if kindIs "invalid" $explicit }}
{{- add $grace 15 }}
{{- else if le (int64 $explicit) $grace }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be above shutdown.graceMs (%d s): Kubernetes would kill running turns; raise it or leave it null to derive grace + 15 s" (int64 $explicit) $grace) }}
{{- else }}
{{- int64 $explicit }}
{{- end }}
{{- end }}

{{/*
Pod-level settings shared by voters and workers.
Usage: include "lineage.podSpecCommon" (dict "root" $ "component" .Values.registry)
enableServiceLinks is off: Kubernetes would otherwise inject LINEAGE_*_SERVICE_HOST/PORT
variables for this release's Services, which figment would read as config keys.
*/}}
{{- define "lineage.podSpecCommon" -}}
{{- $root := .root }}
{{- $c := .component }}
serviceAccountName: {{ include "lineage.serviceAccountName" $root }}
automountServiceAccountToken: {{ $root.Values.serviceAccount.automountServiceAccountToken }}
enableServiceLinks: false
terminationGracePeriodSeconds: {{ include "lineage.terminationGracePeriodSeconds" $root }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $podSecurityContext := $root.Values.podSecurityContext }}
{{- if $root.Values.sandbox.enabled }}
{{- /* sandbox.enabled: a user namespace of the pod's own (hostUsers: false), in which bubblewrap
may make the agents' sandboxes (nested user, pid, mount namespaces, a fresh /proc), and
sandbox.seccompProfile (default Unconfined: the runtime's default profile refuses unshare/clone
with namespace flags and mount) instead of podSecurityContext's. */}}
{{- $podSecurityContext = set (deepCopy ($podSecurityContext | default dict)) "seccompProfile" (deepCopy $root.Values.sandbox.seccompProfile) }}
hostUsers: false
{{- end }}
{{- with $podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($c.nodeSelector | default $root.Values.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($c.tolerations | default $root.Values.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
Container-level settings shared by voters and workers.
Usage: include "lineage.containerCommon" (dict "root" $ "component" .Values.registry ["voters" true])
"voters": the voters' container (with registry.direct.enabled: the `raft` port).
*/}}
{{- define "lineage.containerCommon" -}}
{{- $root := .root }}
{{- $c := .component }}
image: {{ include "lineage.image" $root }}
imagePullPolicy: {{ $root.Values.image.pullPolicy }}
{{- $securityContext := $root.Values.securityContext }}
{{- if $root.Values.sandbox.enabled }}
{{- /* sandbox.enabled: procMount Unmasked (bubblewrap mounts a fresh procfs, which the kernel
refuses over a masked /proc; Kubernetes allows it only with hostUsers: false) and
sandbox.appArmorProfile (default Unconfined), merged into securityContext: non-root, read-only
root, no privilege escalation and drop ALL stay (bubblewrap needs no capability there). A
container-level seccompProfile (none by default) would override the pod's: it becomes
sandbox.seccompProfile too. */}}
{{- $securityContext = deepCopy ($securityContext | default dict) }}
{{- $_ := set $securityContext "procMount" "Unmasked" }}
{{- $_ := set $securityContext "appArmorProfile" (deepCopy $root.Values.sandbox.appArmorProfile) }}
{{- if hasKey $securityContext "seccompProfile" }}
{{- $_ := set $securityContext "seccompProfile" (deepCopy $root.Values.sandbox.seccompProfile) }}
{{- end }}
{{- end }}
{{- with $securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
ports:
  {{- include "lineage.ports" $root | nindent 2 }}
  {{- if and .voters $root.Values.registry.direct.enabled }}
  # registry.direct.listen: the other voters' Raft links.
  - name: raft
    containerPort: {{ $root.Values.registry.direct.port }}
    protocol: TCP
  {{- end }}
{{ include "lineage.probes" $root | trim }}
{{- with ($c.resources | default $root.Values.resources) }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.agents.extraEnvFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Usage: include "lineage.podAnnotations" (dict "root" $ "component" $c ["voters" true]) */}}
{{- define "lineage.podAnnotations" -}}
{{- $root := .root }}
{{- if and .voters $root.Values.registry.direct.enabled }}
checksum/config: {{ include "lineage.voterConfig" $root | sha256sum }}
{{- else }}
checksum/config: {{ include "lineage.config" $root | sha256sum }}
{{- end }}
{{- with (.component.podAnnotations | default $root.Values.podAnnotations) }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* ------------------------------------------------------------------ NATS permissions */}}

{{/*
The subjects each role may publish and subscribe to, as JSON:
{"voter": {"publish": {"allow": [...], "deny": [...]}, "subscribe": {...}, "allow_responses": true}, ...}
The same lists as config/nats-server.conf of the lineage repository (issue 9, contract section 3,
tightened there by running real nodes and natscli against it), for this release's cluster. One
difference: that file has one user per worker node (its subjects name the node id); the workers of
a Deployment share one user, so their <node> is `*`, and they are denied the voters' node ids.
*/}}
{{- define "lineage.natsRoles" -}}
{{- $p := printf "lineage.%s" .Values.cluster.name }}
{{- $s := printf "LINEAGE_%s" (.Values.cluster.name | replace "-" "_" | upper) }}
{{- $events := printf "%s_EVENTS" $s }}
{{- $inbox := printf "%s_INBOX" $s }}
{{- $api := "$JS.API" }}
{{- /* Workspaces (issue 39): the Object Store bucket <S>_WORKSPACES (stream OBJ_<S>_WORKSPACES):
put (chunks and meta, a replaced object's chunks purged), get (meta and chunks by direct gets:
no consumer), delete. Nodes and the operator's CLI; the voters also make the bucket. */}}
{{- $bucket := printf "%s_WORKSPACES" $s }}
{{- $jsWorkspaces := list
    (printf "$O.%s.>" $bucket)
    (printf "%s.STREAM.INFO.OBJ_%s" $api $bucket)
    (printf "%s.STREAM.PURGE.OBJ_%s" $api $bucket)
    (printf "%s.STREAM.MSG.GET.OBJ_%s" $api $bucket)
    (printf "%s.DIRECT.GET.OBJ_%s" $api $bucket)
    (printf "%s.DIRECT.GET.OBJ_%s.>" $api $bucket) }}
{{- $jsWorkspacesCreate := list (printf "%s.STREAM.CREATE.OBJ_%s" $api $bucket) }}
{{- /* Hosting agents (voters and workers): per-node control, lifecycle events and parent
inboxes, session event logs, drain progress. */}}
{{- $hosting := list (printf "%s.node.*.*" $p) (printf "%s.parent.*.*" $p) (printf "%s.session.*.events" $p) (printf "%s.session.*.output" $p) (printf "%s.session.*.approval" $p) (printf "%s.drain.*.progress" $p) }}
{{- /* JetStream of a node: read the streams, session logs by direct get, a retried append's
msg get, purges (a log's messages before its compaction; retention: disposed sessions' logs and
inboxes), one durable pull consumer per live parent filtered on its inbox, acks. */}}
{{- $jsNode := list
    (printf "%s.STREAM.INFO.%s" $api $events)
    (printf "%s.STREAM.INFO.%s" $api $inbox)
    (printf "%s.DIRECT.GET.%s" $api $events)
    (printf "%s.STREAM.MSG.GET.%s" $api $events)
    (printf "%s.STREAM.PURGE.%s" $api $events)
    (printf "%s.STREAM.PURGE.%s" $api $inbox)
    (printf "%s.CONSUMER.CREATE.%s.*.%s.parent.*.inbox" $api $inbox $p)
    (printf "%s.CONSUMER.INFO.%s.*" $api $inbox)
    (printf "%s.CONSUMER.DELETE.%s.*" $api $inbox)
    (printf "%s.CONSUMER.NAMES.%s" $api $inbox)
    (printf "%s.CONSUMER.MSG.NEXT.%s.*" $api $inbox)
    (printf "$JS.ACK.%s.>" $inbox) }}
{{- /* Voters also create the streams (first start) and update them (nats.update_streams). */}}
{{- $jsCreate := list
    (printf "%s.STREAM.CREATE.%s" $api $events)
    (printf "%s.STREAM.CREATE.%s" $api $inbox)
    (printf "%s.STREAM.UPDATE.%s" $api $events)
    (printf "%s.STREAM.UPDATE.%s" $api $inbox) }}
{{- /* Reading the streams from the CLI: stream info and single messages; a parent's inbox
consumer (its description names the session). */}}
{{- $jsRead := list
    (printf "%s.STREAM.INFO.%s" $api $events)
    (printf "%s.STREAM.INFO.%s" $api $inbox)
    (printf "%s.STREAM.MSG.GET.%s" $api $events)
    (printf "%s.STREAM.MSG.GET.%s" $api $inbox)
    (printf "%s.CONSUMER.INFO.%s.*" $api $inbox) }}
{{- /* The operator's own ephemeral consumers (`nats stream view`). */}}
{{- $jsView := list
    (printf "%s.DIRECT.GET.%s" $api $events)
    (printf "%s.CONSUMER.CREATE.%s.*.>" $api $inbox)
    (printf "%s.CONSUMER.MSG.NEXT.%s.*" $api $inbox) }}
{{- $reads := list (printf "%s.registry.read" $p) (printf "%s.registry.*.read" $p) }}
{{- $srvServe := list "$SRV.*" "$SRV.*.lineage" "$SRV.*.lineage.*" }}
{{- /* Registry members (voters) also serve the `lineage-registry` service (its reads). */}}
{{- $srvRegistry := list "$SRV.*.lineage-registry" "$SRV.*.lineage-registry.*" }}
{{- $srvAsk := concat (list "$SRV.INFO" "$SRV.*.lineage" "$SRV.*.lineage.*") $srvRegistry }}
{{- $watch := list "_INBOX.>" (printf "%s.parent.>" $p) (printf "%s.drain.*.progress" $p) (printf "%s.session.*.output" $p) }}
{{- /* `registry.*.read` / `registry.*.write.*` also match these: no write from a node named
`read`, nor a token that is not a Raft id. */}}
{{- $noOddWrites := list (printf "%s.registry.write.read" $p) (printf "%s.registry.write.write.>" $p) }}
{{- $workerPubDeny := $noOddWrites }}
{{- $workerSubDeny := list }}
{{- range $ordinal := until (int .Values.voters) }}
{{- $id := printf "%s-%d" (include "lineage.voterName" $) $ordinal }}
{{- $workerPubDeny = concat $workerPubDeny (list (printf "%s.registry.write.%s" $p $id) (printf "%s.registry.*.write.%s" $p $id)) }}
{{- $workerSubDeny = append $workerSubDeny (printf "%s.node.%s.*" $p $id) }}
{{- end }}
{{- $roles := dict
  "voter" (dict
    "publish" (dict "allow" (concat (list (printf "%s.raft.>" $p) (printf "%s.registry.>" $p)) $hosting (slice $jsNode 0 2) $jsCreate (slice $jsNode 2) $jsWorkspaces $jsWorkspacesCreate))
    "subscribe" (dict "allow" (concat (list (printf "%s.ctl.*" $p) (printf "%s.node.*.*" $p) (printf "%s.registry.>" $p) (printf "%s.raft.>" $p) "_INBOX.>") $srvServe $srvRegistry))
    "allow_responses" true)
  "worker" (dict
    "publish" (dict
      "allow" (concat (list (printf "%s.registry.write.*" $p) (printf "%s.registry.*.write.*" $p)) $reads $hosting $jsNode $jsWorkspaces)
      "deny" $workerPubDeny)
    "subscribe" (dict
      "allow" (concat (list (printf "%s.ctl.*" $p) (printf "%s.node.*.*" $p) "_INBOX.>") $srvServe)
      "deny" $workerSubDeny)
    "allow_responses" true)
  "operator" (dict
    "publish" (dict
      "allow" (concat (list (printf "%s.ctl.*" $p) (printf "%s.node.*.status" $p) "$SYS.REQ.USER.INFO") $reads $jsRead $jsView $jsWorkspaces $srvAsk)
      "deny" (list (printf "%s.registry.write.read" $p)))
    "subscribe" (dict "allow" (append $watch (printf "%s.session.*.approval" $p)))
    "allow_responses" true)
  "observer" (dict
    "publish" (dict
      "allow" (concat (list (printf "%s.ctl.status" $p) (printf "%s.node.*.status" $p)) $reads $jsRead (list (printf "%s.DIRECT.GET.%s" $api $events) "$SYS.REQ.USER.INFO") $srvAsk)
      "deny" (list (printf "%s.registry.write.read" $p)))
    "subscribe" (dict "allow" $watch))
}}
{{- toJson $roles }}
{{- end }}

{{/* The NATS server config snippet (natsPermissions): `authorization { users = [...] }`. */}}
{{- define "lineage.natsPermissionsConf" -}}
{{- $roles := include "lineage.natsRoles" . | fromJson }}
{{- $s := printf "LINEAGE_%s" (.Values.cluster.name | replace "-" "_" | upper) -}}
# lineage users for cluster {{ .Values.cluster.name | quote }} (release {{ .Release.Name }}, chart {{ include "lineage.chart" . }}),
# streams {{ $s }}_EVENTS and {{ $s }}_INBOX, object store {{ $s }}_WORKSPACES. Default deny: each user publishes and
# subscribes only what is listed. Passwords are environment variables of the NATS server
# ($NAME), so this file holds no secret. In the server config (mounted at /etc/lineage-nats):
#   include ../lineage-nats/lineage-permissions.conf
authorization {
  users = [
{{- range $role := list "voter" "worker" "operator" "observer" }}
{{- $u := get $.Values.natsPermissions.users $role }}
{{- $perm := get $roles $role }}
    # {{ $role }}
    {
      {{- if $u.nkey }}
      nkey: {{ $u.nkey | quote }}
      {{- else }}
      user: {{ $u.user | quote }}
      password: ${{ $u.passwordEnv }}
      {{- end }}
      permissions: {
        {{- range $dir := list "publish" "subscribe" }}
        {{- $d := get $perm $dir }}
        {{ $dir }}: {
          allow: [
            {{- range $d.allow }}
            {{ . | quote }}
            {{- end }}
          ]
          {{- with $d.deny }}
          deny: [
            {{- range . }}
            {{ . | quote }}
            {{- end }}
          ]
          {{- end }}
        }
        {{- end }}
        {{- if $perm.allow_responses }}
        # replies to the requests it serves: heartbeats, then the reply (G3), for up to an hour.
        allow_responses: { max: -1, expires: "1h" }
        {{- end }}
      }
    }
{{- end }}
  ]
}
{{- end }}
