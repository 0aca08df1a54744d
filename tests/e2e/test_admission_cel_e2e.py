"""The admission expressions' cases (tests/test_deploy.py) judged by the real API server's CEL.

tests/test_deploy.py evaluates the webhook's matchConditions and the backstop's matchConditions,
variables and validations with cel-python, a different CEL engine from the API server's. Here each
case's Pod is created with a server-side dry run (`dryRun=All`: admission runs, nothing is stored)
into namespaces of this module's own, against copies of the installed expressions
(local_cluster.render_install) that select only those namespaces:

- the webhook's matchConditions, as a MutatingAdmissionPolicy that adds a label with a value Pod
  validation refuses. Both run at the webhook's stage, before the Pod is validated, so the Pods the
  webhook exists to complete (a GPU in requests only: invalid until it sets the limit) are judged
  too: the marker is in the API server's answer exactly when the conditions let the Pod through.
- the backstop's matchConditions, as a ValidatingAdmissionPolicy that refuses whatever they match;
- the backstop itself, matchConditions, variables and validations unchanged.

The namespaces carry each case's labels but `gpu-class.io/inject`, so neither the webhook nor the
installed backstop sees them; which namespaces the backstop selects is a label selector, not CEL,
and stays with tests/test_deploy.py. Every case must get from the API server the answer cel-python
gives it, and the answer the table expects where the namespace selector has no say. The cases run in
one batch on the session's cluster.
"""

from __future__ import annotations

import copy
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator, Mapping

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

import local_cluster
from kubeobjects import make_namespace, wait_for
from tests.test_deploy import (
    BACKSTOP_CASES, MATCH_CASES, OPTED_IN, BackstopCase, BackstopOutcome, MatchCase, evaluate_cel, policy_and_binding,
    policy_activation, policy_outcome, selects, the_webhook, webhook_activation,
)

Obj = dict[str, Any]
LABEL = "cel-e2e.gpu-class.io/role"  # the namespaces of each copy
MARK = "cel-e2e.gpu-class.io/sent"
MARK_VALUE = "sent-to-the-webhook!"  # not a valid label value: Pod validation names it in its refusal
INJECT = "gpu-class.io/inject"
WEBHOOK_COPY, CONDITIONS_COPY, BACKSTOP_COPY = "cel-e2e-webhook-conditions", "cel-e2e-backstop-conditions", \
    "cel-e2e-backstop"


def _param(param: Any) -> tuple[str, Any]:
    return str(param.id), param.values[0]


MATCH = dict(map(_param, MATCH_CASES))
BACKSTOP = dict(map(_param, BACKSTOP_CASES))


def _rules() -> Obj:
    return {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                               "resources": ["pods"]}]}


def _copies(install: list[Obj]) -> list[tuple[str, Obj, Obj]]:
    """(kind, policy, binding) of each copy, from the objects as installed."""
    hook = the_webhook(install)
    backstop, binding = policy_and_binding(install)

    def selecting(role: str) -> Obj:
        return {**_rules(), "namespaceSelector": {"matchLabels": {LABEL: role}}}

    marker = {"patchType": "JSONPatch", "jsonPatch": {"expression": (
        f'[JSONPatch{{op: "add", path: "/metadata/labels/{MARK.replace("/", "~1")}", value: "{MARK_VALUE}"}}]')}}
    webhook_copy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
                    "metadata": {"name": WEBHOOK_COPY},
                    "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "Never",
                             "matchConstraints": selecting("webhook"),
                             "matchConditions": hook["matchConditions"], "mutations": [marker]}}
    conditions_copy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
                       "metadata": {"name": CONDITIONS_COPY},
                       "spec": {"failurePolicy": "Fail", "matchConstraints": selecting("conditions"),
                                "matchConditions": backstop["spec"]["matchConditions"],
                                "validations": [{"expression": "false", "reason": "Forbidden",
                                                 "message": "the backstop's matchConditions hold"}]}}
    backstop_copy = copy.deepcopy(backstop)
    backstop_copy["metadata"] = {"name": BACKSTOP_COPY}
    backstop_copy["spec"]["matchConstraints"] = selecting("backstop")
    out = []
    for kind, policy, actions in (("MutatingAdmissionPolicy", webhook_copy, None),
                                  ("ValidatingAdmissionPolicy", conditions_copy, ["Deny"]),
                                  ("ValidatingAdmissionPolicy", backstop_copy, binding["spec"]["validationActions"])):
        name = policy["metadata"]["name"]
        spec: Obj = {"policyName": name, **({"validationActions": actions} if actions else {})}
        out.append((kind, policy, {"apiVersion": "admissionregistration.k8s.io/v1", "kind": f"{kind}Binding",
                                   "metadata": {"name": name}, "spec": spec}))
    return out


class Namespaces:
    """A namespace per (copy, labels of a case's namespace), made when first asked for (with its default
    ServiceAccount, which the Pods name)."""

    def __init__(self, core: kubernetes.client.CoreV1Api) -> None:
        self.core = core
        self.made: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}

    def of(self, role: str, namespace: Obj) -> str:
        labels = {k: v for k, v in (namespace["metadata"].get("labels") or {}).items()
                  if k != INJECT and k != "kubernetes.io/metadata.name"}
        key = (role, tuple(sorted(labels.items())))
        if key not in self.made:
            self.made[key] = make_namespace(self.core, f"cel-{role}", labels={**labels, LABEL: role})
        return self.made[key]

    def delete(self) -> None:
        for name in self.made.values():
            self.core.delete_namespace(name)


def _as_sent(pod: Obj, namespace: str) -> Obj:
    """The case's Pod, into the namespace. A mirror Pod is as the kubelet writes one: on its node and
    naming no ServiceAccount (Pod validation and the ServiceAccount admission plugin refuse it
    otherwise, before a policy can see it)."""
    sent = copy.deepcopy(pod)
    sent["metadata"]["namespace"] = namespace
    if "kubernetes.io/config.mirror" in (sent["metadata"].get("annotations") or {}):
        sent["spec"].pop("serviceAccountName", None)
        sent["spec"]["nodeName"] = "cel-e2e-node"
    return sent


def _answer(core: kubernetes.client.CoreV1Api, namespace: str, pod: Obj) -> tuple[int, str]:
    """The API server's status code and message for a dry-run create."""
    try:
        core.create_namespaced_pod(namespace, pod, dry_run="All", _preload_content=False)
    except ApiException as e:
        return int(e.status), str(json.loads(e.body or "{}").get("message", e.body))
    return 201, ""


def _sent(answer: tuple[int, str]) -> bool:
    """Whether the webhook's conditions matched: the marker they add is in Pod validation's refusal."""
    status, message = answer
    assert status in (201, 422), f"neither admitted nor refused by Pod validation: {status} {message}"
    return f'"{MARK_VALUE}"' in message


def _denied_by(policy: str, answer: tuple[int, str]) -> bool:
    status, message = answer
    if status == 201:
        return False
    assert status == 403 and f"ValidatingAdmissionPolicy '{policy}'" in message, f"{status} {message}"
    return True


@pytest.fixture(scope="module")
def install(cluster: local_cluster.Cluster) -> list[Obj]:
    """deploy/ as the local cluster installs it."""
    return local_cluster.render_install(cluster)


@pytest.fixture(scope="module")
def server_answers(install: list[Obj], api_client: kubernetes.client.ApiClient,
                   core: kubernetes.client.CoreV1Api) -> Iterator[dict[str, Any]]:
    """Every case's answer from the API server: the webhook's conditions (True: the Pod is sent), and
    the backstop's outcome."""
    admission = kubernetes.client.AdmissionregistrationV1Api(api_client)
    made = _copies(install)
    namespaces = Namespaces(core)
    for kind, policy, binding in made:
        _delete(admission, kind, policy["metadata"]["name"])
        _create(admission, kind)(policy)
        _create(admission, f"{kind}Binding")(binding)
    try:
        def match(case: MatchCase) -> bool:
            ns = namespaces.of("webhook", OPTED_IN)
            return _sent(_answer(core, ns, _as_sent(case.pod, ns)))

        def backstop(case: BackstopCase) -> BackstopOutcome:
            matched_ns, outcome_ns = namespaces.of("conditions", case.namespace), namespaces.of("backstop", case.namespace)
            if not _denied_by(CONDITIONS_COPY, _answer(core, matched_ns, _as_sent(case.pod, matched_ns))):
                return "not-matched"
            refused = _denied_by(BACKSTOP_COPY, _answer(core, outcome_ns, _as_sent(case.pod, outcome_ns)))
            return "refused" if refused else "admitted"

        namespaces.of("webhook", OPTED_IN)
        for case in BACKSTOP.values():  # made before the threads ask for them
            namespaces.of("conditions", case.namespace), namespaces.of("backstop", case.namespace)
        # the API server loads a new policy a moment after it is stored: wait until each copy acts
        wait_for("the webhook conditions' copy to act", lambda: match(MATCH["class-annotation"]))
        wait_for("the backstop's copies to act", lambda: backstop(BACKSTOP["gpu-pod-before-patch-refused"]) == "refused")
        with ThreadPoolExecutor(max_workers=8) as pool:
            matched = dict(zip(MATCH, pool.map(match, MATCH.values())))
            outcomes = dict(zip(BACKSTOP, pool.map(backstop, BACKSTOP.values())))
        yield {"match": matched, "backstop": outcomes}
    finally:
        for kind, policy, _ in made:
            _delete(admission, kind, policy["metadata"]["name"])
        namespaces.delete()


def _create(admission: Any, kind: str) -> Callable[[Obj], Any]:
    return getattr(admission, "create_" + _snake(kind))  # type: ignore[no-any-return]


def _delete(admission: Any, kind: str, name: str) -> None:
    for k in (f"{kind}Binding", kind):
        try:
            getattr(admission, "delete_" + _snake(k))(name)
        except ApiException as e:
            if e.status != 404:
                raise


def _snake(kind: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in kind).lstrip("_")


@pytest.mark.parametrize("case_id", list(MATCH))
def test_webhook_match_conditions_on_the_api_server(install: list[Obj], server_answers: Mapping[str, Any],
                                                    case_id: str) -> None:
    case = MATCH[case_id]
    conditions = the_webhook(install)["matchConditions"]
    by_cel_python = all(evaluate_cel(c["expression"], webhook_activation(case.pod)) for c in conditions)
    assert (server_answers["match"][case_id], by_cel_python) == (case.sent, case.sent)


@pytest.mark.parametrize("case_id", list(BACKSTOP))
def test_backstop_expressions_on_the_api_server(install: list[Obj], server_answers: Mapping[str, Any],
                                                case_id: str) -> None:
    case = BACKSTOP[case_id]
    policy, binding = policy_and_binding(install)
    by_cel_python = policy_outcome(policy, binding, policy_activation(case.pod, case.namespace))
    by_server = server_answers["backstop"][case_id]
    assert by_server == by_cel_python
    # where the namespace selector (a label selector, not CEL) lets the Pod in, the table's answer
    if selects(policy["spec"]["matchConstraints"]["namespaceSelector"], case.namespace["metadata"]["labels"]):
        assert by_server == case.outcome
