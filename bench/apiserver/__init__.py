"""`python -m bench apiserver`: what gpu-class costs a Pod create through the real API server."""
