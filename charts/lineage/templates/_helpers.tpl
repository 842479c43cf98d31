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
{{- if le (int64 .Values.lease.ttlMs) (int64 .Values.lease.heartbeatIntervalMs) }}
{{- fail (printf "lease.ttlMs (%v) must be greater than lease.heartbeatIntervalMs (%v), or every node loses its lease between heartbeats" (int64 .Values.lease.ttlMs) (int64 .Values.lease.heartbeatIntervalMs)) }}
{{- end }}
{{- $raft := .Values.registry.raft }}
{{- if le (int64 $raft.electionTimeoutMinMs) (int64 $raft.heartbeatIntervalMs) }}
{{- fail (printf "registry.raft.electionTimeoutMinMs (%v) must be greater than registry.raft.heartbeatIntervalMs (%v)" (int64 $raft.electionTimeoutMinMs) (int64 $raft.heartbeatIntervalMs)) }}
{{- end }}
{{- if le (int64 $raft.electionTimeoutMaxMs) (int64 $raft.electionTimeoutMinMs) }}
{{- fail (printf "registry.raft.electionTimeoutMaxMs (%v) must be greater than registry.raft.electionTimeoutMinMs (%v)" (int64 $raft.electionTimeoutMaxMs) (int64 $raft.electionTimeoutMinMs)) }}
{{- end }}
{{- if and .Values.workers.autoscaling.enabled (gt (int .Values.workers.autoscaling.minReplicas) (int .Values.workers.autoscaling.maxReplicas)) }}
{{- fail "workers.autoscaling.minReplicas must not exceed workers.autoscaling.maxReplicas" }}
{{- end }}
{{- end }}

{{/* ------------------------------------------------------------------ config */}}

{{/* Stable DNS name of voter <ordinal>. Usage: include "lineage.voterHost" (list $ ordinal) */}}
{{- define "lineage.voterHost" -}}
{{- $ := index . 0 }}
{{- $ordinal := index . 1 }}
{{- printf "%s-%d.%s.%s.svc.%s" (include "lineage.voterName" $) (int $ordinal) (include "lineage.voterHeadlessName" $) $.Release.Namespace $.Values.clusterDomain }}
{{- end }}

{{/*
lineage.toml. Strings go through toJson: a JSON string is a valid TOML basic string.
Per-pod settings (node.id, registry.raft_id, registry.bootstrap) come from the environment.
*/}}
{{- define "lineage.config" -}}
# lineage.toml rendered by Helm chart {{ include "lineage.chart" . }} (release {{ .Release.Name }}).
# Per-pod settings come from LINEAGE_* environment variables (figment: `__` nests):
#   LINEAGE_NODE__ID             = pod name                         (every pod)
#   LINEAGE_REGISTRY__RAFT_ID    = StatefulSet ordinal + 1          (voters only)
#   LINEAGE_REGISTRY__BOOTSTRAP  = true                             (voter ordinal 0 only)
# A node without registry.raft_id is not a voter: it uses the registry through the voters over NATS.
{{- with .Values.extraConfig }}

# extraConfig (verbatim; first, so bare keys stay top-level)
{{ . | trim }}
{{- end }}

[cluster]
name = {{ .Values.cluster.name | toJson }}

[nats]
url = {{ .Values.nats.url | toJson }}

[delegation]
{{- if kindIs "invalid" .Values.delegation.maxDepth }}
# max_depth unset: no depth cap
{{- else }}
max_depth = {{ int64 .Values.delegation.maxDepth }}
{{- end }}

[lease]
heartbeat_interval_ms = {{ int64 .Values.lease.heartbeatIntervalMs }}
ttl_ms = {{ int64 .Values.lease.ttlMs }}

[node]
data_dir = "/var/lib/lineage"

[http]
listen = {{ printf "0.0.0.0:%d" (int .Values.http.port) | toJson }}

[log]
level = {{ .Values.log.level | toJson }}
format = {{ .Values.log.format | toJson }}

[registry]
# Only voter ordinal 0 overrides this (LINEAGE_REGISTRY__BOOTSTRAP=true); it initializes the
# membership below only when its data dir holds no Raft state, so restarts never re-initialize.
bootstrap = false

[registry.raft]
heartbeat_interval_ms = {{ int64 .Values.registry.raft.heartbeatIntervalMs }}
election_timeout_min_ms = {{ int64 .Values.registry.raft.electionTimeoutMinMs }}
election_timeout_max_ms = {{ int64 .Values.registry.raft.electionTimeoutMaxMs }}
{{- range $ordinal := until (int .Values.voters) }}

[[registry.voters]]
raft_id = {{ add1 $ordinal }}
node = {{ printf "%s-%d" (include "lineage.voterName" $) $ordinal | toJson }}
host = {{ include "lineage.voterHost" (list $ $ordinal) | toJson }}
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
