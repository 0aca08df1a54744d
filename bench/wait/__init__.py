"""`python -m bench wait`: what Pods waiting for their best type (gpu-class.io/max-wait) cost the scheduler."""
