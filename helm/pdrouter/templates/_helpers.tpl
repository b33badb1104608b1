{{/* Names and labels. */}}
{{- define "pdrouter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pdrouter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "pdrouter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pdrouter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pdrouter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "pdrouter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* shutdown_grace_ms as an integer (0 is a valid value, so no `default`). */}}
{{- define "pdrouter.shutdownGraceMs" -}}
{{- if hasKey .Values.router "shutdown_grace_ms" -}}
{{- int64 .Values.router.shutdown_grace_ms -}}
{{- else -}}
10000
{{- end -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds: above preStop's sleep plus pdrouter's drain, or the kubelet kills
the router while requests still finish.
*/}}
{{- define "pdrouter.terminationGracePeriodSeconds" -}}
{{- $graceS := div (add (include "pdrouter.shutdownGraceMs" . | int64) 999) 1000 -}}
{{- $needed := add (int64 .Values.preStopSleepSeconds) $graceS -}}
{{- if eq (toString .Values.terminationGracePeriodSeconds) "" -}}
{{- add $needed (int64 .Values.terminationGraceMarginSeconds) -}}
{{- else if le (int64 .Values.terminationGracePeriodSeconds) $needed -}}
{{- fail (printf "terminationGracePeriodSeconds %d must be above preStopSleepSeconds + router.shutdown_grace_ms (%d s), or the router is killed while it drains" (int64 .Values.terminationGracePeriodSeconds) $needed) -}}
{{- else -}}
{{- int64 .Values.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{/*
lmcache mode: the replicas' PULL sockets, NAME:PORT of the headless Service over every router pod
(--peer-routers-dns). Each pod's replica id is its IP (--replica-id $(POD_IP)), which is what
that name resolves to.
*/}}
{{- define "pdrouter.kvReadyPeers" -}}
{{- printf "%s-kv-ready.%s.svc.%s:%d" (include "pdrouter.fullname" .) .Release.Namespace .Values.clusterDomain (int64 .Values.lmcache.kvReadyPort) -}}
{{- end -}}

{{/* The checks that stop a render with a clear message. */}}
{{- define "pdrouter.validate" -}}
{{- if not (has .Values.kvMode (list "pull" "lmcache")) -}}
{{- fail (printf "kvMode %q: expected pull or lmcache (push mode is a placeholder until pdrouter has it)" (toString .Values.kvMode)) -}}
{{- end -}}
{{- range $key := list "admin_api_key" "upstream_api_key" -}}
{{- if hasKey $.Values.router $key -}}
{{- fail (printf "router.%s: keys are not written into the ConfigMap; name a Secret in secrets.adminApiKey / secrets.upstreamApiKey" $key) -}}
{{- end -}}
{{- end -}}
{{- range $key := list "port" "prefill" "decode" "kv_mode" "kv_ready_bind" "config" "demo" "port_file" "prefill_dns" "decode_dns" "dns_refresh_ms" "dns_hosts_file" "replica_id" "peer_routers" "peer_routers_dns" -}}
{{- if hasKey $.Values.router $key -}}
{{- fail (printf "router.%s is set by the chart: use containerPort, prefill, decode, prefillDns, decodeDns, dnsRefreshMs, kvMode or lmcache.kvReadyPort (replica ids and peers come from the pods and the kv-ready headless Service)" $key) -}}
{{- end -}}
{{- end -}}
{{- range $key, $_ := $.Values.router -}}
{{- if or (hasPrefix "lmcache_" $key) (hasPrefix "kv_ready_" $key) (eq $key "on_kv_ready_timeout") -}}
{{- fail (printf "router.%s: lmcache keys go under lmcache:" $key) -}}
{{- end -}}
{{- end -}}
{{- range $e := .Values.extraEnv -}}
{{- if and (has $e.name (list "ADMIN_API_KEY" "OPENAI_API_KEY")) (hasKey $e "value") -}}
{{- fail (printf "extraEnv %s: take keys from a Secret (secrets.adminApiKey / secrets.upstreamApiKey), never an inline value" $e.name) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.podDisruptionBudget.enabled (ne (toString .Values.podDisruptionBudget.maxUnavailable) "") (ne (toString .Values.podDisruptionBudget.minAvailable) "") -}}
{{- fail "podDisruptionBudget: set maxUnavailable or minAvailable, not both" -}}
{{- end -}}
{{- end -}}

{{/*
router.yaml: pdrouter's config file. Keys are pdrouter's (docs/configuration.md); the render test
runs `pdrouter --config router.yaml --check-config` on it.
*/}}
{{- define "pdrouter.routerConfig" -}}
{{- include "pdrouter.validate" . -}}
{{- $cfg := dict "port" (int64 .Values.containerPort) "prefill" .Values.prefill "decode" .Values.decode "kv_mode" .Values.kvMode -}}
{{- range $key, $value := .Values.router -}}
{{- if ne (toString $value) "" -}}
{{- $_ := set $cfg $key $value -}}
{{- end -}}
{{- end -}}
{{- if .Values.prefillDns -}}
{{- $_ := set $cfg "prefill_dns" .Values.prefillDns -}}
{{- end -}}
{{- if .Values.decodeDns -}}
{{- $_ := set $cfg "decode_dns" .Values.decodeDns -}}
{{- end -}}
{{- if or .Values.prefillDns .Values.decodeDns (eq .Values.kvMode "lmcache") -}}
{{- $_ := set $cfg "dns_refresh_ms" (int64 .Values.dnsRefreshMs) -}}
{{- end -}}
{{- if eq .Values.kvMode "lmcache" -}}
{{- $_ := set $cfg "kv_ready_bind" (printf "tcp://0.0.0.0:%d" (int64 .Values.lmcache.kvReadyPort)) -}}
{{- $_ := set $cfg "peer_routers_dns" (include "pdrouter.kvReadyPeers" .) -}}
{{- range $key, $value := .Values.lmcache -}}
{{- if and (ne $key "kvReadyPort") (ne (toString $value) "") (ne (toString $value) "[]") -}}
{{- $_ := set $cfg $key $value -}}
{{- end -}}
{{- end -}}
{{- end -}}
# pdrouter configuration, rendered by the pdrouter Helm chart (keys: docs/configuration.md).
{{ toYaml $cfg }}
{{- end -}}

{{/* The container's environment: keys only by secretKeyRef. */}}
{{- define "pdrouter.env" -}}
{{- with .Values.secrets.adminApiKey }}
{{- if .name }}
- name: ADMIN_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ required "secrets.adminApiKey.key: the key in the Secret" .key }}
{{- end }}
{{- end }}
{{- with .Values.secrets.upstreamApiKey }}
{{- if .name }}
- name: OPENAI_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ required "secrets.upstreamApiKey.key: the key in the Secret" .key }}
{{- end }}
{{- end }}
{{- if eq .Values.kvMode "lmcache" }}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}
