{{- define "anvil.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "anvil.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "anvil.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "anvil.secretName" -}}
{{- .Values.secret.existingSecret | default (include "anvil.fullname" .) -}}
{{- end -}}

{{/* A group's resource name: the default group "" is plain "conductor". */}}
{{- define "anvil.groupName" -}}
{{- $root := index . 0 -}}{{- $group := index . 1 -}}
{{- if $group.name -}}
{{- printf "%s-%s" (include "anvil.fullname" $root) ($group.name | lower | replace "_" "-" | replace "." "-") | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-conductor" (include "anvil.fullname" $root) -}}
{{- end -}}
{{- end -}}

{{/* The shared state volume's claim: the operator's, else the chart's. */}}
{{- define "anvil.stateClaim" -}}
{{- .Values.sharedStorage.existingClaim | default (printf "%s-state" (include "anvil.fullname" .)) -}}
{{- end -}}
