{{- define "gpu-class.schedulerConfig" -}}
# KubeSchedulerConfiguration of the second scheduler. kube-scheduler decodes
# this strictly: an unknown or misspelt field stops it at start.
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  # Two replicas, one active. The lease must not be the default scheduler's
  # (kube-system/kube-scheduler): the two schedulers would then compete for
  # one lease and only one of them would ever run. rbac.yaml grants this
  # lease.
  leaderElect: true
  resourceLock: leases
  resourceName: gpu-class-scheduler
  resourceNamespace: {{ .Release.Namespace }}
profiles:
  # Pods choose this profile with spec.schedulerName; the webhook sets it on
  # the Pods it places when the catalog says `schedulerName: gpu-class-scheduler`.
  - schedulerName: gpu-class-scheduler
extenders:
  - urlPrefix: https://gpu-class.{{ .Release.Namespace }}.svc:443
    filterVerb: filter
    prioritizeVerb: prioritize
    # The scheduler adds score (0..10) * weight * 10 to the plugins' scores
    # (0..100 each, times the plugin's weight; the default plugins' weights
    # add up to about 13). At 5 the class's strategy outweighs the default
    # spreading plugins (NodeResourcesFit spreads, which would undo binpack)
    # without overruling taints, affinity and topology spread together.
    weight: 5
    enableHTTPS: true
    tlsConfig:
      # The CA that signed the webhook's serving certificate, from the Secret
      # gpu-class-tls (both overlays put ca.crt there; deployment.yaml mounts
      # it). Not caData: that would copy the CA into this file by hand at every
      # install and rotation. Not insecure (nor an empty tlsConfig, which the
      # scheduler treats as insecure when enableHTTPS is set): anyone who could
      # answer for the Service would then decide where GPU Pods run.
      # kube-scheduler reads the file at start: restart it after a CA rotation.
      caFile: /etc/gpu-class-scheduler/tls/ca.crt
    # The answer comes from the webhook's in-memory view of the cluster.
    httpTimeout: 5s
    # The webhook watches Nodes and GPU Pods itself, so the scheduler sends
    # node names, not whole Node objects (which can exceed the webhook's 3 MiB
    # request limit in a large cluster).
    nodeCacheCapable: true
    # Only Pods that request one of these resources are sent to the extender:
    # every resource a type of the built-in catalog is requested as (whole
    # NVIDIA GPUs, each MIG profile, AMD GPUs; names are exact, no prefixes).
    # The scheduler still counts them itself (NodeResourcesFit), so a node is
    # never overcommitted whatever the extender answers.
    managedResources:
      {{- range include "gpu-class.catalogResources" . | fromJsonArray }}
      - name: {{ . }}
        ignoredByScheduler: false
      {{- end }}
    # Ignorable: if the webhook is unreachable or answers an error, schedule
    # without it rather than leave every GPU Pod Pending. Placement stays
    # correct without the extender: the webhook wrote a required node affinity
    # for the allowed GPU types at admission, and the scheduler checks free
    # GPUs, readiness and cordons itself. What is lost meanwhile is the
    # preference by live load (the class's strategy), nothing that matters
    # for correctness.
    ignorable: true
{{- end -}}
