"""`python -m bench groups`: does every group of Pods run on one GPU type, on the real scheduler?"""
