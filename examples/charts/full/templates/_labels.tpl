{{- define "full.labels" -}}
app.kubernetes.io/name: full
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
