"""`python -m bench single`: single Pods one after another where the class is most of the nodes, on each scheduling path."""
