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
