"""`python -m bench placement`: do Pods land where their class promised, on the real scheduler, at scale?

placement runs it; placement_model is its fleet, streams and judge (pure); placement_cluster its side on the local
control plane. `python -m bench groups` (bench/groups) builds on both.
"""
