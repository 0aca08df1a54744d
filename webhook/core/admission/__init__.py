"""The admission decision: what a Pod asks (read once, whole), its namespace's policy, what was decided before
(provenance), the fit of its class's types, their order, groups, Kueue's workloads, the patch, and the
AdmissionReview around it. `planner.plan` is the entry; its steps run in the order `planner.decide` shows.

May import the cluster view and the catalog, nothing above them.
"""
