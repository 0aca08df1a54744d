"""gpu-class-scheduler, the strict path: its KubeSchedulerConfiguration, the proof that each profile
carries out its strategy, and how the installs run it.

The shipped configurations (deploy/scheduler/config.yaml, the profiles;
deploy/components/scheduler-extender/config.yaml, the same profiles with gpu-class's extender; and
deploy/components/stock-scheduler/config.yaml, the profiles without NodeLabelIndex) go through the
binary that runs each with `--write-config-to`: gpu-class-scheduler (kube-scheduler of the pinned
release with NodeLabelIndex) for the first two, the stock kube-scheduler of that release for the
third. It decodes them strictly, validates them and writes out what it would run, defaults filled
in. The proof is computed from that: the weights of the score plugins a profile runs, against the
scores they can give.

The install checks run on the kustomize renders of tests/test_deploy.py (the chart renders the same
objects: tests/test_chart.py).
"""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any, Mapping, Sequence

import pytest
import yaml

import local_cluster
import webhook
from scheduler_replicas import (cut_off_leader_stops_within_seconds, parse_duration_seconds, shipped_lease_settings,
                                worst_takeover_seconds)
from test_deploy import (CERT_MANAGER, CLIENT_SECRET, DEPLOY, EXTENDER, SELF_MANAGED, STOCK, STRICT_INSTALLS,
                         SYSTEM_NAMESPACE, WITHOUT_STRICT, Obj, Renders, all_of, make_test_certificates, objects_of, one_of, port_number,
                         renders, webhook_container, webhook_deployment)
from test_extender import make_app
from webhook.core.catalog.loading import load_catalog_file
from webhook.core.catalog.profiles import (
    MIG_RESOURCE_PREFIX, PROFILE_SUFFIX, PROFILE_SUFFIXES, SLICES_SUFFIX, STRATEGIES, STRICT_SCHEDULER,
)
from webhook.core.admission.order import rank_gap, weights_for
from webhook.core.admission.route import route_scheduler

__all__ = ["renders"]  # the fixture, shared with test_deploy.py

PROFILES_FILE = DEPLOY / "scheduler" / "config.yaml"
POD_CA_FILE = "/etc/gpu-class-scheduler/tls/ca.crt"
POD_CLIENT_FILES = ("/etc/gpu-class-scheduler/tls/client.crt", "/etc/gpu-class-scheduler/tls/client.key")
EXTENDER_FILE = DEPLOY / EXTENDER / "config.yaml"
STOCK_FILE = DEPLOY / STOCK / "config.yaml"
# gpu-class-scheduler's own PreFilter plugin, which the stock binary does not have.
LABEL_INDEX = "NodeLabelIndex"
SHIPPED = load_catalog_file(str(DEPLOY / "base" / "catalog.yaml"))
# framework.MaxNodeScore: what every score plugin gives a node at most, after its normalisation.
MAX_NODE_SCORE = 100
# The most types a class can rank distinctly (order.weights_for).
MAX_RANKS = 100
# What each profile's strategy is carried out by, and how (config.ScoringStrategy's type).
DOMINANT = {"": ("NodeAffinity", "MostAllocated"), "-binpack": ("NodeResourcesFit", "MostAllocated"),
            "-balanced": ("NodeResourcesFit", "LeastAllocated")}


def our_scheduler() -> Path:
    return local_cluster.build_scheduler()


def stock_scheduler() -> Path:
    return local_cluster.build() / "kube-scheduler"


def effective(config_file: Path, tmp_path: Path, scheduler: Path) -> dict[str, Any]:
    """What the kube-scheduler binary `scheduler` runs for `config_file`: decoded strictly, validated,
    defaults filled in."""
    kubeconfig = tmp_path / "kubeconfig"
    # never contacted: --write-config-to exits once the configuration is complete
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    text = config_file.read_text().replace("leaderElection:", f"clientConnection:\n  kubeconfig: {kubeconfig}\n"
                                           "leaderElection:", 1)
    # kube-scheduler reads the extender's CA and client pair at start; the Pod's files are made by the install
    files = make_test_certificates()
    for pod_file, data in ((POD_CA_FILE, files.ca_pem), (POD_CLIENT_FILES[0], files.client_pem),
                           (POD_CLIENT_FILES[1], files.client_key_pem)):
        local = tmp_path / Path(pod_file).name
        local.write_bytes(data)
        text = text.replace(f"File: {pod_file}\n", f"File: {local}\n")
    given, written = tmp_path / "config.yaml", tmp_path / "effective.yaml"
    given.write_text(text)
    done = subprocess.run([str(scheduler), f"--config={given}", f"--write-config-to={written}",
                           "--authentication-skip-lookup", f"--authentication-kubeconfig={kubeconfig}",
                           f"--authorization-kubeconfig={kubeconfig}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and written.exists(), f"{scheduler.name} refused {config_file}:\n{done.stderr}"
    config: dict[str, Any] = yaml.safe_load(written.read_text())
    return config


@pytest.fixture(scope="module")
def profiles_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return effective(PROFILES_FILE, tmp_path_factory.mktemp("profiles"), our_scheduler())


@pytest.fixture(scope="module")
def extender_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return effective(EXTENDER_FILE, tmp_path_factory.mktemp("extender"), our_scheduler())


@pytest.fixture(scope="module")
def stock_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return effective(STOCK_FILE, tmp_path_factory.mktemp("stock"), stock_scheduler())


@pytest.fixture(scope="module")
def shipped_configs(profiles_config: dict[str, Any], extender_config: dict[str, Any],
                    stock_config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each shipped configuration as its binary runs it, by name."""
    return {"profiles": profiles_config, "extender": extender_config, "stock": stock_config}


# The configurations without the extender, on each binary: the proof holds on both.
BINARIES = [pytest.param("profiles", id="gpu-class-scheduler"), pytest.param("stock", id="stock-kube-scheduler")]
ALL_CONFIGS = ["profiles", "extender", "stock"]


def profile(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    (found,) = [p for p in config["profiles"] if p["schedulerName"] == name]
    return found


def score_weights(p: Mapping[str, Any]) -> dict[str, int]:
    """The score plugins the profile runs: with `*` disabled at score, exactly those enabled there."""
    score = p["plugins"]["score"]
    assert "*" in {d["name"] for d in score.get("disabled") or []}, "default score plugins would add to the sum"
    return {s["name"]: s["weight"] for s in score["enabled"]}


def plugin_args(p: Mapping[str, Any], name: str) -> dict[str, Any]:
    (args,) = [c["args"] for c in p["pluginConfig"] if c["name"] == name]
    return dict(args)


def worst_case_rest(weights: Mapping[str, int], dominant: str) -> int:
    """The most every other score plugin can add together: each gives one node 100 and another 0."""
    return sum(w * MAX_NODE_SCORE for name, w in weights.items() if name != dominant)


def smallest_rank_gap(n: int) -> int:
    weights = weights_for(n)
    return min(rank_gap(a, b) for a, b in zip(weights, weights[1:]))


# --- the proof ------------------------------------------------------------------------------


WHOLE_GPUS = [r for r in SHIPPED.resources if not r.startswith(MIG_RESOURCE_PREFIX)]
GPU_SLICES = [r for r in SHIPPED.resources if r.startswith(MIG_RESOURCE_PREFIX)]


@pytest.mark.parametrize("which", BINARIES)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("resource, suffix, scored_on", [
    pytest.param("nvidia.com/gpu", "", WHOLE_GPUS, id="whole-gpus"),
    pytest.param("amd.com/gpu", "", WHOLE_GPUS, id="amd"),
    pytest.param("nvidia.com/mig-1g.10gb", SLICES_SUFFIX, GPU_SLICES, id="mig-slices"),
])
def test_each_strategy_has_a_profile_that_scores_it_first(shipped_configs: dict[str, dict[str, Any]], which: str,
                                                          strategy: str, resource: str, suffix: str,
                                                          scored_on: list[str]) -> None:
    """The profile the webhook routes a class's Pods to is there, and its dominant score is the strategy's."""
    name = route_scheduler(STRICT_SCHEDULER, SHIPPED, strategy, resource)  # type: ignore[arg-type]
    assert name == STRICT_SCHEDULER + PROFILE_SUFFIX[strategy] + suffix  # type: ignore[index]
    p = profile(shipped_configs[which], name)
    dominant, scoring = DOMINANT[PROFILE_SUFFIX[strategy]]  # type: ignore[index]
    weights = score_weights(p)
    assert max(weights, key=weights.__getitem__) == dominant
    fit = plugin_args(p, "NodeResourcesFit")["scoringStrategy"]
    assert fit["type"] == scoring
    # scored on GPU resources only, the Pod's among them: every resource of the built-in catalog of its
    # kind (whole GPUs or MIG slices), and no other, since each one listed costs every node's score
    assert resource in scored_on
    assert [r["name"] for r in fit["resources"]] == scored_on
    assert {r["weight"] for r in fit["resources"]} == {1}
    # NodeLabelIndex keeps to the nodes this very score ranks first, on the same resources
    if which != "stock":
        order = plugin_args(p, LABEL_INDEX)
        if dominant == "NodeAffinity":
            assert order == {"order": "PreferredTypes"}
        else:
            assert order["order"] == {"MostAllocated": "MostUsed", "LeastAllocated": "MostFree"}[scoring]
            assert order["resources"] == fit["resources"] and order["nodes"] >= 100


@pytest.mark.parametrize("which", BINARIES)
def test_type_order_outweighs_every_other_score(shipped_configs: dict[str, dict[str, Any]], which: str) -> None:
    """performance and cost: when the best types are full, the best type left leads the next by
    rank_gap (NodeAffinity scales the best feasible node to 100), times NodeAffinity's weight; every
    other plugin together cannot make that up, for any number of ranks the webhook writes."""
    config = shipped_configs[which]
    weights = score_weights(profile(config, STRICT_SCHEDULER))
    assert score_weights(profile(config, STRICT_SCHEDULER + SLICES_SUFFIX)) == weights
    rest = worst_case_rest(weights, "NodeAffinity")
    for n in range(2, MAX_RANKS + 1):
        assert weights["NodeAffinity"] * smallest_rank_gap(n) > rest, f"{n} ranks"
    # the built-in classes, per resource, stay well inside that
    largest = max(sum(1 for t in c.types if SHIPPED.types[t].resource == r)
                  for c in SHIPPED.classes.values() for r in SHIPPED.class_resources(c.name))
    assert largest <= MAX_RANKS


@pytest.mark.parametrize("which", BINARIES)
@pytest.mark.parametrize("suffix", ["-binpack", "-balanced", "-binpack" + SLICES_SUFFIX, "-balanced" + SLICES_SUFFIX])
def test_share_of_gpus_outweighs_every_other_score(shipped_configs: dict[str, dict[str, Any]], which: str,
                                                   suffix: str) -> None:
    """binpack and balanced: NodeResourcesFit's score is a whole number of percent, so two nodes it
    tells apart differ by at least 1 point, times its weight: more than all the rest can add."""
    weights = score_weights(profile(shipped_configs[which], STRICT_SCHEDULER + suffix))
    assert weights["NodeResourcesFit"] * 1 > worst_case_rest(weights, "NodeResourcesFit")


@pytest.mark.parametrize("which", ALL_CONFIGS)
def test_every_profile_allocates_dra_devices_and_leaves_their_score_out(shipped_configs: dict[str, dict[str, Any]],
                                                                        which: str) -> None:
    """On a DRA node the Pod's GPU limit is served by DynamicResources (filter, reserve, pre-bind make and
    allocate its claim): a profile without it would leave such Pods Pending. Its score stays out of the
    proof: the claims made for an extended resource have no firstAvailable, so it would score 0 everywhere,
    and NodeResourcesFit already scores the DRA-backed resource from the devices."""
    config = shipped_configs[which]
    for p in config["profiles"]:
        assert "DynamicResources" in {x["name"] for x in p["plugins"]["multiPoint"]["enabled"]}, p["schedulerName"]
        assert "DynamicResources" not in {d["name"] for stage in p["plugins"].values()
                                          for d in (stage or {}).get("disabled") or [] if d["name"] != "*"}
        assert "DynamicResources" not in score_weights(p), p["schedulerName"]


@pytest.mark.parametrize("which", ALL_CONFIGS)
def test_every_node_is_scored_and_no_default_spreading(shipped_configs: dict[str, dict[str, Any]], which: str) -> None:
    """kube-scheduler's adaptive sampling would stop at 10% of 5,000 nodes, and the system-default
    topology spread (up to 200 points per ReplicaSet Pod in the default profile) would pull a
    Deployment's replicas off the best type."""
    config = shipped_configs[which]
    assert config["percentageOfNodesToScore"] == 100
    for p in config["profiles"]:
        assert p["percentageOfNodesToScore"] == 100, p["schedulerName"]
        assert plugin_args(p, "PodTopologySpread") | {"apiVersion": None} == {
            "apiVersion": None, "kind": "PodTopologySpreadArgs", "defaultingType": "List"}, p["schedulerName"]
    assert sorted(p["schedulerName"] for p in config["profiles"]) == sorted(
        STRICT_SCHEDULER + s for s in PROFILE_SUFFIXES)


def test_the_extender_configuration_is_the_profiles_and_the_extender(profiles_config: dict[str, Any],
                                                                     extender_config: dict[str, Any]) -> None:
    assert "extenders" not in profiles_config
    ours = ("extenders", "clientConnection")  # the kubeconfig effective() gave each
    assert {k: v for k, v in extender_config.items() if k not in ours} == {
        k: v for k, v in profiles_config.items() if k not in ours}


def label_index_stages(p: Mapping[str, Any]) -> list[str]:
    """The extension points at which the profile enables NodeLabelIndex."""
    return [stage for stage, plugins in p["plugins"].items()
            if LABEL_INDEX in {e["name"] for e in (plugins or {}).get("enabled") or []}]


@pytest.mark.parametrize("which, stages", [
    pytest.param("profiles", ["postFilter", "preFilter"], id="profiles"),
    pytest.param("extender", ["postFilter", "preFilter"], id="extender"),
    pytest.param("stock", [], id="stock"),
])
def test_our_binary_narrows_every_profile_at_prefilter(shipped_configs: dict[str, dict[str, Any]], which: str,
                                                       stages: list[str]) -> None:
    """NodeLabelIndex gives each cycle only the nodes the Pod's required affinity names (the best of
    them), in every profile our binary runs, at preFilter, and widens at postFilter (it never filters
    nor scores); the stock binary has no such plugin."""
    for p in shipped_configs[which]["profiles"]:
        assert sorted(label_index_stages(p)) == stages, p["schedulerName"]
        if stages:
            # it widens a Pod its best nodes all refused before preemption evicts anything for it
            assert [e["name"] for e in p["plugins"]["postFilter"]["enabled"]] == [LABEL_INDEX, "DefaultPreemption"]


def without_label_index(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` with NodeLabelIndex taken out of every profile, as if it had never been enabled: its
    args gone, and preemption no longer moved behind it."""
    result = copy.deepcopy(dict(config))
    for p in result["profiles"]:
        for stage, plugins in p["plugins"].items():
            enabled = [e for e in (plugins or {}).get("enabled") or [] if e["name"] != LABEL_INDEX]
            if stage == "postFilter" and plugins and [e["name"] for e in enabled] == [
                    d["name"] for d in plugins.get("disabled") or []]:
                enabled = []
                plugins.pop("disabled", None)
            if enabled:
                plugins["enabled"] = enabled
            elif plugins:
                plugins.pop("enabled", None)
        p["pluginConfig"] = [c for c in p["pluginConfig"] if c["name"] != LABEL_INDEX]
    return result


def test_the_stock_configuration_is_the_profiles_without_the_label_index(profiles_config: dict[str, Any],
                                                                        stock_config: dict[str, Any]) -> None:
    """Both binaries are the same kube-scheduler release: what the stock one runs is what ours runs,
    NodeLabelIndex aside, defaults included."""
    ours = ("clientConnection",)  # the kubeconfig effective() gave each
    assert {k: v for k, v in stock_config.items() if k not in ours} == {
        k: v for k, v in without_label_index(profiles_config).items() if k not in ours}


def test_the_extender_is_this_webhook(extender_config: dict[str, Any], renders: Renders) -> None:
    (extender,) = extender_config["extenders"]
    objects = objects_of(renders, SELF_MANAGED)
    service = one_of(objects, "Service", "gpu-class", SYSTEM_NAMESPACE)
    # the Service's port that reaches the extender's listener (--extender-bind), not the admission port
    container = webhook_container(webhook_deployment(objects))
    listener = int(container["args"][container["args"].index("--extender-bind") + 1].rpartition(":")[2])
    (port,) = [p["port"] for p in service["spec"]["ports"] if port_number(container, p["targetPort"]) == listener]
    assert extender["urlPrefix"] == f"https://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{port}"
    routes = {rule.rule for rule in make_app().url_map.iter_rules() if "POST" in (rule.methods or set())}
    assert "/" + extender["filterVerb"] in routes
    # filter keeps only the promised nodes; a prioritize score could only disturb the profiles' proof
    assert not extender.get("prioritizeVerb") and not extender.get("bindVerb") and not extender.get("preemptVerb")
    assert extender["enableHTTPS"] is True and extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is True
    # the scheduler still counts them itself, so a node is never overcommitted whatever the extender says
    assert [(r["name"], r.get("ignoredByScheduler", False)) for r in extender["managedResources"]] == [
        (r, False) for r in SHIPPED.resources]


def mounted_secret_keys(objects: Sequence[Obj], path: str) -> list[tuple[str, str]]:
    """(Secret, key) the scheduler's container finds at `path`."""
    spec = scheduler_deployment(objects)["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    (mount,) = [m for m in container["volumeMounts"] if Path(path).is_relative_to(m["mountPath"])]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    relative = Path(path).relative_to(mount["mountPath"]).as_posix()
    secrets = [s["secret"] for s in volume["projected"]["sources"] if "secret" in s]
    return [(s["name"], i["key"]) for s in secrets for i in s["items"] if i["path"] == relative]


def test_scheduler_verifies_the_webhook_and_shows_its_own_certificate(extender_config: dict[str, Any],
                                                                      renders: Renders) -> None:
    """With enableHTTPS and no CA the scheduler silently skips verification: a CA must be configured,
    from the TLS Secret. And the extender serves only a client certificate of that CA: the scheduler
    shows the one the install made for it."""
    (extender,) = extender_config["extenders"]
    tls = extender["tlsConfig"]
    assert not tls.get("insecure") and tls["caFile"] and tls["certFile"] and tls["keyFile"]
    (shipped,) = yaml.safe_load(EXTENDER_FILE.read_text())["extenders"]
    files = [shipped["tlsConfig"][k] for k in ("caFile", "certFile", "keyFile")]
    assert files == [POD_CA_FILE, *POD_CLIENT_FILES]
    objects = objects_of(renders, EXTENDER)
    assert [mounted_secret_keys(objects, f) for f in files] == [
        [("gpu-class-tls", "ca.crt")], [(CLIENT_SECRET, "tls.crt")], [(CLIENT_SECRET, "tls.key")]]
    # the profiles alone call no extender, and need no client certificate
    assert mounted_secret_keys(objects_of(renders, SELF_MANAGED), POD_CLIENT_FILES[0]) == []


# --- the installs -------------------------------------------------------------------------


def package_version() -> str:
    return webhook.__version__


def scheduler_deployment(objects: Sequence[Obj]) -> Obj:
    return one_of(objects, "Deployment", "gpu-class-scheduler", SYSTEM_NAMESPACE)


def scheduler_config_text(objects: Sequence[Obj]) -> str:
    """The configuration the scheduler's Deployment reads."""
    spec = scheduler_deployment(objects)["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    (flag,) = [a for a in container["command"] if a.startswith("--config=")]
    config_path = Path(flag.removeprefix("--config="))
    (mount,) = [m for m in container["volumeMounts"] if config_path.is_relative_to(m["mountPath"])]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    relative = config_path.relative_to(mount["mountPath"]).as_posix()
    (source,) = [(s["configMap"]["name"], i["key"]) for s in volume["projected"]["sources"] if "configMap" in s
                 for i in s["configMap"]["items"] if i["path"] == relative]
    text: str = one_of(objects, "ConfigMap", source[0], SYSTEM_NAMESPACE)["data"][source[1]]
    return text


# (image, command): our image is tagged with the package version, as the webhook's is.
OURS = (re.escape(f"gpu-class-scheduler:{package_version()}"), "gpu-class-scheduler")
STOCK_BINARY = (r"registry\.k8s\.io/kube-scheduler:v1\.\d+\.\d+", "kube-scheduler")
INSTALLED_SCHEDULERS = [
    pytest.param(SELF_MANAGED, PROFILES_FILE, OURS, id="self-managed"),
    pytest.param(CERT_MANAGER, PROFILES_FILE, OURS, id="cert-manager"),
    pytest.param(EXTENDER, EXTENDER_FILE, OURS, id="extender"),
    pytest.param(STOCK, STOCK_FILE, STOCK_BINARY, id="stock-scheduler"),
]


def test_every_strict_install_is_in_the_table() -> None:
    assert sorted(str(p.values[0]) for p in INSTALLED_SCHEDULERS) == sorted(STRICT_INSTALLS)


@pytest.mark.parametrize("rel, config_file, binary", INSTALLED_SCHEDULERS)
def test_installs_run_the_strict_scheduler_on_its_configuration(renders: Renders, rel: str, config_file: Path,
                                                                binary: tuple[str, str]) -> None:
    """Our binary by default, on the profiles (or the profiles and the extender); the stock binary on
    the profiles without NodeLabelIndex, which it would refuse."""
    objects = objects_of(renders, rel)
    assert scheduler_config_text(objects) == config_file.read_text()
    (container,) = scheduler_deployment(objects)["spec"]["template"]["spec"]["containers"]
    image, command = binary
    assert re.fullmatch(image, container["image"]), container["image"]
    assert container["command"] == [command, "--config=/etc/gpu-class-scheduler/config.yaml"]


def test_without_the_strict_scheduler_nothing_of_it_is_left(renders: Renders) -> None:
    objects = objects_of(renders, WITHOUT_STRICT)
    assert [o for o in objects if "gpu-class-scheduler" in yaml.safe_dump(o)] == []


NAMESPACE = SYSTEM_NAMESPACE
SERVICE_ACCOUNT = "gpu-class-scheduler"
SUBJECT = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}


def test_scheduler_rbac(renders: Renders, profiles_config: dict[str, Any]) -> None:
    objects = objects_of(renders, SELF_MANAGED)
    assert scheduler_deployment(objects)["spec"]["template"]["spec"]["serviceAccountName"] == SERVICE_ACCOUNT
    one_of(objects, "ServiceAccount", SERVICE_ACCOUNT, NAMESPACE)
    cluster_roles = {b["roleRef"]["name"] for b in all_of(objects, "ClusterRoleBinding") if SUBJECT in b["subjects"]}
    assert cluster_roles == {"system:kube-scheduler", "system:volume-scheduler"}
    roles = {(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in all_of(objects, "RoleBinding")
             if SUBJECT in b["subjects"]}
    assert ("kube-system", "extension-apiserver-authentication-reader") in roles

    # leader election on a lease of its own, which a Role of its own lets it hold
    election = yaml.safe_load(PROFILES_FILE.read_text())["leaderElection"]
    assert election["leaderElect"] is True and election["resourceLock"] == "leases"
    assert election["resourceName"] != "kube-scheduler"
    lease_namespace, lease = election["resourceNamespace"], election["resourceName"]
    granted = {
        (verb, name)
        for r in all_of(objects, "Role") if (lease_namespace, r["metadata"]["name"]) in roles
        for rule in r["rules"] if "coordination.k8s.io" in rule["apiGroups"] and "leases" in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames", [lease])
    }
    assert {("get", lease), ("update", lease), ("create", lease)} <= granted


@pytest.mark.parametrize(("text", "seconds"), [
    pytest.param("15s", 15.0, id="seconds"),
    pytest.param("500ms", 0.5, id="milliseconds"),
    pytest.param("1.5s", 1.5, id="fraction"),
    pytest.param("1m", 60.0, id="minutes"),
])
def test_parse_duration_seconds(text: str, seconds: float) -> None:
    assert parse_duration_seconds(text) == seconds


def test_parse_duration_seconds_refuses_what_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="1h"):
        parse_duration_seconds("1h")


def test_a_standby_takes_over_within_lease_plus_5s_and_never_beside_a_leader() -> None:
    """The shipped leader election, by client-go's timings: after a crash or a partition the next bind comes
    within lease + 5 s (tests/e2e/test_scheduler_failover_e2e.py measures it), and a leader cut off from the API
    server gives the lead up before a standby can take it, so no two replicas schedule at once."""
    settings = shipped_lease_settings(PROFILES_FILE)
    assert worst_takeover_seconds(settings) < settings.lease_seconds + 5
    assert cut_off_leader_stops_within_seconds(settings) < settings.lease_seconds


def test_scheduler_pods_are_not_webhook_pods(renders: Renders) -> None:
    """The webhook's Service and PodDisruptionBudget must not select the scheduler's Pods."""
    objects = objects_of(renders, SELF_MANAGED)
    labels = scheduler_deployment(objects)["spec"]["template"]["metadata"]["labels"]
    service_selector = one_of(objects, "Service", "gpu-class", NAMESPACE)["spec"]["selector"]
    pdb_selector = one_of(objects, "PodDisruptionBudget", "gpu-class", NAMESPACE)["spec"]["selector"]["matchLabels"]
    for selector in (service_selector, pdb_selector):
        assert not all(labels.get(k) == v for k, v in selector.items())
