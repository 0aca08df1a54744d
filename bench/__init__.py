"""Benchmarks for gpu-class: the real `gpuclass serve` under the load the API server puts on it.

Run from the repository root:  .venv/bin/python -m bench   (see bench/README.md).
"""
