"""The catalog: GPU types by their facts (memory, compute capability, how nodes name them), the classes over them,
and their loading from YAML with its validation; the built-in catalog.yaml; quantities; and what an install
publishes of its catalog for users' tools is in `published`, not here.

Imports nothing of webhook but itself: every other room reads the catalog.
"""
