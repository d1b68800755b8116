{{- define "podinfo.labels" -}}
app.kubernetes.io/name: podinfo
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
{{- define "podinfo.selector" -}}
app.kubernetes.io/name: podinfo
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- /* As upstream podinfo: the release's name when it holds the chart's. */ -}}
{{- define "podinfo.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}{{ .Release.Name }}{{ else }}{{ printf "%s-%s" .Release.Name .Chart.Name }}{{ end }}
{{- end }}
