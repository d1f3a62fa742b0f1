{{/*
Labels of every object: the name label config/ puts on everything, and Helm's own.
*/}}
{{- define "kubesync.labels" -}}
app.kubernetes.io/name: kubesync
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
The labels that select the operator's pods (Deployment selector, metrics Service).
*/}}
{{- define "kubesync.selectorLabels" -}}
app.kubernetes.io/name: kubesync
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The verbs the engine uses on the kinds it syncs (config/rbac/sync_role.yaml): never `*`.
*/}}
{{- define "kubesync.syncVerbs" -}}
[get, list, watch, create, update, patch, delete]
{{- end }}

{{/*
The kinds the operator may sync, as a JSON list of {kind, group, resource}: allowedResources,
or restricted.enabled's preset (ConfigMaps and Secrets, as config/restricted), or [] for every
kind. Fails on entries it cannot turn into both a flag and an RBAC rule.
*/}}
{{- define "kubesync.allowedResources" -}}
{{- $given := .Values.allowedResources | default (list) -}}
{{- if not (kindIs "slice" $given) -}}
{{- fail (printf "allowedResources must be a list of {kind, group, resource}, not %s" (kindOf $given)) -}}
{{- end -}}
{{- $list := list -}}
{{- if .Values.restricted.enabled -}}
{{- if $given -}}
{{- fail "restricted.enabled is the preset allowedResources [ConfigMap, Secret]: set one of restricted.enabled and allowedResources, not both" -}}
{{- end -}}
{{- $list = list (dict "kind" "ConfigMap" "group" "" "resource" "configmaps") (dict "kind" "Secret" "group" "" "resource" "secrets") -}}
{{- end -}}
{{- range $given -}}
{{- if not (kindIs "map" .) -}}
{{- fail (printf "allowedResources: %v is not a map {kind: Kind, group: group, resource: plural}" .) -}}
{{- end -}}
{{- $kind := .kind | default "" | toString -}}
{{- $group := .group | default "" | toString -}}
{{- $resource := .resource | default "" | toString -}}
{{- if not (regexMatch "^[A-Z][A-Za-z0-9]*$" $kind) -}}
{{- fail (printf "allowedResources: %v needs kind, a Kind such as ConfigMap or CronJob" .) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9][a-z0-9-]*$" $resource) -}}
{{- fail (printf "allowedResources: %v needs resource, the plural the RBAC rule names (e.g. cronjobs)" .) -}}
{{- end -}}
{{- if and $group (not (regexMatch "^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$" $group)) -}}
{{- fail (printf "allowedResources: %v has an invalid group (empty for the core group, else e.g. batch)" .) -}}
{{- end -}}
{{- $list = append $list (dict "kind" $kind "group" $group "resource" $resource) -}}
{{- end -}}
{{- toJson $list -}}
{{- end }}

{{/*
The port of telemetryAddress (host:port), which the container port `probes` and the probes
use.
*/}}
{{- define "kubesync.telemetryPort" -}}
{{- $address := .Values.telemetryAddress | toString -}}
{{- if not (regexMatch "^.+:[0-9]+$" $address) -}}
{{- fail (printf "telemetryAddress %q is not host:port (the probes need it, so `none` is not supported by this chart)" $address) -}}
{{- end -}}
{{- regexFind "[0-9]+$" $address -}}
{{- end }}

{{/*
The port of metrics.address (host:port), which the container port `metrics` and the metrics
Service use.
*/}}
{{- define "kubesync.metricsPort" -}}
{{- $address := .Values.metrics.address | toString -}}
{{- if not (regexMatch "^.+:[0-9]+$" $address) -}}
{{- fail (printf "metrics.address %q is not host:port (`none` is not supported by this chart)" $address) -}}
{{- end -}}
{{- regexFind "[0-9]+$" $address -}}
{{- end }}

{{/*
Checks of values that would give a broken install.
*/}}
{{- define "kubesync.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElect) (not .Values.sharded.enabled) -}}
{{- fail (printf "replicas: %v needs leaderElect: true or sharded.enabled: true (without either every replica would work on everything at once)" .Values.replicas) -}}
{{- end -}}
{{- if not (has (toString .Values.logFormat) (list "json" "text")) -}}
{{- fail (printf "logFormat %q is neither json nor text" (toString .Values.logFormat)) -}}
{{- end -}}
{{- if eq (include "kubesync.telemetryPort" .) (include "kubesync.metricsPort" .) -}}
{{- fail (printf "metrics.address %q and telemetryAddress %q share a port: the pod's ports need one each" (toString .Values.metrics.address) (toString .Values.telemetryAddress)) -}}
{{- end -}}
{{- if and .Values.metrics.insecure .Values.metrics.certSecret -}}
{{- fail "metrics.certSecret is for HTTPS; metrics.insecure serves plain HTTP: set one of them" -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.service.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled: the ServiceMonitor scrapes the Service kubesync-metrics" -}}
{{- end -}}
{{- if .Values.podDisruptionBudget.enabled -}}
{{- $max := .Values.podDisruptionBudget.maxUnavailable | toString -}}
{{- if not (regexMatch "^([1-9][0-9]*|[1-9][0-9]?%|100%)$" $max) -}}
{{- fail (printf "podDisruptionBudget.maxUnavailable %q: give a number of Pods (1 or more) or a percentage (1%%-100%%); 0 would refuse every eviction, so no node drain would ever finish" $max) -}}
{{- end -}}
{{- end -}}
{{- $memory := dig "limits" "memory" "" (.Values.resources | default dict) | toString -}}
{{- if $memory -}}
{{- $bytes := include "kubesync.bytes" $memory -}}
{{- if not $bytes -}}
{{- fail (printf "resources.limits.memory %q is not a quantity such as 512Mi or 1Gi" $memory) -}}
{{- end -}}
{{- if lt (float64 $bytes) 33554432.0 -}}
{{- fail (printf "resources.limits.memory %s is under 32Mi: on a real node kubesync's Pod measured 5.6 MiB idle and 20.6 MiB while making 10 000 copies, so under 32Mi the kernel would kill it (OOMKilled) as its work grows; give 32Mi or more (the chart's default is 512Mi)" $memory) -}}
{{- end -}}
{{- end -}}
{{- range .Values.extraEnv -}}
{{- $name := .name | default "" | toString -}}
{{- if not $name -}}
{{- fail "extraEnv: every entry needs a name (a container's env entry: name and value or valueFrom)" -}}
{{- end -}}
{{- if or (has $name (list "POD_NAMESPACE" "POD_NAME" "POD_IP")) (hasPrefix "KUBESYNC_" $name) -}}
{{- fail (printf "extraEnv: %s is set by the chart (POD_NAMESPACE, POD_NAME, POD_IP and KUBESYNC_* follow its values: telemetryAddress, metrics.*, logFormat)" $name) -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
The Deployment's update strategy: .Values.strategy when given; with hostNetwork, one Pod
replaced at a time and none added (a new Pod needs a node whose ports are free, and the old
Pods hold them); else Kubernetes' default (one Pod added, then an old one removed).
*/}}
{{- define "kubesync.strategy" -}}
{{- if .Values.strategy -}}
{{- toYaml .Values.strategy -}}
{{- else if .Values.hostNetwork -}}
type: RollingUpdate
rollingUpdate: {maxSurge: 0, maxUnavailable: 1}
{{- end -}}
{{- end }}

{{/*
A list of strings as CEL string literals separated by commas (single-quoted, each backslash
and quote escaped).
*/}}
{{- define "kubesync.celStrings" -}}
{{- $out := list -}}
{{- range . -}}
{{- $out = append $out (printf "'%s'" (. | replace "\\" "\\\\" | replace "'" "\\'")) -}}
{{- end -}}
{{- join ", " $out -}}
{{- end }}

{{/*
The bytes a Kubernetes memory quantity (512Mi, 1Gi, 1.5G, 64000k, 67108864) stands for, as a
number; empty when it is not such a quantity.
*/}}
{{- define "kubesync.bytes" -}}
{{- $q := toString . -}}
{{- if regexMatch "^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)?$" $q -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $unit := trimPrefix $number $q -}}
{{- $factors := dict "" 1.0 "k" 1e3 "K" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 -}}
{{- mulf (float64 $number) (get $factors $unit) -}}
{{- end -}}
{{- end }}
