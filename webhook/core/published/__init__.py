"""What a webhook publishes for others to check it by: the catalog and scheduler settings for users' tools
(`public`), and the tenant boundary's table for the API server's ValidatingAdmissionPolicy (`boundary`).

May import the cluster view and the catalog; the admission decision does not import it, nor it the decision.
"""
