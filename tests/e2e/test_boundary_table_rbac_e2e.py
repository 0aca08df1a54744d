"""A tenant cannot change the tenant boundary, on the real API server (docs/operators/security.md, "Marks").

The boundary (ValidatingAdmissionPolicy gpu-class.io-boundary, failing closed) judges by the BoundaryTable
gpu-class-system/gpu-class-boundary, which only the webhook's service account writes (Role gpu-class-publish).
Tenants are modelled as platform teams make them: a user (impersonated) bound by a RoleBinding in its own
namespace to the built-in ClusterRole `admin`, or `edit`, and nothing cluster-wide beyond what every signed-in
user has. For each such tenant the API server itself is asked, and must answer 403 (RBAC's refusal, naming the
user and verb), to: write the table in every way a client can (create, replace, three kinds of patch, delete,
deletecollection), the table reading the same afterwards (its data, read as the cluster's admin);
write a table in its own namespace, or grant itself the right to; change or delete the boundary's policies and
bindings; change its namespace's `gpu-class.io/allowed-classes` or `gpu-class.io/inject`. And a table with every
class opened up, put in the tenant's namespace by an administrator (as an aggregated role that handed tenants
BoundaryTables would let them), leaves the tenant's Pods judged by the install's table: with the webhook stopped,
a Pod pinned to H100 in a namespace allowed only economy is refused by gpu-class.io-boundary, while one pinned to
economy's T4 is admitted.

Nothing here changes what the webhook's view holds (no node, DeviceClass or NodePool is written), so the table's data
stays what the webhook wrote unless the tenant wrote it (its resourceVersion moves without that: each worker
renews its own mark among the table's writers every minute, webhook/core/published/writers.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

import local_cluster
from kubeobjects import force_delete_pods, make_namespace, make_pod, wait_for

GROUP, VERSION, PLURAL, KIND = "gpu-class.io", "v1alpha1", "boundarytables", "BoundaryTable"
SYSTEM = local_cluster.WEBHOOK_NAMESPACE
TABLE = "gpu-class-boundary"
ROLES = ("admin", "edit")
PRODUCT = "nvidia.com/gpu.product"
H100, T4 = "NVIDIA-H100-80GB-HBM3", "Tesla-T4"  # the fleet's labels of a high and an economy product
MERGE, JSON_PATCH, APPLY = ("application/merge-patch+json", "application/json-patch+json",
                            "application/apply-patch+yaml")


@dataclass(frozen=True)
class Tenant:
    """A user bound to the built-in ClusterRole `role` in `namespace` (allowed only economy), and its API client."""

    role: str
    user: str
    namespace: str
    api: kubernetes.client.ApiClient


def tenant_client(cluster: local_cluster.Cluster, user: str) -> kubernetes.client.ApiClient:
    """The admin's connection, acting as `user`: the API server authorizes every request as that user (and the
    group every authenticated user is in), as if it had signed in."""
    api = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
    api.set_default_header("Impersonate-User", user)
    return api


def may_list_pods(tenant: Tenant) -> bool:
    try:
        kubernetes.client.CoreV1Api(tenant.api).list_namespaced_pod(tenant.namespace)
    except ApiException as e:
        if e.status == 403:  # the RoleBinding has not reached the API server's RBAC cache yet
            return False
        raise
    return True


@pytest.fixture(scope="module")
def tenants(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api,
            rbac: kubernetes.client.RbacAuthorizationV1Api) -> Iterator[dict[str, Tenant]]:
    made: dict[str, Tenant] = {}
    namespaces: list[str] = []
    try:
        for role in ROLES:
            namespace = make_namespace(core, f"e2e-tenant-{role}", labels={"gpu-class.io/inject": "enabled"},
                                       annotations={"gpu-class.io/allowed-classes": "economy"})
            namespaces.append(namespace)
            user = f"{role}-of-{namespace}@example.com"
            rbac.create_namespaced_role_binding(namespace, {
                "metadata": {"name": f"tenant-{role}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
            made[role] = Tenant(role, user, namespace, tenant_client(cluster, user))
            # Every refusal below means something only once the tenant holds its role.
            wait_for(f"{user} to hold {role} in {namespace}", lambda t=made[role]: may_list_pods(t))
        yield made
    finally:
        for namespace in namespaces:
            force_delete_pods(core, namespace)
            core.delete_namespace(namespace)


@pytest.fixture(scope="module")
def rbac(api_client: kubernetes.client.ApiClient) -> kubernetes.client.RbacAuthorizationV1Api:
    return kubernetes.client.RbacAuthorizationV1Api(api_client)


@pytest.fixture(scope="module")
def objects(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api_client)


def read_table(objects: kubernetes.client.CustomObjectsApi, namespace: str = SYSTEM) -> dict[str, Any]:
    return dict(objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, TABLE))


@pytest.fixture
def table(objects: kubernetes.client.CustomObjectsApi) -> dict[str, Any]:
    """The install's table as the admin reads it, once the webhook has written it."""
    def written() -> dict[str, Any] | None:
        try:
            found = read_table(objects)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return found if (found.get("data") or {}).get("class.economy") else None
    return dict(wait_for("the webhook to write the boundary's table", written, seconds=60))


def identity(table: Mapping[str, Any]) -> dict[str, str]:
    return dict(table.get("data") or {})


def opened(data: Mapping[str, str]) -> dict[str, str]:
    """The table with every class allowed every class's entries and globs: what a tenant would write."""
    every_entry = "".join(v for k, v in sorted(data.items()) if k.startswith("class."))
    every_glob = "\n".join(v for k, v in sorted(data.items()) if k.startswith("globs.") and v)
    return {k: every_entry if k.startswith("class.") else every_glob if k.startswith("globs.") else v
            for k, v in data.items()}


def refusal(call: Callable[[], object]) -> tuple[int, str]:
    """The API server's status and message for a request that must be refused; fails when it was not."""
    try:
        call()
    except ApiException as e:
        message = json.loads(e.body).get("message", e.body) if e.body else str(e.reason)
        return int(e.status), str(message)
    pytest.fail("the API server allowed it", pytrace=False)


def forbidden(user: str, verb: str, resource: str, group: str, where: str) -> str:
    """RBAC's refusal as kube-apiserver words it."""
    return f'User "{user}" cannot {verb} resource "{resource}" in API group "{group}" {where}'


# --- the table in gpu-class-system ------------------------------------------------------------------

TableWrite = Callable[[kubernetes.client.CustomObjectsApi, dict[str, Any]], object]


def _table_body(table: Mapping[str, Any], namespace: str = SYSTEM) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": TABLE, "namespace": namespace},
            "data": opened(table["data"])}


def _replace(api: kubernetes.client.CustomObjectsApi, table: dict[str, Any]) -> object:
    body = {**_table_body(table), "metadata": {"name": TABLE, "namespace": SYSTEM,
                                               "resourceVersion": table["metadata"]["resourceVersion"]}}
    return api.replace_namespaced_custom_object(GROUP, VERSION, SYSTEM, PLURAL, TABLE, body)


def _patch(content_type: str) -> TableWrite:
    def write(api: kubernetes.client.CustomObjectsApi, table: dict[str, Any]) -> object:
        economy = opened(table["data"])["class.economy"]
        body: object = ([{"op": "replace", "path": "/data/class.economy", "value": economy}]
                        if content_type == JSON_PATCH else
                        _table_body(table) if content_type == APPLY else {"data": {"class.economy": economy}})
        if content_type == APPLY:
            return api.patch_namespaced_custom_object(GROUP, VERSION, SYSTEM, PLURAL, TABLE, body,
                                                      field_manager="tenant", force=True, _content_type=content_type)
        return api.patch_namespaced_custom_object(GROUP, VERSION, SYSTEM, PLURAL, TABLE, body,
                                                  _content_type=content_type)
    return write


# id: (the verb RBAC checks, the request)
TABLE_WRITES: dict[str, tuple[str, TableWrite]] = {
    "create": ("create", lambda api, t: api.create_namespaced_custom_object(GROUP, VERSION, SYSTEM, PLURAL,
                                                                            _table_body(t))),
    "replace": ("update", _replace),
    "merge-patch": ("patch", _patch(MERGE)),
    "json-patch": ("patch", _patch(JSON_PATCH)),
    "server-side-apply": ("patch", _patch(APPLY)),
    "delete": ("delete", lambda api, t: api.delete_namespaced_custom_object(GROUP, VERSION, SYSTEM, PLURAL, TABLE)),
    "deletecollection": ("deletecollection", lambda api, t: api.delete_collection_namespaced_custom_object(
        GROUP, VERSION, SYSTEM, PLURAL)),
}


@pytest.mark.parametrize("write", TABLE_WRITES)
@pytest.mark.parametrize("role", ROLES)
def test_a_tenant_cannot_write_the_boundarys_table(
        objects: kubernetes.client.CustomObjectsApi, tenants: dict[str, Tenant], table: dict[str, Any], role: str,
        write: str) -> None:
    tenant = tenants[role]
    verb, request = TABLE_WRITES[write]
    status, message = refusal(lambda: request(kubernetes.client.CustomObjectsApi(tenant.api), table))
    assert status == 403 and forbidden(tenant.user, verb, PLURAL, GROUP, f'in the namespace "{SYSTEM}"') in message, (
        status, message)
    assert identity(read_table(objects)) == identity(table)


# --- a table of the tenant's own ------------------------------------------------------------------

def _own_table(tenant: Tenant, table: Mapping[str, Any]) -> object:
    return kubernetes.client.CustomObjectsApi(tenant.api).create_namespaced_custom_object(
        GROUP, VERSION, tenant.namespace, PLURAL, _table_body(table, tenant.namespace))


def _grant_tables(tenant: Tenant, table: Mapping[str, Any]) -> object:
    return kubernetes.client.RbacAuthorizationV1Api(tenant.api).create_namespaced_role(tenant.namespace, {
        "metadata": {"name": "boundary-tables"},
        "rules": [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["*"]}]})


def _bind_cluster_admin(tenant: Tenant, table: Mapping[str, Any]) -> object:
    return kubernetes.client.RbacAuthorizationV1Api(tenant.api).create_namespaced_role_binding(tenant.namespace, {
        "metadata": {"name": "self-cluster-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": tenant.user}]})


# id: (the request, its refusal by role: `admin` may write Roles in its namespace, but only with rights it holds)
OWN_NAMESPACE: dict[str, tuple[Callable[[Tenant, Mapping[str, Any]], object], Mapping[str, str]]] = {
    "create-a-table": (_own_table, {r: 'cannot create resource "boundarytables" in API group "gpu-class.io"'
                                    for r in ROLES}),
    "grant-itself-tables": (_grant_tables, {"admin": "is attempting to grant RBAC permissions not currently held",
                                            "edit": 'cannot create resource "roles"'}),
    "bind-itself-cluster-admin": (_bind_cluster_admin, {
        "admin": "is attempting to grant RBAC permissions not currently held",
        "edit": 'cannot create resource "rolebindings"'}),
}


@pytest.mark.parametrize("attempt", OWN_NAMESPACE)
@pytest.mark.parametrize("role", ROLES)
def test_a_tenant_cannot_write_a_table_in_its_own_namespace(
        objects: kubernetes.client.CustomObjectsApi, rbac: kubernetes.client.RbacAuthorizationV1Api,
        tenants: dict[str, Tenant], table: dict[str, Any], role: str, attempt: str) -> None:
    """deploy/ aggregates no role of its kind to admin or edit, and RBAC lets no one grant what it does not hold."""
    tenant = tenants[role]
    request, refusals = OWN_NAMESPACE[attempt]
    status, message = refusal(lambda: request(tenant, table))
    assert status == 403 and refusals[role] in message, (status, message)
    assert not objects.list_namespaced_custom_object(GROUP, VERSION, tenant.namespace, PLURAL)["items"]
    assert not rbac.list_namespaced_role(tenant.namespace).items
    assert [b.metadata.name for b in rbac.list_namespaced_role_binding(tenant.namespace).items] == [f"tenant-{role}"]


@pytest.fixture
def tables_in_tenant_namespaces(objects: kubernetes.client.CustomObjectsApi, tenants: dict[str, Tenant],
                                table: dict[str, Any]) -> Iterator[None]:
    for tenant in tenants.values():
        objects.create_namespaced_custom_object(GROUP, VERSION, tenant.namespace, PLURAL,
                                                _table_body(table, tenant.namespace))
    try:
        yield
    finally:
        for tenant in tenants.values():
            objects.delete_namespaced_custom_object(GROUP, VERSION, tenant.namespace, PLURAL, TABLE)


def pinned(name: str, product: str) -> dict[str, Any]:
    """A GPU Pod with no class, kept by its own nodeSelector to `product`'s nodes."""
    pod = make_pod(name)
    pod["spec"]["nodeSelector"] = {PRODUCT: product}
    pod["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    return pod


def test_a_table_in_the_tenants_namespace_does_not_change_how_its_pods_are_judged(
        objects: kubernetes.client.CustomObjectsApi, tenants: dict[str, Tenant], table: dict[str, Any],
        tables_in_tenant_namespaces: None, webhook_down: None) -> None:
    for tenant in tenants.values():
        assert read_table(objects, tenant.namespace)["data"]["class.economy"].count(f" {H100} ") > 0
        pods = kubernetes.client.CoreV1Api(tenant.api)
        # asked again over a few seconds: the API server's informer of the tenant's table has had time to see it
        for attempt in range(5):
            pod = pinned(f"h100-{attempt}", H100)
            status, message = refusal(lambda: pods.create_namespaced_pod(tenant.namespace, pod))
            assert status == 403 and "ValidatingAdmissionPolicy 'gpu-class.io-boundary'" in message, (status, message)
            assert f"namespace {tenant.namespace} allows GPU classes [economy]" in message, message
            time.sleep(1)
        # the tenant may create Pods, and the install's table admits one kept to economy
        pods.create_namespaced_pod(tenant.namespace, pinned("t4", T4))
    assert identity(read_table(objects)) == identity(table)


# --- the boundary's policies and bindings, and the namespace's own marks -----------------------------

BOUNDARY_OBJECTS = [(kind, name) for kind in ("validatingadmissionpolicies", "validatingadmissionpolicybindings")
                    for name in ("gpu-class.io-boundary", "gpu-class.io-boundary-claims")]
PolicyWrite = Callable[[kubernetes.client.AdmissionregistrationV1Api, str, dict[str, Any]], object]


def _loosened(kind: str, current: Mapping[str, Any]) -> dict[str, Any]:
    spec = ({"validationActions": ["Audit"]} if kind == "validatingadmissionpolicybindings"
            else {"failurePolicy": "Ignore"})
    return {**current, "spec": {**current["spec"], **spec}}


def _policy_api(api: kubernetes.client.AdmissionregistrationV1Api, verb: str, kind: str) -> Callable[..., object]:
    suffix = "validating_admission_policy" + ("_binding" if kind == "validatingadmissionpolicybindings" else "")
    return getattr(api, f"{verb}_{suffix}")  # type: ignore[no-any-return]


POLICY_WRITES: dict[str, tuple[str, Callable[[str], PolicyWrite]]] = {
    "replace": ("update", lambda kind: lambda api, name, cur: _policy_api(api, "replace", kind)(
        name, _loosened(kind, cur))),
    "merge-patch": ("patch", lambda kind: lambda api, name, cur: _policy_api(api, "patch", kind)(
        name, {"spec": _loosened(kind, cur)["spec"]}, _content_type=MERGE)),
    "delete": ("delete", lambda kind: lambda api, name, cur: _policy_api(api, "delete", kind)(name)),
}


def read_raw(api: kubernetes.client.AdmissionregistrationV1Api, kind: str, name: str) -> dict[str, Any]:
    response = _policy_api(api, "read", kind)(name, _preload_content=False)
    return dict(json.loads(response.data))


@pytest.mark.parametrize("write", POLICY_WRITES)
@pytest.mark.parametrize(("kind", "name"), BOUNDARY_OBJECTS)
@pytest.mark.parametrize("role", ROLES)
def test_a_tenant_cannot_change_the_boundarys_policies_or_bindings(
        api_client: kubernetes.client.ApiClient, tenants: dict[str, Tenant], role: str, kind: str, name: str,
        write: str) -> None:
    admin = kubernetes.client.AdmissionregistrationV1Api(api_client)
    tenant = tenants[role]
    before = read_raw(admin, kind, name)
    verb, request = POLICY_WRITES[write]
    status, message = refusal(lambda: request(kind)(kubernetes.client.AdmissionregistrationV1Api(tenant.api), name,
                                                    before))
    assert status == 403 and forbidden(tenant.user, verb, kind, "admissionregistration.k8s.io",
                                       "at the cluster scope") in message, (status, message)
    after = read_raw(admin, kind, name)
    assert (after["metadata"]["resourceVersion"], after["spec"]) == (before["metadata"]["resourceVersion"],
                                                                   before["spec"])


NamespaceWrite = Callable[[kubernetes.client.CoreV1Api, str], object]


def _replace_namespace(change: Callable[[dict[str, Any]], None]) -> NamespaceWrite:
    def write(api: kubernetes.client.CoreV1Api, name: str) -> object:
        # read as the tenant: `view`, which admin and edit aggregate, lets it get its own Namespace
        current = json.loads(api.read_namespace(name, _preload_content=False).data)
        change(current["metadata"])
        return api.replace_namespace(name, current)
    return write


NAMESPACE_WRITES: dict[str, tuple[str, NamespaceWrite]] = {
    "patch-allowed-classes": ("patch", lambda api, name: api.patch_namespace(name, {"metadata": {"annotations": {
        "gpu-class.io/allowed-classes": "economy,high"}}}, _content_type=MERGE)),
    "patch-out-of-inject": ("patch", lambda api, name: api.patch_namespace(name, {"metadata": {"labels": {
        "gpu-class.io/inject": None}}}, _content_type=MERGE)),
    "replace-allowed-classes": ("update", _replace_namespace(
        lambda meta: meta["annotations"].update({"gpu-class.io/allowed-classes": "economy,high"}))),
}


@pytest.mark.parametrize("write", NAMESPACE_WRITES)
@pytest.mark.parametrize("role", ROLES)
def test_a_tenant_cannot_change_its_namespaces_boundary(
        core: kubernetes.client.CoreV1Api, tenants: dict[str, Tenant], role: str, write: str) -> None:
    """Namespaces are cluster-scoped objects: `admin` in a namespace grants reading it, not writing it."""
    tenant = tenants[role]
    before = core.read_namespace(tenant.namespace).metadata
    verb, request = NAMESPACE_WRITES[write]
    status, message = refusal(lambda: request(kubernetes.client.CoreV1Api(tenant.api), tenant.namespace))
    assert status == 403 and f'User "{tenant.user}" cannot {verb} resource "namespaces" in API group ""' in message, (
        status, message)
    after = core.read_namespace(tenant.namespace).metadata
    assert (after.resource_version, after.labels, after.annotations) == (before.resource_version, before.labels,
                                                                         before.annotations)
