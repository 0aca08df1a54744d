"""A workload's life after its Pods are bound: moving up to a better type when one frees (the upgrader's
decisions), and the Lease that keeps one upgrader acting at a time.

May import scheduling, the admission decision, the cluster view and the catalog.
"""
