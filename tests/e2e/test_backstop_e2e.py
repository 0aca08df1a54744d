"""The fail-safe: with the webhook down, the ValidatingAdmissionPolicy refuses the Pods it would have placed."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

import local_cluster
from fleet import TYPE_OF
from kubeobjects import TYPES, make_pod, read_pod, wait_bound

pytestmark = pytest.mark.usefixtures("fleet")


def test_backstop_refuses_unplaced_class_pods_until_the_webhook_is_back(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str, plain_namespace: str,
        webhook_down: None) -> None:
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, make_pod("train", gpu_class="high"))
    assert refused.value.status == 403
    assert "ValidatingAdmissionPolicy 'gpu-class.io-placement'" in refused.value.body
    assert "gpu-class did not place this Pod (webhook down or bypassed)" in refused.value.body

    # Not opted in: the backstop does not apply, and the Pod is created as written.
    core.create_namespaced_pod(plain_namespace, make_pod("train", gpu_class="high"))
    assert TYPES not in read_pod(core, plain_namespace, "train")["metadata"]["annotations"]

    local_cluster.start_webhook(cluster)
    core.create_namespaced_pod(namespace, make_pod("train", gpu_class="high"))
    assert read_pod(core, namespace, "train")["metadata"]["annotations"][TYPES] == "H100,A100-40GB"
    assert TYPE_OF[wait_bound(core, namespace, "train")] == "H100"
