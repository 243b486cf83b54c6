{{/* The server's objects are named after the release: gpumeter for the release "gpumeter". */}}
{{- define "gpumeter.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpumeter.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* On every object; the selectors below add name, instance and component. */}}
{{- define "gpumeter.labels" -}}
app.kubernetes.io/part-of: gpumeter
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The server's pods: what its Services, PDB, NetworkPolicy and spread select. */}}
{{- define "gpumeter.serverSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "gpumeter.collectorSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-collector
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: collector
{{- end -}}

{{- define "gpumeter.dsnEnv" -}}
- name: GPUMETER_CLICKHOUSE
  valueFrom:
    secretKeyRef:
      name: {{ required "clickhouse.secretName is required" .Values.clickhouse.secretName }}
      key: {{ required "clickhouse.secretKey is required" .Values.clickhouse.secretKey }}
{{- end -}}

{{- define "gpumeter.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "gpumeter.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The election identity: where the other replicas reach a server pod's
     API port (the Lease's holderIdentity). Only serve requires it. */}}
{{- define "gpumeter.electionEnv" -}}
{{- if .Values.server.election.enabled -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: GPUMETER_ELECTION_IDENTITY
  value: $(POD_IP):{{ .Values.server.port }}
{{- end -}}
{{- end -}}
