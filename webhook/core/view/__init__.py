"""The cluster view: what the cluster holds now, as values the decision reads. Nodes and their GPU types, the Pods
that hold GPUs, groups, Karpenter's NodePools, DRA's ResourceSlices and DeviceClasses (and the DeviceClasses of the
claims and templates Pods may name), namespaces' policies, and the immutable snapshot of all of it a decision
takes; the filter that judges raw Pod watch lines.

Fed by the watches of webhook/cluster (watch.py and its *_watch.py). May import the catalog, nothing else of webhook.
"""
