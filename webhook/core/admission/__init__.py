"""The admission decision: what a Pod asks, read once, whole (ask.py, with shape.py and annotations.py), then
the steps `planner.decide` runs in their order, a module each: policy (scope and class), provenance (what was
decided before), need (the asked values checked, with claims.py for the Pod's own resource claims), route (scheduler and wait), fit (the class's types that can
take the Pod, with groups.py for a group's scope), order (their rank as weights), unplaced (the branch for a Pod
no type can take), kueue (Kueue's flavor) and place (the Placement). decision.py holds what they answer, words.py
how their messages read; patch.py writes the Placement as a JSON Patch, review.py the AdmissionReview around it,
workload.py decides a workload Kueue queues at its pod templates. `planner.plan` is the entry.

May import the cluster view and the catalog, nothing above them.
"""
