{{/* Names come from the release, as Helm's convention has it: fullnameOverride if set,
else the release name where it contains "gpuscope" (release gpuscope: gpuscope-agent...),
else <release>-gpuscope. Two releases (staging beside production) never share a name, the
cluster-scoped ones included. The scrape jobs take the same names, and the PrometheusRule's
job selectors follow them (gpuscope.rulesText). */}}
{{- define "gpuscope.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The alerting rules' text with their job selectors naming this release's jobs: the
rules file says job="gpuscope-agent" and job="gpuscope-collector". */}}
{{- define "gpuscope.rulesText" -}}
{{- .Files.Get "files/rules/gpuscope-rules.yaml"
    | replace "job=\"gpuscope-agent\"" (printf "job=\"%s\"" (include "gpuscope.agentName" .))
    | replace "job=\"gpuscope-collector\"" (printf "job=\"%s\"" (include "gpuscope.collectorName" .)) -}}
{{- end -}}

{{- define "gpuscope.agentName" -}}
{{- printf "%s-agent" (include "gpuscope.fullname" .) -}}
{{- end -}}

{{- define "gpuscope.collectorName" -}}
{{- printf "%s-collector" (include "gpuscope.fullname" .) -}}
{{- end -}}

{{/* The Secret holding the API token: the site's, or the one the chart generates. */}}
{{- define "gpuscope.secretName" -}}
{{- .Values.apiToken.existingSecret | default (include "gpuscope.collectorName" .) -}}
{{- end -}}

{{- define "gpuscope.selectorLabels" -}}
app.kubernetes.io/name: gpuscope
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpuscope.labels" -}}
{{ include "gpuscope.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Labels for the Prometheus Operator objects: the release label its selectors match. */}}
{{- define "gpuscope.monitoringLabels" -}}
{{- $labels := deepCopy (.Values.monitoring.labels | default dict) -}}
{{- with .Values.monitoring.release }}{{ $_ := set $labels "release" . }}{{ end -}}
{{- if $labels }}{{ toYaml $labels }}{{ end -}}
{{- end -}}

{{- define "gpuscope.image" -}}
{{- $root := index . 0 -}}
{{- $repository := index . 1 -}}
{{- $tag := $root.Values.image.tag | default $root.Chart.AppVersion -}}
{{- with $root.Values.image.registry -}}
{{- printf "%s/%s:%s" (trimSuffix "/" .) $repository $tag -}}
{{- else -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}
{{- end -}}

{{/* The dcgm-exporter page the agent reads: the site's URL, or the node-local Service. */}}
{{- define "gpuscope.dcgmExporterUrl" -}}
{{- $e := .Values.dcgm.exporter -}}
{{- if $e.url -}}
{{- $e.url -}}
{{- else -}}
{{- printf "http://%s-dcgm-exporter-local.%s.svc:%d%s" (include "gpuscope.fullname" .) $e.namespace (int $e.port) $e.path -}}
{{- end -}}
{{- end -}}

{{/* The token Secret's data: the live Secret's (found by lookup on upgrade), so neither the
token nor keys a site added change; a new random token where there is none. Arguments:
"live", the Secret lookup returned (empty at install and in `helm template`), "key". */}}
{{- define "gpuscope.tokenSecretData" -}}
{{- $data := deepCopy ((index .live "data") | default dict) -}}
{{- if not (index $data .key) -}}
{{- $_ := set $data .key (randAlphaNum 48 | b64enc) -}}
{{- end -}}
{{- toYaml $data -}}
{{- end -}}

{{/*
The ServiceMonitors' target relabelings, after the Operator's own: the scraped pod's
namespace and pod move to <prefix>_namespace and <prefix>_pod (agent_namespace, agent_pod),
and namespace, pod and container leave the target, so they never land on a series that has
none of its own (a free GPU, an InfiniBand port, the DCGM-compatible recorded series). Then
the site's extra relabelings. Call with a dict of root and prefix.
*/}}
{{- define "gpuscope.targetRelabelings" -}}
- sourceLabels: [namespace]
  targetLabel: {{ .prefix }}_namespace
- sourceLabels: [pod]
  targetLabel: {{ .prefix }}_pod
- action: labeldrop
  regex: (namespace|pod|container)
{{- with .root.Values.monitoring.serviceMonitors.relabelings }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
An endpoint's optional fields: metric relabelings, scheme and TLS (values
monitoring.serviceMonitors.metricRelabelings, .scheme, .tlsConfig).
*/}}
{{- define "gpuscope.endpointExtras" -}}
{{- $sm := .Values.monitoring.serviceMonitors -}}
{{- with $sm.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $sm.scheme }}
scheme: {{ . }}
{{- end }}
{{- with $sm.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Whether this release renders the Namespace (namespace.create): when none exists yet
(and always in `helm template`, where lookup finds nothing), or when this release made it.
A namespace another release made (a second release with namespace.create in the same
namespace) or that someone made by hand is left alone: Helm would refuse to adopt it. Takes
(dict "live" <lookup result> "release" <release name>); "true" or "". */}}
{{- define "gpuscope.createsNamespace" -}}
{{- $meta := (.live | default dict).metadata | default dict -}}
{{- $owner := index ($meta.annotations | default dict) "meta.helm.sh/release-name" | default "" -}}
{{- if or (not .live) (eq $owner .release) -}}true{{- end -}}
{{- end -}}

{{/* A dashboard's UID for this release: the file's own for the release named gpuscope (as
the docs and links give them), else the release's fullname before the dashboard's short
name (a hash of the fullname where it is long), at most 40 characters, Grafana's limit. */}}
{{- define "gpuscope.dashboardUid" -}}
{{- $full := include "gpuscope.fullname" .root -}}
{{- $short := .uid | trimPrefix "gpuscope-" -}}
{{- if eq $full "gpuscope" -}}
{{- .uid -}}
{{- else if le (len (printf "%s-%s" $full $short)) 40 -}}
{{- printf "%s-%s" $full $short -}}
{{- else -}}
{{- printf "%s-%s-%s" ($full | trunc 17 | trimSuffix "-") (sha256sum $full | trunc 8) $short | trunc 40 -}}
{{- end -}}
{{- end -}}

{{/* A dashboard file's text for this release: its UID, the links to the chart's other
dashboards and its title ("gpuscope (staging) / Nodes") made the release's own, so two
releases' dashboards neither overwrite nor shadow each other in Grafana. */}}
{{- define "gpuscope.dashboardText" -}}
{{- $root := .root -}}
{{- $text := $root.Files.Get .path -}}
{{- if ne (include "gpuscope.fullname" $root) "gpuscope" -}}
{{- range $other, $_ := $root.Files.Glob "files/dashboards/*.json" -}}
{{- $uid := base $other | trimSuffix ".json" -}}
{{- $new := include "gpuscope.dashboardUid" (dict "root" $root "uid" $uid) -}}
{{- $text = $text | replace (printf "\"uid\": \"%s\"" $uid) (printf "\"uid\": \"%s\"" $new) | replace (printf "/d/%s/" $uid) (printf "/d/%s/" $new) -}}
{{- end -}}
{{- $text = $text | replace "\"title\": \"gpuscope / " (printf "\"title\": \"gpuscope (%s) / " $root.Release.Name) -}}
{{- end -}}
{{- $text -}}
{{- end -}}
