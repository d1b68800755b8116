{{- define "podinfo.labels" -}}
app.kubernetes.io/name: podinfo
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
{{- define "podinfo.selector" -}}
app.kubernetes.io/name: podinfo
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
