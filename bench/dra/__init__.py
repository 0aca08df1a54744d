"""`python -m bench dra`: a class's order on GPUs published through DRA, on the real control plane."""
