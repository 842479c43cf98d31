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
# Voters: registry/registry.redb on the PVC; every node: the ACP agents' working directory.
data_dir = "/var/lib/lineage"
http_addr = {{ printf "0.0.0.0:%d" (int .Values.http.port) | toJson }}

[registry]
# Workers override this with LINEAGE_REGISTRY__ROLE=client.
role = "voter"
# Placeholder: each voter sets LINEAGE_REGISTRY__RAFT_ID (ordinal + 1); 0 is not in `voters`, so
# a voter without it is refused. Clients ignore raft_id.
raft_id = 0
# Raft id -> node id (pod name). Raft RPC travels over NATS subjects keyed by raft id, so no
# host addresses are needed.
voters = { {{- range $ordinal := until (int .Values.voters) }}{{ if $ordinal }},{{ end }} {{ add1 $ordinal }} = {{ printf "%s-%d" (include "lineage.voterName" $) $ordinal | toJson }}{{- end }} }
# Only voter ordinal 0 overrides this (LINEAGE_REGISTRY__BOOTSTRAP=true); it initializes the
# group only when its data dir holds no Raft state, so restarts never re-initialize.
bootstrap = false
heartbeat_ms = {{ int64 .Values.registry.heartbeatMs }}
election_min_ms = {{ int64 .Values.registry.electionMinMs }}
election_max_ms = {{ int64 .Values.registry.electionMaxMs }}

[limits]
max_depth = {{ int64 .Values.limits.maxDepth }}

[lease]
lease_ms = {{ int64 .Values.lease.leaseMs }}
heartbeat_ms = {{ int64 .Values.lease.heartbeatMs }}
takeover_after_ms = {{ int64 .Values.lease.takeoverAfterMs }}
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

{{- define "lineage.volumes" -}}
- name: config
  configMap:
    name: {{ include "lineage.configName" . }}
- name: tmp
  emptyDir: {}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
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
terminationGracePeriodSeconds: {{ $root.Values.terminationGracePeriodSeconds }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.podSecurityContext }}
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

{{/* Container-level settings shared by voters and workers. */}}
{{- define "lineage.containerCommon" -}}
{{- $root := .root }}
{{- $c := .component }}
image: {{ include "lineage.image" $root }}
imagePullPolicy: {{ $root.Values.image.pullPolicy }}
{{- with $root.Values.securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
ports:
  {{- include "lineage.ports" $root | nindent 2 }}
{{ include "lineage.probes" $root | trim }}
{{- with ($c.resources | default $root.Values.resources) }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "lineage.podAnnotations" -}}
{{- $root := .root }}
checksum/config: {{ include "lineage.config" $root | sha256sum }}
{{- with (.component.podAnnotations | default $root.Values.podAnnotations) }}
{{ toYaml . }}
{{- end }}
{{- end }}
