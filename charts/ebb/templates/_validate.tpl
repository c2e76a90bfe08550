{{/*
Bounds the schema cannot state: durations, and values that bound each other.
Each equals the bound the binary's own option parser enforces (a test feeds
each bound and one past it to both), so a value the chart accepts never
crash-loops a pod. Rendered from templates/validate.yaml.
*/}}

{{/* Nanoseconds in a Go duration string ("1m30s"), as a float. */}}
{{- define "ebb.durationNanos" -}}
{{- $units := dict "ns" 1.0 "us" 1000.0 "µs" 1000.0 "ms" 1000000.0 "s" 1000000000.0 "m" 60000000000.0 "h" 3600000000000.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" (toString .) -1 -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . | float64 -}}
{{- $unit := regexReplaceAll "^[0-9]+(\\.[0-9]+)?" . "" -}}
{{- $total = addf $total (mulf $number (get $units $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* Fails unless the duration at key is within [min, max]: (list value "key" "min" "max" "why"). */}}
{{- define "ebb.durationWithin" -}}
{{- $value := index . 0 -}}
{{- $key := index . 1 -}}
{{- $n := include "ebb.durationNanos" $value | float64 -}}
{{- $min := include "ebb.durationNanos" (index . 2) | float64 -}}
{{- $max := include "ebb.durationNanos" (index . 3) | float64 -}}
{{- if or (lt $n $min) (gt $n $max) -}}
{{- fail (printf "%s %s: must be from %s to %s (%s)" $key (toString $value) (index . 2) (index . 3) (index . 4)) -}}
{{- end -}}
{{- end -}}

{{/* A PodDisruptionBudget's minAvailable must leave one pod to evict: (list values "component"). */}}
{{- define "ebb.pdbWithin" -}}
{{- $c := index . 0 -}}
{{- $key := index . 1 -}}
{{- if and $c.podDisruptionBudget.enabled (gt (int $c.replicas) 1) -}}
{{- $min := $c.podDisruptionBudget.minAvailable -}}
{{- if kindIs "string" $min -}}
{{- if ge (trimSuffix "%" $min | int) 100 -}}
{{- fail (printf "%s.podDisruptionBudget.minAvailable %s: must be below 100%% or no %s pod could ever be evicted (node drains would hang)" $key $min $key) -}}
{{- end -}}
{{- else if ge (int $min) (int $c.replicas) -}}
{{- fail (printf "%s.podDisruptionBudget.minAvailable %d: must be below %s.replicas (%d) or no %s pod could ever be evicted (node drains would hang)" $key (int $min) $key (int $c.replicas) $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Seconds, rounded up, in a Go duration string, as an int. */}}
{{- define "ebb.durationSeconds" -}}
{{- divf (include "ebb.durationNanos" . | float64) 1000000000.0 | ceil | int -}}
{{- end -}}

{{/*
Values that were renamed: setting one fails, naming its new name, before
anything else is checked. Each entry: (list <values holding it> <key of
those values> <old name> <new name> <what the new value is>).
*/}}
{{- define "ebb.renamed" -}}
{{- $v := .Values -}}
{{- $renamed := list
  (list $v.activator "activator" "drainTimeoutSeconds" "drainTimeout" "a Go duration, e.g. 30s")
  (list $v.webhook "webhook" "timeoutSeconds" "timeout" "a Go duration of whole seconds, e.g. 5s")
  (list $v.federation "federation" "healthPort" "adminPort" "a port number, e.g. 8081") -}}
{{- range $p := $v.activator.pools -}}
{{- $renamed = append $renamed (list $p (printf "activator.pools[%v]" $p.name) "drainTimeoutSeconds" "drainTimeout" "a Go duration, e.g. 30s") -}}
{{- end -}}
{{- $problems := list -}}
{{- range $renamed -}}
{{- $values := index . 0 | default dict -}}
{{- $key := index . 1 -}}
{{- $old := index . 2 -}}
{{- $new := index . 3 -}}
{{- if hasKey $values $old -}}
{{- $problems = append $problems (printf "%s.%s was renamed %s.%s (%s)" $key $old $key $new (index . 4)) -}}
{{- end -}}
{{- end -}}
{{- with $problems -}}
{{- fail (join "; " .) -}}
{{- end -}}
{{- end -}}

{{- define "ebb.validate" -}}
{{- include "ebb.renamed" . -}}
{{- $v := .Values -}}
{{- include "ebb.durationWithin" (list $v.activator.coldStartTimeout "activator.coldStartTimeout" "1ms" "15m" "ebb-activator --cold-start-timeout") -}}
{{- include "ebb.durationWithin" (list $v.activator.drainTimeout "activator.drainTimeout" "0s" "1h" "ebb-activator --drain-timeout") -}}
{{- include "ebb.durationWithin" (list $v.sidecar.drainTimeout "sidecar.drainTimeout" "0s" "10m" "ebb-webhook --sidecar-drain-timeout") -}}
{{- include "ebb.durationWithin" (list $v.scaler.tick "scaler.tick" "10ms" "1m" "ebb-scaler --tick") -}}
{{- if $v.federation.enabled -}}
{{- include "ebb.durationWithin" (list $v.federation.interval "federation.interval" "100ms" "1m" "ebb-federation --interval") -}}
{{- end -}}
{{- if lt (int $v.activator.maxHeld) (int $v.activator.queueSize) -}}
{{- fail (printf "activator.maxHeld %d: must be at least activator.queueSize (%d)" (int $v.activator.maxHeld) (int $v.activator.queueSize)) -}}
{{- end -}}
{{- include "ebb.pdbWithin" (list $v.webhook "webhook") -}}
{{- include "ebb.pdbWithin" (list $v.activator "activator") -}}
{{- include "ebb.pdbWithin" (list $v.scaler "scaler") -}}
{{- $seen := dict -}}
{{- range $pool := include "ebb.activatorPools" . | fromJsonArray -}}
{{- if ne $pool.name "default" -}}
{{- $key := printf "activator.pools[%s]" $pool.name -}}
{{- if hasKey $seen $pool.name -}}
{{- fail (printf "activator.pools: %q listed twice" $pool.name) -}}
{{- end -}}
{{- $_ := set $seen $pool.name true -}}
{{- include "ebb.durationWithin" (list $pool.values.coldStartTimeout (printf "%s.coldStartTimeout" $key) "1ms" "15m" "ebb-activator --cold-start-timeout") -}}
{{- include "ebb.durationWithin" (list $pool.values.drainTimeout (printf "%s.drainTimeout" $key) "0s" "1h" "ebb-activator --drain-timeout") -}}
{{- if lt (int $pool.values.maxHeld) (int $pool.values.queueSize) -}}
{{- fail (printf "%s.maxHeld %d: must be at least its queueSize (%d)" $key (int $pool.values.maxHeld) (int $pool.values.queueSize)) -}}
{{- end -}}
{{- include "ebb.pdbWithin" (list $pool.values $key) -}}
{{- end -}}
{{- end -}}
{{- include "ebb.sameSuffix" . -}}
{{- end -}}

{{/*
An upgrade keeps groupSuffix: another suffix is another instance (another
CRD, other keys, another webhook), and switching would leave every AppRoute,
labelled namespace and ScaledObject of the old one behind. The installed
suffix is read from the live webhook's --api-group-suffix; a render without
a cluster reads nothing and checks nothing.
*/}}
{{- define "ebb.sameSuffix" -}}
{{- $live := lookup "apps/v1" "Deployment" .Release.Namespace (include "ebb.componentName" (list . "webhook")) -}}
{{- range (dig "spec" "template" "spec" "containers" list $live) -}}
{{- range (default list .args) -}}
{{- if hasPrefix "--api-group-suffix=" . -}}
{{- $installed := trimPrefix "--api-group-suffix=" . -}}
{{- if ne $installed (include "ebb.suffix" $) -}}
{{- fail (printf "groupSuffix %s: this release serves groupSuffix %s, and an upgrade cannot change it (its AppRoutes, namespace labels and ScaledObjects name %s). Keep groupSuffix=%s, or install a new release with the new suffix beside this one, move the apps, then uninstall this one" (include "ebb.suffix" $) $installed $installed $installed) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
