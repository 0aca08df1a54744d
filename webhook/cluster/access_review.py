"""The two reviews behind /metrics (serving/metrics_auth.py decides from them): TokenReview and SubjectAccessReview.

The server's own account needs `create` on both (the ClusterRole system:auth-delegator, bound in the
install). Whatever keeps the API server from answering (no connection, a timeout, a 5xx, or a 401/403
to our own account) is ReviewUnavailable: the scrape is refused with 503 and the reason logged.
"""

from __future__ import annotations

import logging
from typing import Any

import kubernetes
import urllib3

from ..core.access.metrics_gate import Identity, ReviewUnavailable
from .kube_config import check_kube_config

log = logging.getLogger("gpu_class.metrics_auth")

REVIEW_TIMEOUT_SECONDS = 5.0  # a scrape's own timeout is 10 s by default: answer before Prometheus gives up


class ApiAccessReviewer:
    def __init__(self, api_client: Any) -> None:
        self.authn = kubernetes.client.AuthenticationV1Api(api_client)
        self.authz = kubernetes.client.AuthorizationV1Api(api_client)

    def authenticate(self, token: str) -> Identity | None:
        body = kubernetes.client.V1TokenReview(spec=kubernetes.client.V1TokenReviewSpec(token=token))
        status = self._call("TokenReview", self.authn.create_token_review, body).status
        if status is None or not status.authenticated or status.user is None or not status.user.username:
            return None
        user = status.user
        extra = {k: tuple(v or ()) for k, v in (user.extra or {}).items()}
        return Identity(user.username, user.uid or "", tuple(user.groups or ()), extra)

    def authorize(self, identity: Identity, verb: str, path: str) -> bool:
        spec = kubernetes.client.V1SubjectAccessReviewSpec(
            user=identity.username, uid=identity.uid or None, groups=list(identity.groups) or None,
            extra={k: list(v) for k, v in identity.extra.items()} or None,
            non_resource_attributes=kubernetes.client.V1NonResourceAttributes(path=path, verb=verb))
        body = kubernetes.client.V1SubjectAccessReview(spec=spec)
        status = self._call("SubjectAccessReview", self.authz.create_subject_access_review, body).status
        return bool(status is not None and status.allowed and not status.denied)

    @staticmethod
    def _call(kind: str, create: Any, body: Any) -> Any:
        try:
            return create(body, _request_timeout=REVIEW_TIMEOUT_SECONDS)
        except kubernetes.client.ApiException as exc:
            hint = (": the server's service account needs the ClusterRole system:auth-delegator"
                    if exc.status in (401, 403) else "")
            raise ReviewUnavailable(f"{kind} answered {exc.status} {exc.reason}{hint}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ReviewUnavailable(f"{kind} failed: {exc}") from None


def access_reviewer(kubeconfig: str | None) -> ApiAccessReviewer:
    configuration = check_kube_config(kubeconfig)
    # a failed review is a 503 for this scrape and the next scrape asks again: do not retry inside it
    configuration.retries = False
    return ApiAccessReviewer(kubernetes.client.ApiClient(configuration))
