"""`python -m bench stall`: honest Pod creates on the real API server while slow and oversized requests attack the
webhook's port, and what the tenant boundary's ValidatingAdmissionPolicy adds to a create.

stall.py runs it on the local control plane; attack.py holds the attacking clients and the readiness probe
(sockets only, in a process of their own); stall_model.py the records, the arithmetic and the report (pure).
It imports bench.common and no other experiment.
"""
