"""`python -m bench`, the main suite: one `gpuclass serve` on loopback under the load the API server puts on it.

Load and CPU (loadgen, measure), idle connections (idle), connections over workers (spread), the app's steps
(breakdown), the inventory's build and first sync (inventory_cost, live_sync); run drives it, report writes RESULTS.md.
"""
