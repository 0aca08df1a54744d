"""What the node labeller computes, pure: nvidia-smi's output parsed, and the node labels made from it.
webhook/cluster/labeller.py runs nvidia-smi and writes the labels.

Imports nothing of webhook but itself.
"""
