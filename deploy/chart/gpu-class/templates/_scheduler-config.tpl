{{- define "gpu-class.schedulerConfig" -}}
{{- /* NodeLabelIndex is gpu-class-scheduler's own plugin: the stock binary (scheduler.stockBinary) has none */}}
{{- $labelIndex := not .Values.scheduler.stockBinary }}
{{- if and .Values.scheduler.extender .Values.scheduler.stockBinary -}}
# KubeSchedulerConfiguration of gpu-class-scheduler with gpu-class's
# extender on the stock kube-scheduler binary: deploy/scheduler/config.yaml
# without the NodeLabelIndex plugin, which the stock binary does not have, and
# the extender below, which applies to every profile.
{{- else if .Values.scheduler.extender -}}
# KubeSchedulerConfiguration of gpu-class-scheduler with gpu-class's
# extender: deploy/scheduler/config.yaml (the profiles, word for word; a test
# keeps the two alike) and the extender below, which applies to every profile.
{{- else if .Values.scheduler.stockBinary -}}
# KubeSchedulerConfiguration of gpu-class-scheduler on the stock
# kube-scheduler binary: deploy/scheduler/config.yaml (the profiles, word for
# word; a test keeps the two alike) without the NodeLabelIndex plugin, which
# the stock binary does not have. The order holds the same; each Pod's cycle
# filters every node of the cluster (docs: "How strictly the order holds").
{{- else -}}
# KubeSchedulerConfiguration of gpu-class-scheduler, the strict path:
# kube-scheduler with our NodeLabelIndex plugin (deploy/scheduler/plugin) and
# one profile per way of scoring a class's strategy.
# kube-scheduler decodes this strictly: an unknown or misspelt field stops it
# at start. docs/operators/strict-scheduler.md works out every weight; tests/test_scheduler.py
# recomputes that proof from this file and runs the real kube-scheduler on it.
{{- end }}
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
  # kube-scheduler's lease (15 s) and renew deadline (10 s), and a retry of
  # 1 s rather than its 2 s. A standby takes the Lease once it has seen no
  # renewal for a lease duration, and it looks once a retry period (jittered
  # up to 2.2 times): when the leader dies or is cut off, the next bind comes
  # 15 to 19.4 s later with 1 s, up to 24 s with 2 s. The leader renews once
  # a retry period: one Lease write a second. The lease stays 15 s: a leader
  # that cannot renew within the renew deadline exits, and its restart
  # relists every Node and Pod, so a shorter one turns a slow spell of the
  # API server into a failover. A leader that is stopped (a rolling update)
  # gives the Lease up at once. docs/operators/strict-scheduler.md has the
  # measured gaps.
  leaseDuration: 15s
  renewDeadline: 10s
  retryPeriod: 1s
# Every feasible node is scored. Left adaptive, kube-scheduler stops looking
# once it has found max(100, 50% - nodes/125) of the nodes feasible (10% at
# 5,000 nodes) and the best type's few nodes are often not among them.
percentageOfNodesToScore: 100
{{- $whole := list }}
{{- $slices := list }}
{{- range include "gpu-class.catalogResources" . | fromJsonArray }}
{{- if hasPrefix "nvidia.com/mig-" . }}
{{- $slices = append $slices . }}
{{- else }}
{{- $whole = append $whole . }}
{{- end }}
{{- end }}
{{- if not $whole }}
{{- /* a catalog of MIG slices only: the whole-GPU profiles score them too, and no Pod is sent there */}}
{{- $whole = $slices }}
{{- end }}
profiles:
  # performance and cost: the type order is the Pod's preferred node affinity,
  # which the webhook writes best first (weights planner.weights_for). Within
  # the best type, GPUs are packed: whole nodes stay free for Pods that need
  # all of a node's GPUs.
  - schedulerName: gpu-class-scheduler
    percentageOfNodesToScore: 100
    plugins:
      {{- if $labelIndex }}
      # NodeLabelIndex (gpu-class-scheduler's own PreFilter plugin) gives
      # the Pod's cycle only the nodes its required affinity names: the
      # Filter and Score plugins then run on the class's nodes alone, not
      # the whole cluster. It narrows, never rejects and never scores.
      preFilter:
        enabled: &label-index
          - name: NodeLabelIndex
      # With an order (its args), NodeLabelIndex keeps to the best of those
      # nodes: every node it leaves out scores below one it keeps. When a
      # Filter it does not know of refuses them all, its PostFilter gives the
      # Pod all of its types' nodes at once, before any preemption.
      postFilter: &widen-first
        disabled:
          - name: DefaultPreemption
        enabled:
          - name: NodeLabelIndex
          - name: DefaultPreemption
      {{- end }}
      score:
        disabled:
          - name: "*"
        enabled: &order-scores
          - name: NodeAffinity
            weight: 2000
          - name: NodeResourcesFit
            weight: 10
          - name: TaintToleration
            weight: 1
          - name: PodTopologySpread
            weight: 1
          - name: InterPodAffinity
            weight: 1
    pluginConfig:
      {{- if $labelIndex }}
      - name: NodeLabelIndex
        args:
          order: PreferredTypes
      {{- end }}
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
            # Only GPU resources: a Pod is scored on the one it requests. Every
            # whole-GPU resource a type of the built-in catalog is requested
            # as; MIG slices have profiles of their own (-slices, below), since
            # each resource listed costs every node's score a few microseconds,
            # requested or not.
            resources: &whole-gpus
              {{- range $whole }}
              - {name: {{ . }}, weight: 1}
              {{- end }}
      # The Pod's own soft spread constraints count (within a type); the
      # system default (spread every ReplicaSet's Pods over hosts and zones,
      # up to 200 points in the default profile) does not.
      - name: PodTopologySpread
        args: &no-default-spread
          defaultingType: List
          defaultConstraints: []
  # binpack: the node with the largest share of its GPUs in use once the Pod
  # is placed, whatever its type.
  - schedulerName: gpu-class-scheduler-binpack
    percentageOfNodesToScore: 100
    plugins:
      {{- if $labelIndex }}
      preFilter:
        enabled: *label-index
      postFilter: *widen-first
      {{- end }}
      score:
        disabled:
          - name: "*"
        enabled: &share-scores
          - name: NodeResourcesFit
            weight: 1000
          - name: NodeAffinity
            weight: 1
          - name: TaintToleration
            weight: 1
          - name: PodTopologySpread
            weight: 1
          - name: InterPodAffinity
            weight: 1
    pluginConfig:
      {{- if $labelIndex }}
      - name: NodeLabelIndex
        args:
          order: MostUsed
          resources: *whole-gpus
          # any of the best is as right as another: at most this many a cycle
          nodes: 100
      {{- end }}
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
            resources: *whole-gpus
      - name: PodTopologySpread
        args: *no-default-spread
  # balanced: the node with the largest share of its GPUs free once the Pod is
  # placed, whatever its type; the types' shares in use even out.
  - schedulerName: gpu-class-scheduler-balanced
    percentageOfNodesToScore: 100
    plugins:
      {{- if $labelIndex }}
      preFilter:
        enabled: *label-index
      postFilter: *widen-first
      {{- end }}
      score:
        disabled:
          - name: "*"
        enabled: *share-scores
    pluginConfig:
      {{- if $labelIndex }}
      - name: NodeLabelIndex
        args:
          order: MostFree
          resources: *whole-gpus
          nodes: 100
      {{- end }}
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: LeastAllocated
            resources: *whole-gpus
      - name: PodTopologySpread
        args: *no-default-spread
{{- if $slices }}
  # The same three for Pods that request a MIG slice: scored on every slice
  # resource a type of the built-in catalog is requested as.
  - schedulerName: gpu-class-scheduler-slices
    percentageOfNodesToScore: 100
    plugins:
      {{- if $labelIndex }}
      preFilter:
        enabled: *label-index
      postFilter: *widen-first
      {{- end }}
      score:
        disabled:
          - name: "*"
        enabled: *order-scores
    pluginConfig:
      {{- if $labelIndex }}
      - name: NodeLabelIndex
        args:
          order: PreferredTypes
      {{- end }}
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
            resources: &gpu-slices
              {{- range $slices }}
              - {name: {{ . }}, weight: 1}
              {{- end }}
      - name: PodTopologySpread
        args: *no-default-spread
  - schedulerName: gpu-class-scheduler-binpack-slices
    percentageOfNodesToScore: 100
    plugins:
      {{- if $labelIndex }}
      preFilter:
        enabled: *label-index
      postFilter: *widen-first
      {{- end }}
      score:
        disabled:
          - name: "*"
        enabled: *share-scores
    pluginConfig:
      {{- if $labelIndex }}
      - name: NodeLabelIndex
        args:
          order: MostUsed
          resources: *gpu-slices
          nodes: 100
      {{- end }}
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
            resources: *gpu-slices
      - name: PodTopologySpread
        args: *no-default-spread
  - schedulerName: gpu-class-scheduler-balanced-slices
    percentageOfNodesToScore: 100
    plugins:
      {{- if $labelIndex }}
      preFilter:
        enabled: *label-index
      postFilter: *widen-first
      {{- end }}
      score:
        disabled:
          - name: "*"
        enabled: *share-scores
    pluginConfig:
      {{- if $labelIndex }}
      - name: NodeLabelIndex
        args:
          order: MostFree
          resources: *gpu-slices
          nodes: 100
      {{- end }}
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: LeastAllocated
            resources: *gpu-slices
      - name: PodTopologySpread
        args: *no-default-spread
{{- end }}
{{- if .Values.scheduler.extender }}
extenders:
  # The extender's own port on the webhook's Service: it serves the verbs only
  # to clients with a certificate of the webhook's CA (tlsConfig.certFile).
  - urlPrefix: https://gpu-class.{{ .Release.Namespace }}.svc:8444
    filterVerb: filter
    # No prioritizeVerb: filter already keeps only the promised nodes, and
    # within them the profile's own scores decide.
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
      # Its client certificate, from the Secret gpu-class-extender-client
      # (signed by the same CA; the scheduler's Deployment mounts it): the
      # extender answers no one else, since its `filter` changes what it
      # counts as taken. kube-scheduler reads these files again for new
      # connections (at most once a second), so a renewed certificate needs no
      # restart.
      certFile: /etc/gpu-class-scheduler/tls/client.crt
      keyFile: /etc/gpu-class-scheduler/tls/client.key
    # The answer comes from the webhook's in-memory view of the cluster.
    httpTimeout: 5s
    # The webhook watches Nodes and GPU Pods itself, so the scheduler sends
    # node names, not whole Node objects (which can exceed the webhook's 3 MiB
    # request limit in a large cluster).
    nodeCacheCapable: true
    # Only Pods that request one of these resources are sent to the extender:
    # every resource a type of the built-in catalog is requested as (names are
    # exact, no prefixes). The scheduler still counts them itself
    # (NodeResourcesFit), so a node is never overcommitted whatever the
    # extender answers.
    managedResources:
      {{- range include "gpu-class.catalogResources" . | fromJsonArray }}
      - name: {{ . }}
        ignoredByScheduler: false
      {{- end }}
    # Ignorable: if the webhook is unreachable or answers an error, the
    # profiles alone decide, which keeps the order strict by the scheduler's
    # own counts (docs/operators/strict-scheduler.md).
    ignorable: true
{{- end }}
{{- end -}}

