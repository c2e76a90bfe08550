{{/*
Names. Namespaced objects are named <fullname>-<component>; cluster-scoped
ones <fullname>-<component>.<groupSuffix>, so they carry both the release
and the instance.
*/}}

{{- define "ebb.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ebb.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ebb.suffix" -}}
{{- required "groupSuffix is required" .Values.groupSuffix -}}
{{- end -}}

{{/* The API group of the AppRoute CRD: routing.<suffix>. */}}
{{- define "ebb.group" -}}
routing.{{ include "ebb.suffix" . }}
{{- end -}}

{{/* Name of a component's namespaced objects: (list . "webhook"). */}}
{{- define "ebb.componentName" -}}
{{- printf "%s-%s" (include "ebb.fullname" (index . 0)) (index . 1) -}}
{{- end -}}

{{/* Name of a cluster-scoped object: (list . "webhook"). */}}
{{- define "ebb.clusterName" -}}
{{- printf "%s-%s.%s" (include "ebb.fullname" (index . 0)) (index . 1) (include "ebb.suffix" (index . 0)) -}}
{{- end -}}

{{/*
The MutatingWebhookConfiguration's name is fixed by ebb-webhook
(webhook.ConfigurationName): in self-signed mode it patches the caBundle of
sidecar-injector.<suffix>. It has no flag to name another one yet, so this
name carries the suffix but not the release.
*/}}
{{- define "ebb.webhookConfigurationName" -}}
sidecar-injector.{{ include "ebb.suffix" . }}
{{- end -}}

{{/* The ValidatingWebhookConfiguration's, fixed the same way
(webhook.ValidatingConfigurationName). */}}
{{- define "ebb.validatingConfigurationName" -}}
routepolicy-validator.{{ include "ebb.suffix" . }}
{{- end -}}

{{- define "ebb.webhookServiceName" -}}{{ include "ebb.componentName" (list . "webhook") }}{{- end -}}
{{- define "ebb.scalerServiceName" -}}{{ include "ebb.componentName" (list . "scaler") }}{{- end -}}
{{- define "ebb.certManagerSecretName" -}}{{ include "ebb.componentName" (list . "webhook-tls") }}{{- end -}}
{{- define "ebb.selfSignedSecretName" -}}{{ include "ebb.componentName" (list . "webhook-selfsigned") }}{{- end -}}

{{/* Lease names are fixed by the binaries: <component>.<suffix>. */}}
{{- define "ebb.webhookLeaseName" -}}ebb-webhook.{{ include "ebb.suffix" . }}{{- end -}}
{{- define "ebb.federationLeaseName" -}}ebb-federation.{{ include "ebb.suffix" . }}{{- end -}}
{{- define "ebb.activatorLeaseName" -}}activator.{{ include "ebb.suffix" . }}{{- end -}}

{{- define "ebb.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "ebb.labels" -}}
helm.sh/chart: {{ include "ebb.chart" . }}
app.kubernetes.io/part-of: ebb
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of a component: (list . "activator"). */}}
{{- define "ebb.selectorLabels" -}}
app.kubernetes.io/name: ebb-{{ index . 1 }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
{{- end -}}

{{/* Labels of a component's objects: (list . "activator"). */}}
{{- define "ebb.componentLabels" -}}
{{ include "ebb.labels" (index . 0) }}
app.kubernetes.io/name: ebb-{{ index . 1 }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Image of a component's values: (list . .Values.webhook.image). */}}
{{- define "ebb.image" -}}
{{- $img := index . 1 -}}
{{- printf "%s:%s" $img.repository (default (index . 0).Chart.AppVersion $img.tag) -}}
{{- end -}}

{{/* Common pod spec parts: (list . .Values.webhook "webhook"). */}}
{{- define "ebb.podScheduling" -}}
{{- $ := index . 0 -}}
{{- $c := index . 1 -}}
{{- $component := index . 2 -}}
{{- with $c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
{{- if $c.affinity }}
  {{- toYaml $c.affinity | nindent 2 }}
{{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "ebb.selectorLabels" (list $ $component) | nindent 14 }}
{{- end }}
securityContext:
  {{- toYaml $.Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* Pod metadata: (list . .Values.webhook "webhook"). */}}
{{- define "ebb.podMetadata" -}}
{{- $ := index . 0 -}}
{{- $c := index . 1 -}}
{{- $component := index . 2 -}}
labels:
  {{- include "ebb.componentLabels" (list $ $component) | nindent 2 }}
  {{- with $c.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $c.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A PodDisruptionBudget: (list . .Values.webhook "webhook"). Only with
more than one replica: with one, minAvailable 1 would block every drain. */}}
{{- define "ebb.pdb" -}}
{{- $ := index . 0 -}}
{{- $c := index . 1 -}}
{{- $component := index . 2 -}}
{{- if and $c.podDisruptionBudget.enabled (gt (int $c.replicas) 1) }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "ebb.componentName" (list $ $component) }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "ebb.componentLabels" (list $ $component) | nindent 4 }}
spec:
  minAvailable: {{ $c.podDisruptionBudget.minAvailable }}
  selector:
    matchLabels:
      {{- include "ebb.selectorLabels" (list $ $component) | nindent 6 }}
{{- end }}
{{- end -}}

{{/*
Activator pools: the default pool (activator.*) and each of
activator.pools, whose keys override activator.*'s. A JSON list of
{name, objectName, values}, for fromJsonArray.
*/}}
{{- define "ebb.activatorPools" -}}
{{- $base := omit .Values.activator "pools" "routeSelector" "namespaceSelector" -}}
{{- $out := list (dict "name" "default" "objectName" (include "ebb.componentName" (list . "activator")) "values" $base) -}}
{{- range $p := .Values.activator.pools -}}
{{- $v := mergeOverwrite (deepCopy $base) (omit $p "name" "routeSelector" "namespaceSelector") -}}
{{- $out = append $out (dict "name" $p.name "objectName" (include "ebb.componentName" (list $ (printf "activator-%s" $p.name))) "values" $v) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Selector labels of an activator pool's pods: (list . "default"). The
default pool's are the activator's own; the others carry the pool's name. */}}
{{- define "ebb.activatorPoolSelector" -}}
{{- $ := index . 0 -}}
{{- $pool := index . 1 -}}
{{- if eq $pool "default" -}}
{{ include "ebb.selectorLabels" (list $ "activator") }}
{{- else -}}
{{ include "ebb.selectorLabels" (list $ "activator-pool") }}
{{ include "ebb.suffix" $ }}/activator-pool: {{ $pool }}
{{- end -}}
{{- end -}}

{{/* Labels of an activator pool's objects and pods: (list . "default"). */}}
{{- define "ebb.activatorPoolLabels" -}}
{{- $ := index . 0 -}}
{{- $pool := index . 1 -}}
{{ include "ebb.labels" $ }}
app.kubernetes.io/name: {{ ternary "ebb-activator" "ebb-activator-pool" (eq $pool "default") }}
app.kubernetes.io/component: activator
{{ include "ebb.suffix" $ }}/activator-pool: {{ $pool }}
{{- end -}}

{{/* A map of labels as a selector string: k=v,k2=v2 (keys in order). */}}
{{- define "ebb.selectorString" -}}
{{- $parts := list -}}
{{- range $k, $v := . -}}
{{- $parts = append $parts (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}

{{/*
ebb.scaleTargetRules: RBAC rules reading each scaleTargets kind
(<resource>.<group>): get, list, watch.
*/}}
{{- define "ebb.scaleTargetRules" -}}
{{- range .Values.scaleTargets }}
{{- $parts := splitn "." 2 . }}
  - apiGroups: [{{ $parts._1 | quote }}]
    resources: [{{ $parts._0 | quote }}]
    verbs: ["get", "list", "watch"]
{{- end }}
{{- end }}
