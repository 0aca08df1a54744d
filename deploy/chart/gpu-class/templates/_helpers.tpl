{{/* The names are fixed, as in deploy/: one gpu-class per cluster (its webhook configuration and
ClusterRoles are cluster-wide), and the kustomize overlays and the chart then agree on every name. */}}

{{- define "gpu-class.labels" -}}
app.kubernetes.io/name: {{ .name | default "gpu-class" }}
app.kubernetes.io/part-of: gpu-class
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* The webhook's image, which the labeller and the upgrader run too: by digest when image.digest gives one. */}}
{{- define "gpu-class.image" -}}
{{- with .Values.image.digest -}}
{{ $.Values.image.repository }}@{{ . }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The second scheduler's image: gpu-class-scheduler of the chart's appVersion, its build for the
cluster's minor on a cluster older than scheduler.kubernetesMinor (0.1.0-k8s1.36), or with
scheduler.stockBinary the stock kube-scheduler of the cluster's release (v1.35.4 of v1.35.4-eks-1a2b3c),
unless scheduler.image names another. Each minor's build is its own image, so scheduler.image.digests
pins one digest per minor: the one of the build chosen (with stockBinary, the cluster's minor) replaces
the tag and its -k8s suffix. A pin list without that minor fails rather than fall back to a tag. */}}
{{- define "gpu-class.schedulerImage" -}}
{{- $image := .Values.scheduler.image -}}
{{- $cluster := include "gpu-class.clusterMinor" . -}}
{{- $older := and (not .Values.scheduler.stockBinary) (has $cluster .Values.scheduler.olderMinors) (semverCompare (printf "<%s.0-0" .Values.scheduler.kubernetesMinor) (printf "%s.0" $cluster)) -}}
{{- $minor := or .Values.scheduler.stockBinary $older | ternary $cluster .Values.scheduler.kubernetesMinor -}}
{{- $repository := and .Values.scheduler.stockBinary (eq $image.repository "gpu-class-scheduler") | ternary "registry.k8s.io/kube-scheduler" $image.repository -}}
{{- if $image.digests -}}
{{ $repository }}@{{ index $image.digests $minor | required (printf "scheduler.image.digests has no digest for Kubernetes %s, the minor whose build this cluster (%s) runs: add it, or empty scheduler.image.digests to pull by tag" $minor $cluster) }}
{{- else if .Values.scheduler.stockBinary -}}
{{ $repository }}:{{ $image.tag | default (regexFind "^v[0-9]+[.][0-9]+[.][0-9]+" .Capabilities.KubeVersion.Version) }}
{{- else -}}
{{ $repository }}:{{ $image.tag | default .Chart.AppVersion }}{{ if $older }}-k8s{{ $cluster }}{{ end }}
{{- end -}}
{{- end -}}

{{/* gpu-class-scheduler's priority class: scheduler.priorityClassName, or where it is left null the
webhook's (priorityClassName), which it shared before it had its own. */}}
{{- define "gpu-class.schedulerPriorityClassName" -}}
{{- $own := .Values.scheduler.priorityClassName -}}
{{- kindIs "string" $own | ternary $own .Values.priorityClassName -}}
{{- end -}}

{{/* The priority classes of the Pods the release runs, as a JSON list (priority.yaml admits
system-cluster-critical where any of them uses it). */}}
{{- define "gpu-class.priorityClasses" -}}
{{- $classes := list .Values.priorityClassName -}}
{{- if .Values.scheduler.enabled -}}
{{- $classes = append $classes (include "gpu-class.schedulerPriorityClassName" .) -}}
{{- end -}}
{{- range $part := list "upgrader" "labeller" -}}
{{- $values := index $.Values $part -}}
{{- if $values.enabled -}}
{{- $classes = append $classes $values.priorityClassName -}}
{{- end -}}
{{- end -}}
{{- $classes | uniq | toJson -}}
{{- end -}}

{{- define "gpu-class.clusterMinor" -}}
{{ .Capabilities.KubeVersion.Major }}.{{ trimSuffix "+" .Capabilities.KubeVersion.Minor }}
{{- end -}}

{{/* The Secret holding tls.crt, tls.key and ca.crt. */}}
{{- define "gpu-class.tlsSecret" -}}
{{- if eq .Values.tls.mode "secret" -}}
{{ required "tls.secretName: name the kubernetes.io/tls Secret (with ca.crt) that tls.mode secret uses" .Values.tls.secretName }}
{{- else -}}
gpu-class-tls
{{- end -}}
{{- end -}}

{{- define "gpu-class.catalogText" -}}
{{- .Values.catalog.inline | default (.Files.Get "files/catalog.yaml") -}}
{{- end -}}

{{- define "gpu-class.catalogConfigMap" -}}
{{- .Values.catalog.existingConfigMap | default "gpu-class-catalog" -}}
{{- end -}}

{{/* Every resource a type of the catalog is requested as (a type without `resource` is requested
as gpuResource), in the catalog's order, as a JSON list: webhook.core.catalog's Catalog.resources.
With existingConfigMap the chart cannot read the catalog, so catalog.resources says them; left
empty, they are the shipped catalog's. */}}
{{- define "gpu-class.catalogResources" -}}
{{- if and .Values.catalog.existingConfigMap .Values.catalog.resources -}}
{{- toJson .Values.catalog.resources -}}
{{- else -}}
{{- $text := .Files.Get "files/catalog.yaml" -}}
{{- if not .Values.catalog.existingConfigMap -}}
{{- $text = include "gpu-class.catalogText" . -}}
{{- end -}}
{{- $catalog := $text | fromYaml -}}
{{- if hasKey $catalog "Error" -}}
{{- fail (printf "catalog.inline is not YAML: %s" $catalog.Error) -}}
{{- end -}}
{{- $default := $catalog.gpuResource | default "nvidia.com/gpu" -}}
{{- $resources := list -}}
{{- range $catalog.types | default list -}}
{{- $resources = append $resources (.resource | default $default) -}}
{{- end -}}
{{- $resources | uniq | toJson -}}
{{- end -}}
{{- end -}}

{{/* The CEL test of a resource name `r` for the catalog's resources, as deploy/base/webhook.yaml
writes it: exact names, and one prefix for every MIG profile, so that a Pod asking for a profile
the catalog lacks still reaches the webhook and is told so, rather than start unplaced. */}}
{{- define "gpu-class.resourceTest" -}}
{{- $tests := list -}}
{{- $mig := false -}}
{{- range include "gpu-class.catalogResources" . | fromJsonArray -}}
{{- if hasPrefix "nvidia.com/mig-" . -}}
{{- $mig = true -}}
{{- else -}}
{{- $tests = append $tests (printf "r == '%s'" .) -}}
{{- end -}}
{{- end -}}
{{- if $mig -}}
{{- $tests = append $tests "r.startsWith('nvidia.com/mig-')" -}}
{{- end -}}
{{- if not $tests -}}
{{- fail "the catalog has no types: it names no resource to request" -}}
{{- end -}}
({{ join " || " $tests }})
{{- end -}}

{{/* The namespaces the webhook and the backstop serve: opted in, never their own nor the excluded. */}}
{{- define "gpu-class.namespaceSelector" -}}
matchExpressions:
  - key: gpu-class.io/inject
    operator: In
    values: [enabled]
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ prepend .Values.webhook.excludedNamespaces .Release.Namespace | uniq | toJson }}
{{- with .Values.webhook.namespaceSelector.matchExpressions }}
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* One list for the webhook and the backstop: the policy must check exactly the Pods the webhook
was sent. */}}
{{- define "gpu-class.matchConditions" -}}
{{- $test := include "gpu-class.resourceTest" . -}}
- name: not-mirror-pod
  expression: >-
    !has(object.metadata.annotations) ||
    !('kubernetes.io/config.mirror' in object.metadata.annotations)
- name: gpu-class-pod
  expression: |-
    (has(object.metadata.annotations) &&
     'gpu-class.io/class' in object.metadata.annotations) ||
    (object.spec.containers +
     (has(object.spec.initContainers) ? object.spec.initContainers : [])
    ).exists(c, has(c.resources) && (
      (has(c.resources.limits) && c.resources.limits.exists(r,
        {{ $test }} &&
        c.resources.limits[r] != '0')) ||
      (has(c.resources.requests) && c.resources.requests.exists(r,
        {{ $test }} &&
        c.resources.requests[r] != '0'))))
{{- end -}}

{{/* The hardening every container here shares (the namespace enforces Pod Security "restricted"). */}}
{{- define "gpu-class.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "gpu-class.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* caBundle of the webhook configuration: the CA that signed the serving certificate. */}}
{{- define "gpu-class.caBundle" -}}
{{- if eq .Values.tls.mode "secret" -}}
{{ required "tls.caBundle: give the PEM of the CA that signed the certificate in tls.secretName" .Values.tls.caBundle | b64enc }}
{{- else -}}
{{ (include "gpu-class.selfManagedTLS" . | fromJson).caCrt | b64enc }}
{{- end -}}
{{- end -}}

{{/* The Secret holding the second scheduler's client certificate for the extender (tls.crt, tls.key). */}}
{{- define "gpu-class.clientSecret" -}}
{{- if eq .Values.tls.mode "secret" -}}
{{ required "tls.clientSecretName: name the kubernetes.io/tls Secret with the scheduler's client certificate, signed by the CA of tls.secretName, that tls.mode secret uses with scheduler.extender" .Values.tls.clientSecretName }}
{{- else -}}
gpu-class-extender-client
{{- end -}}
{{- end -}}

{{/* tls.mode self-managed: the CA and serving pair, made once and then read back from the cluster.

A new CA on every `helm upgrade` would change caBundle while the Pods still serve the old
certificate (the kubelet refreshes mounted Secrets a minute or two later), and every call would fail
meanwhile. So the CA, once made, is read back from the Secret gpu-class-ca with `lookup` and kept.
The serving certificate is kept too, until an upgrade comes within renewBeforeDays of the expiry
recorded on its Secret (or the names it must carry change): then it is reissued by the same CA, caBundle does not change, and the
server reloads the new files when they arrive. Templates render in no fixed order and each call
of genCA gives a new CA, so the result is made once per render and kept in .Values. */}}
{{- define "gpu-class.selfManagedTLS" -}}
{{- if not (hasKey .Values "gpuClassGeneratedTLS") -}}
{{- $ns := .Release.Namespace -}}
{{- $settings := .Values.tls.selfManaged -}}
{{- $result := dict -}}
{{- $caSecret := lookup "v1" "Secret" $ns "gpu-class-ca" -}}
{{- if and $caSecret (index ($caSecret.data | default dict) "tls.key") -}}
{{- $_ := set $result "caCrt" (index $caSecret.data "tls.crt" | b64dec) -}}
{{- $_ := set $result "caKey" (index $caSecret.data "tls.key" | b64dec) -}}
{{- else -}}
{{- $ca := genCA "gpu-class-ca" (int $settings.caValidityDays) -}}
{{- $_ := set $result "caCrt" $ca.Cert -}}
{{- $_ := set $result "caKey" $ca.Key -}}
{{- end -}}
{{- $serving := lookup "v1" "Secret" $ns "gpu-class-tls" -}}
{{- $data := $serving.data | default dict -}}
{{- $notAfter := int64 (dig "metadata" "annotations" "gpu-class.io/not-after" "0" $serving) -}}
{{- $renewFrom := now | dateModify (printf "+%dh" (mul (int $settings.renewBeforeDays) 24)) | unixEpoch | int64 -}}
{{- $names := concat (list (printf "gpu-class.%s.svc" $ns) (printf "gpu-class.%s.svc.cluster.local" $ns)) $settings.extraDNSNames -}}
{{- $namesDigest := concat $names $settings.extraIPs | toJson | sha256sum | trunc 16 -}}
{{- $_ := set $result "names" $namesDigest -}}
{{- $sameNames := eq (dig "metadata" "annotations" "gpu-class.io/names" "" $serving) $namesDigest -}}
{{- if and (index $data "tls.key") (eq (index $data "ca.crt" | default "" | b64dec) $result.caCrt) (gt $notAfter $renewFrom) $sameNames -}}
{{- $_ := set $result "crt" (index $data "tls.crt" | b64dec) -}}
{{- $_ := set $result "key" (index $data "tls.key" | b64dec) -}}
{{- $_ := set $result "notAfter" (toString $notAfter) -}}
{{- else -}}
{{- $days := int $settings.validityDays -}}
{{- $cert := genSignedCert (first $names) $settings.extraIPs $names $days (buildCustomCert ($result.caCrt | b64enc) ($result.caKey | b64enc)) -}}
{{- $_ := set $result "crt" $cert.Cert -}}
{{- $_ := set $result "key" $cert.Key -}}
{{- $_ := set $result "notAfter" (now | dateModify (printf "+%dh" (mul $days 24)) | unixEpoch | toString) -}}
{{- end -}}
{{- /* The second scheduler's client certificate for the extender, from the same CA, kept and renewed
the same way. (sprig's genSignedCert marks every certificate for server and client use alike; only
the webhook's Pods hold the serving key.) */ -}}
{{- $client := lookup "v1" "Secret" $ns "gpu-class-extender-client" -}}
{{- $clientData := $client.data | default dict -}}
{{- $clientNotAfter := int64 (dig "metadata" "annotations" "gpu-class.io/not-after" "0" $client) -}}
{{- if and (index $clientData "tls.key") (eq (index $clientData "ca.crt" | default "" | b64dec) $result.caCrt) (gt $clientNotAfter $renewFrom) -}}
{{- $_ := set $result "clientCrt" (index $clientData "tls.crt" | b64dec) -}}
{{- $_ := set $result "clientKey" (index $clientData "tls.key" | b64dec) -}}
{{- $_ := set $result "clientNotAfter" (toString $clientNotAfter) -}}
{{- else -}}
{{- $days := int $settings.validityDays -}}
{{- $cert := genSignedCert "gpu-class-scheduler" nil nil $days (buildCustomCert ($result.caCrt | b64enc) ($result.caKey | b64enc)) -}}
{{- $_ := set $result "clientCrt" $cert.Cert -}}
{{- $_ := set $result "clientKey" $cert.Key -}}
{{- $_ := set $result "clientNotAfter" (now | dateModify (printf "+%dh" (mul $days 24)) | unixEpoch | toString) -}}
{{- end -}}
{{- $_ := set .Values "gpuClassGeneratedTLS" $result -}}
{{- end -}}
{{- toJson .Values.gpuClassGeneratedTLS -}}
{{- end -}}

{{/* Kubernetes' version-skew policy: kube-scheduler may not be newer than the API server. Our binary is
built on scheduler.kubernetesMinor and on each of scheduler.olderMinors; on a cluster older than all of
them the install stops here, saying what to use. */}}
{{- define "gpu-class.checkSchedulerSkew" -}}
{{- if and .Values.scheduler.enabled (not .Values.scheduler.stockBinary) -}}
{{- $cluster := include "gpu-class.clusterMinor" . -}}
{{- if and (semverCompare (printf "<%s.0-0" .Values.scheduler.kubernetesMinor) (printf "%s.0" $cluster)) (not (has $cluster .Values.scheduler.olderMinors)) -}}
{{- fail (printf "gpu-class-scheduler is built for Kubernetes %s and %s, and would be newer than this cluster's API server (%s), which Kubernetes' version-skew policy forbids: set scheduler.stockBinary=true to run the stock kube-scheduler of the cluster's release, use a build for %s (scheduler.image, scheduler.kubernetesMinor), or scheduler.enabled=false (docs/operators/compatibility.md)" (join ", " .Values.scheduler.olderMinors) .Values.scheduler.kubernetesMinor $cluster $cluster) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Where the server reads tls.crt, tls.key and ca.crt: the mounted Secret, or (webhook-managed) the files the
webhook writes itself from the Secrets it keeps. */}}
{{- define "gpu-class.tlsDir" -}}
{{- if eq .Values.tls.mode "webhook-managed" -}}
/tmp/gpu-class-tls
{{- else -}}
/etc/gpu-class/tls
{{- end -}}
{{- end -}}

{{/* tls.mode webhook-managed: the serve flags that keep the CA, certificates and caBundle. */}}
{{- define "gpu-class.webhookManagedArgs" -}}
{{- if eq .Values.tls.mode "webhook-managed" -}}
{{- $m := .Values.tls.webhookManaged -}}
# The webhook keeps its own CA and certificates in Secrets (docs/operators/certificates.md)
- --manage-certificates={{ .Release.Namespace }}
{{- with .Values.webhook.url }}
{{- range list "gpu-class" (printf "gpu-class.%s" $.Release.Namespace) (printf "gpu-class.%s.svc" $.Release.Namespace) (printf "gpu-class.%s.svc.cluster.local" $.Release.Namespace) (urlParse .).hostname }}
- --certificate-name={{ . }}
{{- end }}
{{- end }}
- --manage-webhook-configuration=gpu-class.io
- --manage-webhook-configuration=gpu-class.io-workloads
- --ca-validity-seconds={{ mul $m.caValidityHours 3600 }}
- --ca-renew-before-seconds={{ mul $m.caRenewBeforeHours 3600 }}
- --cert-validity-seconds={{ mul $m.validityHours 3600 }}
- --cert-renew-before-seconds={{ mul $m.renewBeforeHours 3600 }}
- --rotation-overlap-seconds={{ mul $m.overlapMinutes 60 }}
- --certificates-check-seconds={{ $m.checkSeconds }}
{{- end -}}
{{- end -}}

{{/* tls.mode cert-manager: who issues the serving and client certificates, tls.certManager.issuerRef (an Issuer
of the release's namespace or a ClusterIssuer of yours), else the chart's own CA Issuer. */}}
{{- define "gpu-class.certManagerIssuer" -}}
{{- $issuer := .Values.tls.certManager.issuerRef | default dict -}}
group: {{ $issuer.group | default "cert-manager.io" }}
kind: {{ $issuer.kind | default "Issuer" }}
name: {{ $issuer.name | default "gpu-class-ca" }}
{{- end -}}
