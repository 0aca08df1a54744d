"""`gpuclass review`: the AdmissionReview the API server would send for a Pod."""

from __future__ import annotations

import argparse
import json
import uuid
from typing import TYPE_CHECKING, Any

from .common import Command

if TYPE_CHECKING:
    from .common import Subparsers


def add_parser(sub: Subparsers) -> None:
    r = sub.add_parser("review", help="print an AdmissionReview for a Pod, as the API server would send it")
    r.add_argument("pod", metavar="POD.yaml")
    r.add_argument("--namespace", default=None)


def admission_request(pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    metadata = pod.get("metadata") or {}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": metadata.get("name", ""),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "gpuclass-cli"},
            "object": {**pod, "metadata": {**metadata, "namespace": namespace}},
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def _pod_namespace(pod: dict[str, Any], given: str | None) -> str:
    return given or str((pod.get("metadata") or {}).get("namespace") or "default")


def run(args: argparse.Namespace) -> int:
    from ..cluster.loading import read_pod

    pod = read_pod(args.pod)
    print(json.dumps(admission_request(pod, _pod_namespace(pod, args.namespace))))
    return 0


COMMAND = Command("review", add_parser, run)
