"""Who may read what the servers expose beside admission, pure: /metrics checked as Kubernetes components check it
(a TokenReview, then a SubjectAccessReview), decided from the API server's answers, which are kept briefly.
webhook/cluster/access_review.py asks the API server; webhook/serving serves the answer.

Imports nothing of webhook but itself.
"""
