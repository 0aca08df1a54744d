"""After a burst of node changes the extender decides on a view that has caught up: a stream of class
`high` Pods started 10 s after the burst lands entirely on the best type with room.

The burst is bench/live_burst/live_burst.py's, smaller: 2,000 nodes (6,000 writes, about a minute on 2 cores),
the H100 nodes written last, so a view still behind the burst lacks them and the extender, seeing
no H100 with room, lets the Pods onto A100. `python -m bench live_burst burst` measures 5,000 and
15,000 nodes.
"""

from __future__ import annotations

import time
from collections import Counter

import kubernetes

import local_cluster
from bench.live_burst import live_burst
from kubeobjects import force_delete_pods, make_pod, wait_bound

BURST_NODES = 2000
PODS = 20  # one GPU each: the three H100 nodes of 8 GPUs hold them only if all three are in the view


def test_a_stream_of_high_pods_after_a_burst_lands_on_h100(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    selector = {"gpu-class-e2e/burst": namespace}  # the Pods may use only this burst's nodes
    nodes = live_burst.layout(BURST_NODES, prefix=f"{namespace}-", best_last=True)
    try:
        live_burst.write_burst(core, nodes, selector)
        time.sleep(10)
        placed = {}
        for i in range(PODS):
            pod = make_pod(f"high-{i}", gpu_class="high", scheduler=local_cluster.EXTENDER_SCHEDULER)
            pod["spec"]["nodeSelector"] = selector
            core.create_namespaced_pod(namespace, pod)
            placed[pod["metadata"]["name"]] = wait_bound(core, namespace, pod["metadata"]["name"])
        product = {n.name: n.product for n in nodes}
        assert Counter(product[node] for node in placed.values()) == {live_burst.H100: PODS}, placed
    finally:
        force_delete_pods(core, namespace)
        live_burst.delete_nodes(core, nodes)
