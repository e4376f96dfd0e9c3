{{/* Names, labels and the operator's arguments, shared by every template. */}}

{{- define "gpuserve.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name; cluster-scoped objects carry it so two releases never collide. */}}
{{- define "gpuserve.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpuserve.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuserve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "gpuserve.labels" -}}
{{ include "gpuserve.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: gpuserve
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpuserve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpuserve.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* "true" when more than one replica runs: kopf peering, StatefulSet, peering objects. */}}
{{- define "gpuserve.ha" -}}
{{- if gt (int .Values.replicaCount) 1 -}}true{{- end -}}
{{- end -}}

{{- define "gpuserve.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* k=v,k2=v2 for GPUSERVE_EXTRA_POD_LABELS, sorted so the pod template is stable. */}}
{{- define "gpuserve.podLabelsEnv" -}}
{{- $pairs := list -}}
{{- range $k, $v := .Values.podLabels -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/*
The container's command line. Standalone: the project's `gpuserve-operator`. HA: `kopf run`
on the same handlers, because only kopf's CLI takes --priority, and each replica needs its
own priority (its StatefulSet ordinal, through $(POD_INDEX)) or peers of equal priority
pause each other.
*/}}
{{- define "gpuserve.command" -}}
{{- if include "gpuserve.ha" . }}
- kopf
- run
- --module=controllers.handlers
- --peering={{ .Values.peering.name }}
- --priority=$(POD_INDEX)
{{- if not .Values.watchNamespaces }}
- --all-namespaces
{{- end }}
{{- else }}
- gpuserve-operator
{{- end }}
- --liveness=http://0.0.0.0:{{ .Values.healthPort }}/healthz
{{- range .Values.watchNamespaces }}
- --namespace={{ . }}
{{- end }}
{{- if .Values.verbose }}
- --verbose
{{- end }}
{{- end -}}

{{/* " unless on (namespace, service) (...)": the default objective skips services with their own. */}}
{{- define "gpuserve.sloDefaultExclusion" -}}
{{- $sel := list -}}
{{- range .Values.monitoring.prometheusRule.services -}}
{{- $sel = append $sel (printf "gpuserve:p95_latency_seconds{namespace=%q,service=%q}" .namespace .service) -}}
{{- end -}}
{{- if $sel -}}
{{- printf " unless on (namespace, service) (%s)" (join " or " $sel) -}}
{{- end -}}
{{- end -}}

{{/* How often Prometheus scrapes Triton: the PodMonitor's interval and what the operator is told (one value for both). */}}
{{- define "gpuserve.scrapeInterval" -}}
{{- .Values.monitoring.podMonitor.interval | default .Values.prometheus.scrapeInterval -}}
{{- end -}}
