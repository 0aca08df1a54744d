"""The webhook's own certificates when it manages them (tls.mode webhook-managed), pure.

rotation.py decides what to create or renew from the certificates held and the clock; issue.py builds
and reads the certificates (PEM in, PEM out). Neither reads nor writes the cluster or files: the keeper
in webhook/cluster/tls_keeper.py does. May import only the standard library and `cryptography`.
"""
