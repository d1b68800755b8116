{{/* The name of every object of the release (one operator per cluster). */}}
{{- define "hossted-operator.name" -}}hossted-operator{{- end }}

{{- define "hossted-operator.labels" -}}
app.kubernetes.io/name: hossted-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "hossted-operator.selector" -}}
app.kubernetes.io/name: hossted-operator
{{- end }}

{{/* Whether delivery runs. */}}
{{- define "hossted-operator.delivery" -}}
{{- if has "delivery" .Values.controllers }}true{{ end }}
{{- end }}

{{/* Whether the inventory runs. */}}
{{- define "hossted-operator.inventory" -}}
{{- if has "inventory" .Values.controllers }}true{{ end }}
{{- end }}

{{/* The operator's ServiceAccount as a user name. */}}
{{- define "hossted-operator.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:hossted-operator
{{- end }}

{{/* The Deployment of a shard ("": the unsharded one). */}}
{{- define "hossted-operator.deployment" -}}
hossted-operator{{ with . }}-shard-{{ . }}{{ end }}
{{- end }}

{{/* The pod labels a shard's Deployment selects ("": the unsharded one,
whose selector predates shards and cannot change). No two overlap. */}}
{{- define "hossted-operator.podSelector" -}}
{{- if . -}}
app.kubernetes.io/name: hossted-operator-shard
hossted.com/shard: {{ . }}
{{- else -}}
app.kubernetes.io/name: hossted-operator
{{- end }}
{{- end }}

{{/* Every operator pod, sharded or not (network policies); without
shards, as the manifests write it. */}}
{{- define "hossted-operator.allPods" -}}
{{- if .Values.shards -}}
matchExpressions:
  - key: app.kubernetes.io/name
    operator: In
    values: [hossted-operator, hossted-operator-shard]
{{- else -}}
matchLabels:
  {{- include "hossted-operator.selector" . | nindent 2 }}
{{- end }}
{{- end }}
