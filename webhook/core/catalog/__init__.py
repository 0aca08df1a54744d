"""The catalog: GPU types by their facts (memory, compute capability, how nodes name them), the classes over them,
and their loading from YAML with its validation; the built-in catalog.yaml; quantities. What an install publishes
of its catalog for users' tools is in `published`, not here.

- model.py: the data (GpuType, Need, GpuClass, Catalog) and the answers the decision asks of it
- matching.py: how node labels and DRA device attributes name types (exact or glob), indexed as a Recognition
- profiles.py: the strategies a class orders its types by, and the strict scheduler's profile for each
- wait.py: a wait for the best type (a class's maxWait, a Pod's gpu-class.io/max-wait)
- loading.py: the YAML parsed and validated into a Catalog (load_catalog_text, load_catalog_file, load_default_catalog)
- fields.py: the readers of single values that loading uses, whose errors name file and line
- claims.py: the check at loading that no node or device could be two types at once
- builtin.py: the built-in catalog.yaml's text
- table.py: `gpuclass catalog -o table`; quantity.py: Kubernetes quantities as MiB

Imports nothing of webhook but itself: every other room reads the catalog.
"""
