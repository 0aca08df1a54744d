"""The end-to-end tier: one real control plane per test session (tests/e2e/local-cluster), a namespace per test.

Set GPUCLASS_E2E_DIR to put the cluster's directory (logs, kubeconfig) there rather than in a
temporary directory, and GPUCLASS_E2E_KEEP=1 to leave the cluster running after the session (a
second run then reuses it: `tests/e2e/local-cluster down DIR` stops it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import kubernetes
import pytest

import local_cluster
from fleet import CPU_NODES, FLEET
from kubeobjects import create_node, delete_nodes, force_delete_pods, make_namespace, pod_removals, running_cluster

CLUSTER = pytest.StashKey[local_cluster.Cluster]()


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[local_cluster.Cluster]:
    directory = Path(os.environ.get("GPUCLASS_E2E_DIR") or tmp_path_factory.mktemp("cluster"))
    with running_cluster(directory, keep=bool(os.environ.get("GPUCLASS_E2E_KEEP"))) as c:
        request.config.stash[CLUSTER] = c
        yield c
        del request.config.stash[CLUSTER]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    """A failed test's report names every Pod deleted or evicted while it ran, and by whom (the API server's
    audit log): a Pod a test waits for can be taken by a controller, and CI keeps no cluster to look in."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    cluster = item.config.stash.get(CLUSTER, None)
    if report.failed and cluster is not None and cluster.audit_log.exists():
        removals = pod_removals(cluster.audit_log.read_text(errors="replace"), call.start, call.stop)
        report.sections.append(("Pods deleted or evicted meanwhile (audit log)", "\n".join(removals) or "none"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def api_client(cluster: local_cluster.Cluster) -> kubernetes.client.ApiClient:
    return kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture(scope="session")
def core(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client)


@pytest.fixture
def namespace(core: kubernetes.client.CoreV1Api) -> Iterator[str]:
    """An opted-in namespace of the test's own, deleted afterwards with what it holds."""
    name = make_namespace(core, "e2e", labels={"gpu-class.io/inject": "enabled"})
    yield name
    force_delete_pods(core, name)
    core.delete_namespace(name)




@pytest.fixture
def plain_namespace(core: kubernetes.client.CoreV1Api) -> Iterator[str]:
    """A namespace of the test's own that has not opted in: the webhook leaves its Pods alone."""
    name = make_namespace(core, "e2e-plain")
    yield name
    force_delete_pods(core, name)
    core.delete_namespace(name)


@pytest.fixture
def webhook_down(cluster: local_cluster.Cluster) -> Iterator[None]:
    """The webhook stopped for the test (the API server fails open on it), started again after."""
    cluster.stop("gpuclass")
    try:
        yield
    finally:
        local_cluster.start_webhook(cluster)


@pytest.fixture(scope="session")
def fleet(core: kubernetes.client.CoreV1Api) -> Iterator[None]:
    """The shared GPU nodes (fleet.py) and a CPU-only node, for the whole session."""
    names = [n.name for n in FLEET] + list(CPU_NODES)
    delete_nodes(core, names)
    for n in FLEET:
        create_node(core, n.name, {**n.labels, "topology.kubernetes.io/zone": n.zone}, gpus=n.gpus, taints=n.taints)
    for name in CPU_NODES:
        create_node(core, name, {"topology.kubernetes.io/zone": "zone-a"}, taints=())
    yield
    delete_nodes(core, names)
