"""Scheduling after admission: the scheduler extender's filter and scores, which order a Pod's nodes by the
same type order the admission decision wrote.

May import the admission decision, the cluster view and the catalog.
"""
