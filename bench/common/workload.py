"""What the benchmark sends and serves: a Deployment's Pod in an AdmissionReview, and realistic GPU Nodes.

Pure builders, no I/O. The shapes follow what a v1.3x API server sends and what `kubectl get nodes -o
yaml` prints on GPU Operator clusters (GPU Feature Discovery and Node Feature Discovery labels), so the
server parses bodies and files of the size it meets in production, not toy objects.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Iterator

JsonObj = dict[str, Any]

NAMESPACE = "ml-team"
UID_CHARS = 36  # a UUID's length; the load generator overwrites it in place, so it must not change
UID_PLACEHOLDER = "00000000-0000-4000-8000-000000000000"
assert len(UID_PLACEHOLDER) == UID_CHARS

TS = "2025-11-20T09:14:07Z"


# ObjectMeta's fields in the order the API server writes them (Go's encoding/json follows the struct)
OBJECT_META_ORDER = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
                     "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
                     "ownerReferences", "finalizers", "managedFields")


def put_in_served_order(obj: JsonObj) -> JsonObj:
    """Reorder the object's keys, in place, as the API server writes them: kind, apiVersion, metadata in
    ObjectMeta's order, then the rest as they were (the Pod watch's look at a raw line reads a Pod's head)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        ordered_meta: JsonObj = {k: meta[k] for k in OBJECT_META_ORDER if k in meta}
        ordered_meta.update((k, v) for k, v in meta.items() if k not in ordered_meta)
        meta.clear()
        meta.update(ordered_meta)
    ordered: JsonObj = {k: obj[k] for k in ("kind", "apiVersion", "metadata") if k in obj}
    ordered.update((k, v) for k, v in obj.items() if k not in ordered)
    obj.clear()
    obj.update(ordered)
    return obj


# ------------------------------------------------------------------------------------------ the Pod

def _env(n: int) -> list[JsonObj]:
    env: list[JsonObj] = [
        {"name": f"TRAINER_SETTING_{i}", "value": f"value-{i}-" + "x" * (i % 7)} for i in range(n)
    ]
    env += [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
        {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}},
    ]
    return env


def _probe(path: str, period: int) -> JsonObj:
    return {
        "httpGet": {"path": path, "port": 8080, "scheme": "HTTP"},
        "initialDelaySeconds": 10, "periodSeconds": period, "timeoutSeconds": 2,
        "successThreshold": 1, "failureThreshold": 3,
    }


def _fields_v1(value: Any) -> Any:
    """managedFields' fieldsV1 for an object: the field set the server records for its manager."""
    if isinstance(value, dict):
        out: JsonObj = {"f:" + k: _fields_v1(v) for k, v in value.items()}
        return {".": {}, **out} if value else {}
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        return {f'k:{{"name":"{v["name"]}"}}': {".": {}, **_fields_v1(v)} for v in value}
    return {}


def make_deployment_pod(pod_template_hash: str = "7d9c6b5f4") -> JsonObj:
    """A Pod as the ReplicaSet controller creates it, after the built-in admission plugins ran.

    generateName and no name (names are generated after admission), ownerReferences to the
    ReplicaSet, the pod-template-hash label, a large managedFields entry, an init container, the
    trainer and a sidecar, env vars, volumes (including the ServiceAccount plugin's projected token),
    probes, and the default not-ready/unreachable tolerations.
    """
    labels = {"app.kubernetes.io/name": "trainer", "app.kubernetes.io/part-of": "llm-finetune",
              "team": "ml-research", "pod-template-hash": pod_template_hash}
    annotations = {
        "gpu-class.io/class": "high",
        "kubectl.kubernetes.io/restartedAt": "2025-11-20T09:10:00Z",
        "prometheus.io/scrape": "true", "prometheus.io/port": "9400",
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
    }
    volume_mounts = [
        {"name": "data", "mountPath": "/data"},
        {"name": "checkpoints", "mountPath": "/checkpoints"},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "config", "mountPath": "/etc/trainer", "readOnly": True},
        {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
         "readOnly": True},
    ]
    common = {"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
              "imagePullPolicy": "IfNotPresent"}
    spec: JsonObj = {
        "initContainers": [{
            "name": "fetch-weights", "image": "registry.example/tools/fetch:2.4.1",
            "command": ["/bin/fetch", "--from", "s3://models/llama-3-8b", "--to", "/checkpoints/base"],
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
            "volumeMounts": volume_mounts[1:2] + volume_mounts[4:], **common,
        }],
        "containers": [
            {
                "name": "trainer", "image": "registry.example/ml/trainer:3.8.0-cuda12.4",
                "command": ["torchrun"],
                "args": ["--nproc-per-node=auto", "train.py", "--config", "/etc/trainer/config.yaml",
                         "--checkpoint-dir", "/checkpoints", "--resume"],
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                          {"name": "metrics", "containerPort": 9400, "protocol": "TCP"}],
                "env": _env(24),
                "envFrom": [{"configMapRef": {"name": "trainer-env"}}],
                "resources": {"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"memory": "96Gi"}},
                "volumeMounts": volume_mounts,
                "livenessProbe": _probe("/healthz", 20),
                "readinessProbe": _probe("/ready", 10),
                "startupProbe": {**_probe("/healthz", 10), "failureThreshold": 60},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                **common,
            },
            {
                "name": "log-shipper", "image": "registry.example/observability/fluent-bit:3.1.9",
                "args": ["--config=/fluent-bit/etc/fluent-bit.conf"],
                "env": _env(4),
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
                "volumeMounts": [volume_mounts[1], volume_mounts[4]],
                "livenessProbe": _probe("/api/v1/health", 30),
                **common,
            },
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "checkpoints-llm"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
            {"name": "config", "configMap": {"name": "trainer-config", "defaultMode": 420}},
            {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}},
        ],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 120, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "trainer", "serviceAccount": "trainer", "securityContext": {"fsGroup": 1000},
        "schedulerName": "default-scheduler", "enableServiceLinks": True, "priority": 0,
        "preemptionPolicy": "PreemptLowerPriority",
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
        ],
    }
    metadata: JsonObj = {
        "generateName": f"trainer-{pod_template_hash}-",
        "namespace": NAMESPACE,
        "labels": labels,
        "annotations": annotations,
        "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"trainer-{pod_template_hash}",
            "uid": "5c1f7a2e-8d4b-4f0e-9a51-3b2c6d7e8f90", "controller": True, "blockOwnerDeletion": True,
        }],
    }
    tracked = {"metadata": {k: v for k, v in metadata.items() if k != "namespace"}, "spec": spec}
    metadata["managedFields"] = [{
        "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": TS,
        "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(tracked),
    }]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec,
            "status": {"phase": "Pending", "qosClass": "Burstable"}}


def make_admission_review(pod: JsonObj, uid: str = UID_PLACEHOLDER) -> JsonObj:
    """The AdmissionReview the API server posts for a Pod CREATE by the ReplicaSet controller."""
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": NAMESPACE,
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "0b7e3c4d-1a2b-4c5d-8e9f-a0b1c2d3e4f5",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                           "system:authenticated"],
            },
            "object": copy.deepcopy(pod),
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


@dataclass(frozen=True)
class RequestBody:
    """The serialized AdmissionReview and where its uid sits, so each request can carry its own uid."""

    data: bytes
    uid_offset: int

    def with_uid(self, uid: str) -> bytes:
        raw = uid.encode()
        assert len(raw) == UID_CHARS
        return self.data[: self.uid_offset] + raw + self.data[self.uid_offset + UID_CHARS:]


def build_request_body() -> RequestBody:
    """Serialize once; compact like the API server's encoder."""
    data = json.dumps(make_admission_review(make_deployment_pod()), separators=(",", ":")).encode()
    marker = b'"uid":"' + UID_PLACEHOLDER.encode() + b'"'
    offset = data.index(marker) + len(b'"uid":"')
    assert data.count(UID_PLACEHOLDER.encode()) == 1
    return RequestBody(data, offset)


# ------------------------------------------------------------------------------------------ Nodes

@dataclass(frozen=True)
class GpuShape:
    """One kind of GPU node in the generated fleet."""

    product: str
    gpus: int
    memory_mib: int
    family: str
    compute: tuple[int, int]
    instance_type: str
    weight: int  # share of the fleet, in percent
    label_key: str = "nvidia.com/gpu.product"  # "gpu-type": hand-labelled, no GFD labels
    replicas: int = 1  # time-slicing: the device plugin advertises gpus * replicas

    @property
    def mig(self) -> bool:
        return "-MIG-" in self.product


# The mix covers every shape the planner distinguishes: GFD and hand labels, old and new driver
# names, time-slicing (-SHARED), a MIG product (maps to no type), and several allocatable counts.
FLEET: tuple[GpuShape, ...] = (
    GpuShape("NVIDIA-H100-80GB-HBM3", 8, 81559, "hopper", (9, 0), "p5.48xlarge", 20),
    GpuShape("NVIDIA-A100-SXM4-80GB", 8, 81920, "ampere", (8, 0), "p4de.24xlarge", 14),
    GpuShape("NVIDIA-L4", 1, 23034, "ada-lovelace", (8, 9), "g6.xlarge", 10),
    GpuShape("NVIDIA-A10G", 4, 23028, "ampere", (8, 6), "g5.12xlarge", 10),
    GpuShape("Tesla-T4", 1, 15360, "turing", (7, 5), "g4dn.xlarge", 8),
    GpuShape("NVIDIA-L40S", 4, 46068, "ada-lovelace", (8, 9), "g6e.12xlarge", 8),
    GpuShape("NVIDIA-L4", 8, 23034, "ada-lovelace", (8, 9), "g6.48xlarge", 6),
    GpuShape("A100-SXM4-40GB", 8, 40960, "ampere", (8, 0), "p4d.24xlarge", 5),
    GpuShape("NVIDIA-H200", 8, 143771, "hopper", (9, 0), "p5e.48xlarge", 5),
    GpuShape("NVIDIA-H100-PCIe", 2, 81559, "hopper", (9, 0), "on-prem-h100-pcie", 5, label_key="gpu-type"),
    GpuShape("Tesla-T4-SHARED", 1, 15360, "turing", (7, 5), "g4dn.2xlarge", 5, replicas=4),
    GpuShape("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", 7, 4864, "ampere", (8, 0), "p4d.24xlarge-mig", 4),
)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d")
CPU_FLAGS = ("ADX", "AESNI", "AVX", "AVX2", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512F", "AVX512VL",
             "AVX512VNNI", "FMA3", "GFNI", "HYPERVISOR", "IBPB", "STIBP", "VAES", "VMX", "VPCLMULQDQ")
IMAGES = (
    ("nvcr.io/nvidia/k8s/dcgm-exporter", 1_394_523_418), ("nvcr.io/nvidia/driver", 1_210_418_003),
    ("nvcr.io/nvidia/gpu-operator", 207_512_227), ("nvcr.io/nvidia/k8s-device-plugin", 164_911_782),
    ("nvcr.io/nvidia/gpu-feature-discovery", 148_122_010), ("nvcr.io/nvidia/cuda", 98_455_213),
    ("registry.k8s.io/nfd/node-feature-discovery", 72_311_902), ("registry.example/ml/trainer", 9_812_233_102),
    ("registry.example/observability/fluent-bit", 32_010_277), ("quay.io/prometheus/node-exporter", 11_203_884),
    ("registry.k8s.io/kube-proxy", 28_114_020), ("public.ecr.aws/eks/aws-vpc-cni", 48_302_117),
    ("public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver", 59_221_030), ("registry.k8s.io/pause", 311_286),
)


def _smooth_round_robin(weights: list[int], count: int) -> Iterator[int]:
    """Indices in proportion to `weights`, evenly spread (nginx's smooth weighted round robin), so
    even a 10-node fleet mixes several shapes and any prefix keeps the proportions."""
    current = [0] * len(weights)
    total = sum(weights)
    for _ in range(count):
        for i, w in enumerate(weights):
            current[i] += w
        best = max(range(len(weights)), key=lambda i: current[i])
        current[best] -= total
        yield best


def _condition(kind: str, status: str, reason: str, message: str) -> JsonObj:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": TS, "lastTransitionTime": "2025-11-01T02:00:00Z"}


def make_gpu_node(index: int, shape: GpuShape, *, ready: bool = True, cordoned: bool = False) -> JsonObj:
    """A GPU node as `kubectl get node -o yaml` shows it (managedFields hidden, as kubectl does)."""
    name = f"ip-10-{index // 65536 % 256}-{index // 256 % 256}-{index % 256}.ec2.internal"
    zone = ZONES[index % len(ZONES)]
    labels: dict[str, str] = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/instance-type": shape.instance_type,
        "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": shape.instance_type,
        "topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": zone,
        "failure-domain.beta.kubernetes.io/region": "us-east-1", "failure-domain.beta.kubernetes.io/zone": zone,
        "eks.amazonaws.com/nodegroup": f"gpu-{shape.instance_type.replace('.', '-')}",
        "feature.node.kubernetes.io/kernel-version.full": "6.1.112-124.190.amzn2023.x86_64",
        "feature.node.kubernetes.io/kernel-version.major": "6",
        "feature.node.kubernetes.io/kernel-version.minor": "1",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/system-os_release.ID": "amzn",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "2023",
        **{f"feature.node.kubernetes.io/cpu-cpuid.{flag}": "true" for flag in CPU_FLAGS},
    }
    if shape.label_key == "gpu-type":
        # hand-labelled (or by gpu-class's labeller): no GPU Operator on these nodes
        labels.update({"gpu-type": shape.product, "gpu-class.io/gpu-count": str(shape.gpus),
                       "gpu-class.io/gpu-memory-mib": str(shape.memory_mib)})
    else:
        labels.update({
            "nvidia.com/gpu.product": shape.product, "nvidia.com/gpu.count": str(shape.gpus),
            "nvidia.com/gpu.memory": str(shape.memory_mib), "nvidia.com/gpu.family": shape.family,
            "nvidia.com/gpu.compute.major": str(shape.compute[0]),
            "nvidia.com/gpu.compute.minor": str(shape.compute[1]),
            "nvidia.com/gpu.machine": shape.instance_type, "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.replicas": str(shape.replicas),
            "nvidia.com/gpu.sharing-strategy": "time-slicing" if shape.replicas > 1 else "none",
            "nvidia.com/cuda.driver.major": "550", "nvidia.com/cuda.driver.minor": "127",
            "nvidia.com/cuda.driver.rev": "08", "nvidia.com/cuda.runtime.major": "12",
            "nvidia.com/cuda.runtime.minor": "4", "nvidia.com/gfd.timestamp": "1732093200",
            "nvidia.com/mig.capable": "true" if shape.family in ("ampere", "hopper") else "false",
            "nvidia.com/mig.strategy": "mixed" if shape.mig else "single",
            "nvidia.com/mps.capable": "false",
            **{f"nvidia.com/gpu.deploy.{c}": "true" for c in (
                "container-toolkit", "dcgm", "dcgm-exporter", "device-plugin", "driver",
                "gpu-feature-discovery", "node-status-exporter", "operator-validator")},
        })
    gpus = 0 if shape.mig else shape.gpus * shape.replicas
    resources = {"cpu": "95690m", "ephemeral-storage": "1846200142241", "hugepages-1Gi": "0",
                 "hugepages-2Mi": "0", "memory": "1046257084Ki", "pods": "737"}
    gpu_resources = {"nvidia.com/gpu": str(gpus)}
    if shape.mig:
        gpu_resources["nvidia.com/mig-1g.5gb"] = str(shape.gpus * 7)
    taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    if cordoned:
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": TS})
    if not ready:
        taints.append({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": TS})
    ip = f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}"
    node: JsonObj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"{index:08x}-5d1e-4a6b-9c2f-0e1d2c3b4a59",
            "resourceVersion": str(1_000_000 + index),
            "creationTimestamp": "2025-10-01T00:00:00Z",
            "labels": labels,
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": ip,
                "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-0{index:016x}"}),
                "nfd.node.kubernetes.io/feature-labels": ",".join(f"cpu-cpuid.{f}" for f in CPU_FLAGS),
                "nfd.node.kubernetes.io/extended-resources": "",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "podCIDR": f"100.{64 + index // 65536 % 64}.{index // 256 % 256}.0/24",
            "providerID": f"aws:///{zone}/i-0{index:016x}",
            "taints": taints,
            **({"unschedulable": True} if cordoned else {}),
        },
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name},
                          {"type": "InternalDNS", "address": name}],
            "allocatable": {**resources, **gpu_resources},
            "capacity": {**resources, **gpu_resources},
            "conditions": [
                _condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                _condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                _condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                _condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")
                if ready else _condition("Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."),
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": [{"names": [f"{image}@sha256:{index % 97:02x}{n:062x}", f"{image}:v{n}.{index % 3}"],
                        "sizeBytes": size} for n, (image, size) in enumerate(IMAGES)],
            "nodeInfo": {
                "architecture": "amd64", "bootID": f"{index:08x}-77aa-4bb1-8cc2-9dd3e4f5a6b7",
                "containerRuntimeVersion": "containerd://1.7.23", "kernelVersion": "6.1.112-124.190.amzn2023.x86_64",
                "kubeProxyVersion": "v1.33.5-eks-113cf36", "kubeletVersion": "v1.33.5-eks-113cf36",
                "machineID": f"ec2{index:029x}", "operatingSystem": "linux",
                "osImage": "Amazon Linux 2023.6.20241111", "systemUUID": f"ec2{index:05x}-aaaa-bbbb-cccc-dddddddddddd",
            },
        },
    }
    return node


def make_fleet(count: int) -> list[JsonObj]:
    """`count` GPU nodes mixing FLEET's shapes; about 3% not ready and 2% cordoned."""
    shapes = list(_smooth_round_robin([s.weight for s in FLEET], count))
    return [
        make_gpu_node(i, FLEET[s], ready=i % 37 != 5, cordoned=i % 53 == 7)
        for i, s in enumerate(shapes)
    ]


def make_node_list(nodes: list[JsonObj]) -> JsonObj:
    """`kubectl get nodes -o yaml`: a v1 List whose items carry their kind."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": nodes}


# ------------------------------------------------------------------------------------------ Pods in the cluster

def make_cluster_pod(index: int, node_name: str | None, gpus: int, phase: str = "Running") -> JsonObj:
    """A running Pod as a list/watch returns it: compact, but with the fields a real one has."""
    app = f"svc-{index % 400}"
    container: JsonObj = {
        "name": "main", "image": f"registry.example/{app}:1.{index % 9}",
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "REGION", "value": "us-east-1"}],
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    if gpus:
        container["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    spec: JsonObj = {
        "containers": [container], "restartPolicy": "Always", "serviceAccountName": "default",
        "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler", "priority": 0,
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ],
    }
    if gpus:
        spec["tolerations"].append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    if node_name:
        spec["nodeName"] = node_name
    status: JsonObj = {"phase": phase, "qosClass": "Burstable"}
    if node_name:
        status.update(hostIP="10.0.0.1", podIP=f"100.64.{index // 256 % 256}.{index % 256}", startTime=TS,
                      conditions=[{"type": t, "status": "True", "lastTransitionTime": TS}
                                  for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")])
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": f"{app}-5f7d8c9b4-{index:06x}", "namespace": f"team-{index % 60}",
            "labels": {"app": app, "pod-template-hash": "5f7d8c9b4"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-5f7d8c9b4",
                                 "uid": f"{index % 400:08x}-1111-4222-8333-444455556666",
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": spec,
        "status": status,
    }


def make_cluster_pods(count: int, gpu_pods: int, node_names: list[str]) -> Iterator[JsonObj]:
    """`count` Pods: `gpu_pods` of them hold 1-8 GPUs on a node; about 2% are pending, 3% finished."""
    for i in range(count):
        if i % 50 == 1:
            yield make_cluster_pod(i, None, 0, "Pending")
            continue
        node = node_names[i % len(node_names)]
        gpus = (1, 1, 2, 4, 8)[i % 5] if i < gpu_pods else 0
        yield make_cluster_pod(i, node, gpus, "Succeeded" if i % 33 == 2 else "Running")
