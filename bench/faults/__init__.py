"""`python -m bench faults`: gpu-class under load and faults on the real control plane.

faults runs it; faultload makes the load, faultcount keeps the books, replicas runs the servers behind haproxy.
"""
