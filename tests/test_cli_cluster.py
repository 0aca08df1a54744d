"""`gpuclass inventory` and `gpuclass explain` against a live cluster (the fake API server), and the kubectl plugin."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from builders import make_namespace, make_node, make_pod, placed_affinity
from fakeapi import FakeApiServer
from servers import free_port
from webhook.cli import kubectl_main, main
from webhook.core.catalog.loading import load_default_catalog

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "deploy" / "demo"
H100, A100 = "NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB"
BUILT_IN = load_default_catalog()


def pod(name: str, gpus: int, *, node: str | None = None, phase: str = "Running", types: str | None = "H100",
        namespace: str = "ml") -> dict[str, Any]:
    annotations = {"gpu-class.io/class": "high", **({"gpu-class.io/types": types} if types else {})}
    # with the affinity the webhook writes beside its types (the built-in catalog's), which the inventory believes
    # them by
    obj = make_pod(annotations, name=name, gpu_limit=str(gpus),
                   affinity=placed_affinity(types.split(","), BUILT_IN) if types else None)
    obj["metadata"]["namespace"] = namespace
    if node:
        obj["spec"]["nodeName"] = node
    obj["status"] = {"phase": phase}
    return obj


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.create(make_namespace("ml"))
        server.create(make_namespace("web", inject=False))
        server.create(make_namespace("economy-only", allowed="economy"))
        for node in (make_node("h100-a", H100, gpus=8), make_node("h100-b", H100, gpus=8, unschedulable=True),
                     make_node("a100-a", A100, gpus=4, ready=False),
                     make_node("rtx-a", "NVIDIA-GeForce-RTX-5090", gpus=1), make_node("cpu-a")):
            server.create(node)
        # what counts as used: bound and unfinished, on a usable node
        server.create(pod("running", 3, node="h100-a"))
        server.create(pod("bound-not-started", 1, node="h100-a", phase="Pending"))
        server.create(pod("finished", 2, node="h100-a", phase="Succeeded"))
        server.create(pod("failed", 2, node="h100-a", phase="Failed"))
        server.create(pod("on-cordoned", 2, node="h100-b"))
        server.create(pod("waiting", 4, phase="Pending"))
        server.create(pod("too-big", 6, phase="Pending", types="H100,A100-40GB"))
        yield server


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path) -> Path:
    return api.kubeconfig(tmp_path / "kubeconfig")


def run_json(capsys: pytest.CaptureFixture[str], argv: list[str], expected_rc: int = 0) -> Any:
    assert main(argv) == expected_rc, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_inventory_figures_are_what_the_cluster_holds(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, ["inventory", "--kubeconfig", str(kubeconfig), "-o", "json"])
    assert report["types"] == [
        {"name": "H100", "resource": "nvidia.com/gpu",
         "nodes": {"total": 2, "ready": 2, "notReady": 0, "cordoned": 1},
         "gpus": {"allocatable": 8, "used": 4, "free": 4},
         "products": [{"labelKey": "nvidia.com/gpu.product", "product": H100,
                       "nodes": {"total": 2, "ready": 2, "notReady": 0, "cordoned": 1},
                       "gpus": {"allocatable": 8, "used": 4, "free": 4}}],
         "placedByLabels": False, "scoreBasis": load_default_catalog().types["H100"].facts.score_basis,
         "unhealthy": {"gpus": 0, "nodes": []}},
        {"name": "A100-40GB", "resource": "nvidia.com/gpu",  # the built-in catalog
         "nodes": {"total": 1, "ready": 0, "notReady": 1, "cordoned": 0},
         "gpus": {"allocatable": 0, "used": 0, "free": 0},
         "products": [{"labelKey": "nvidia.com/gpu.product", "product": A100,
                       "nodes": {"total": 1, "ready": 0, "notReady": 1, "cordoned": 0},
                       "gpus": {"allocatable": 0, "used": 0, "free": 0}}],
         "placedByLabels": False, "scoreBasis": load_default_catalog().types["A100-40GB"].facts.score_basis,
         "unhealthy": {"gpus": 0, "nodes": []}},
    ]
    assert report["unknownProducts"] == [{"labelKey": "nvidia.com/gpu.product", "product": "NVIDIA-GeForce-RTX-5090",
                                          "nodes": 1, "reason": (
        "too little information: its labels lack nvidia.com/gpu.family, nvidia.com/gpu.compute.major, "
        "nvidia.com/gpu.compute.minor, nvidia.com/gpu.memory or have them unreadable")}]
    high = next(c for c in report["classes"] if c["name"] == "high")
    # waiting and too-big: placed, no node holds them; not the Pods bound (finished or not) or finished
    assert high == {"name": "high", "strategy": "performance", "types": ["H100"], "maxGpusPerPod": 4, "pending": 2}


def test_inventory_reads_the_cluster_once_and_never_watches(api: FakeApiServer, kubeconfig: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inventory", "--kubeconfig", str(kubeconfig)]) == 0
    calls = api.request_log
    assert not any(r.is_watch for r in calls)
    # the DRA resources and NodePools too (this API server serves neither: both are off, said in the report)
    assert {r.path for r in calls} == {"/api/v1/nodes", "/api/v1/namespaces", "/api/v1/pods",
                                       *(f"/apis/resource.k8s.io/v1/{r}" for r in ("resourceslices", "deviceclasses",
                                                                                    "resourceclaims",
                                                                                    "resourceclaimtemplates")),
                                       "/apis/karpenter.sh/v1/nodepools",
                                       # the heralds, by name: what wakes NodePools and DRA in a watch
                                       "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                       "/apis/apiregistration.k8s.io/v1/apiservices"}
    pods_call = next(r for r in calls if r.path == "/api/v1/pods")
    assert pods_call.query["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"  # as the watch lists
    assert capsys.readouterr().out.startswith("TYPE ")


@pytest.mark.parametrize("namespace, outcome, rc", [
    pytest.param("ml", "patched", 0, id="opted-in"),
    pytest.param("web", "out-of-scope", 0, id="namespace-label-read-from-the-cluster"),
    pytest.param("economy-only", "refused", 1, id="namespace-annotation-read-from-the-cluster"),
])
def test_explain_a_pod_file_against_the_cluster(kubeconfig: Path, capsys: pytest.CaptureFixture[str], namespace: str,
                                                outcome: str, rc: int) -> None:
    result = run_json(capsys, ["explain", str(DEMO / "pod-high.yaml"), "-n", namespace, "--kubeconfig", str(kubeconfig),
                               "-o", "json"], rc)
    assert result["outcome"] == outcome and result["namespace"] == namespace
    if outcome == "patched":  # the live inventory: only the uncordoned H100 node is offered
        assert [t["type"] for t in result["types"] if t["valid"]] == ["H100"]


def test_explain_an_existing_bound_pod(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, ["explain", "pod/running", "-n", "ml", "--kubeconfig", str(kubeconfig), "-o", "json"])
    assert (result["types"], result["node"], result["nodeType"], result["onPreferredType"]) == (
        ["H100"], "h100-a", "H100", True)
    assert result["room"] is None
    assert main(["explain", "pod/running", "-n", "ml", "--kubeconfig", str(kubeconfig)]) == 0
    assert "H100 is its preferred type" in capsys.readouterr().out


@pytest.mark.parametrize("name, rc, room", [
    pytest.param("waiting", 0, {"H100": (1, 4)}, id="room-on-the-free-node"),
    pytest.param("too-big", 1, {"H100": (0, 0), "A100-40GB": (0, 0)}, id="no-room-exits-1"),
])
def test_explain_an_existing_pending_pod(kubeconfig: Path, capsys: pytest.CaptureFixture[str], name: str, rc: int,
                                         room: dict[str, tuple[int, int]]) -> None:
    result = run_json(capsys, ["explain", f"pod/{name}", "-n", "ml", "--kubeconfig", str(kubeconfig), "-o", "json"], rc)
    assert {r["type"]: (r["nodesWithRoom"], r["maxFreeGpus"]) for r in result["room"]} == room


def test_the_contexts_namespace_is_the_default(api: FakeApiServer, kubeconfig: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    config = json.loads(kubeconfig.read_text())
    config["contexts"].append({"name": "ml-context", "context": {"cluster": "fake", "user": "fake", "namespace": "ml"}})
    kubeconfig.write_text(json.dumps(config))
    result = run_json(capsys, ["explain", "pod/running", "--kubeconfig", str(kubeconfig), "--context", "ml-context",
                               "-o", "json"])
    assert result["namespace"] == "ml" and result["node"] == "h100-a"


def one_line_error(argv: list[str], env: dict[str, str] | None = None) -> str:
    """Run the real command; it must fail with status 2 and exactly one line on stderr."""
    result = subprocess.run([sys.executable, "-m", "webhook.cli", *argv], capture_output=True, text=True, timeout=60,
                            env={**os.environ, **(env or {})}, cwd=REPO)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


def test_an_unreachable_api_server_is_one_line(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    with FakeApiServer(port=port) as gone:
        config = gone.kubeconfig(tmp_path / "kubeconfig")
    for argv in (["inventory"], ["explain", "pod/x", "-n", "ml"], ["explain", str(DEMO / "pod-high.yaml")]):
        err = one_line_error([*argv, "--kubeconfig", str(config)])
        assert f"cannot reach the API server at http://127.0.0.1:{port}: Connection refused" in err, err


@pytest.mark.parametrize("argv, env, message", [
    pytest.param(["--context", "nope"], {}, "no context 'nope'; contexts: fake", id="missing-context"),
    pytest.param([], {"KUBECONFIG": "/nonexistent/kubeconfig"}, "KUBECONFIG=/nonexistent/kubeconfig: no such file",
                 id="kubeconfig-env-missing"),
    pytest.param(["--kubeconfig", "/nonexistent/kubeconfig"], {}, "--kubeconfig /nonexistent/kubeconfig: no such file",
                 id="kubeconfig-flag-missing"),
    pytest.param([], {"KUBECONFIG": "", "HOME": "/nonexistent"}, "no kubeconfig: give --kubeconfig PATH or set KUBECONFIG",
                 id="no-kubeconfig-at-all"),
])
def test_a_missing_context_or_kubeconfig_is_one_line(kubeconfig: Path, argv: list[str], env: dict[str, str],
                                                     message: str) -> None:
    env = {"KUBECONFIG": str(kubeconfig), **env}
    for command in (["inventory"], ["explain", "pod/running", "-n", "ml"]):
        err = one_line_error([*command, *argv], env)
        assert message in err, err


def test_api_refusals_and_missing_pods_are_one_line(api: FakeApiServer, kubeconfig: Path) -> None:
    err = one_line_error(["explain", "pod/ghost", "-n", "ml", "--kubeconfig", str(kubeconfig)])
    assert f"pod ml/ghost not found at {api.url}" in err
    err = one_line_error(["explain", str(DEMO / "pod-high.yaml"), "-n", "nowhere", "--kubeconfig", str(kubeconfig)])
    assert "namespace nowhere does not exist in the cluster" in err
    api.fail_next(1, status=403, path_prefix="/api/v1/nodes")
    err = one_line_error(["inventory", "--kubeconfig", str(kubeconfig)])
    assert "the API server answered 403 Forbidden" in err, err


@pytest.mark.parametrize("argv, message", [
    pytest.param(["inventory", "--nodes", str(DEMO / "nodes.yaml"), "--kubeconfig", "{kc}"], "not both",
                 id="inventory-files-and-cluster"),
    pytest.param(["explain", "pod/running", "--nodes", str(DEMO / "nodes.yaml")], "pod/running is read from the cluster",
                 id="existing-pod-with-files"),
])
def test_files_and_the_cluster_do_not_mix(kubeconfig: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                          message: str) -> None:
    assert main([a.replace("{kc}", str(kubeconfig)) for a in argv]) == 2
    assert message in capsys.readouterr().err


def test_kubectl_namespace_flag_on_a_cluster_wide_command_is_ignored(kubeconfig: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_main(["-n", "ml", "inventory", "--kubeconfig", str(kubeconfig), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["types"][0]["name"] == "H100"


@pytest.mark.parametrize("argv", [
    pytest.param(["explain", "pod/running", "-n", "ml", "--kubeconfig", "{kc}", "-o", "json"], id="flags-after"),
    pytest.param(["--kubeconfig", "{kc}", "-n", "ml", "explain", "pod/running", "-o", "json"], id="flags-before"),
    pytest.param(["--namespace=ml", "explain", "--kubeconfig={kc}", "pod/running", "-o", "json"], id="flags-mixed"),
])
def test_kubectl_flags_go_anywhere(kubeconfig: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert kubectl_main([a.replace("{kc}", str(kubeconfig)) for a in argv]) == 0
    assert json.loads(capsys.readouterr().out)["node"] == "h100-a"


def queued_statefulset(name: str, gpus: str, class_name: str = "high") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
            "spec": {"serviceName": name, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}, "annotations": {"gpu-class.io/class": class_name}},
                "spec": {"containers": [{"name": "main", "image": "i", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}


@pytest.mark.parametrize("argv, rc", [
    pytest.param(["explain", "statefulset/serve", "-n", "ml", "--kubeconfig", "{kc}", "-o", "json"], 0,
                 id="gpuclass-kind-slash-name"),
    pytest.param(["-n", "ml", "explain", "sts/serve", "--kubeconfig", "{kc}", "-o", "json"], 0, id="kubectl-short-name"),
    pytest.param(["explain", "statefulsets.apps/serve", "-n", "ml", "--kubeconfig", "{kc}", "-o", "json"], 0,
                 id="kubectl-resource-dot-group"),
    pytest.param(["explain", "sts/turbo", "-n", "ml", "--kubeconfig", "{kc}", "-o", "json"], 1, id="refused-exits-1"),
])
def test_explain_an_existing_workload(api: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str],
                                      argv: list[str], rc: int) -> None:
    """The decision the workload webhook would make for the workload as the API server holds it, against the
    live inventory, read with kubectl's ways of naming a kind."""
    api.create(queued_statefulset("serve", "2"))
    api.create(queued_statefulset("turbo", "1", "turbo"))  # a class the catalog does not have
    assert kubectl_main([a.replace("{kc}", str(kubeconfig)) for a in argv]) == rc
    result = json.loads(capsys.readouterr().out)
    assert (result["kind"], result["namespace"], result["decidedAt"]) == ("StatefulSet", "ml", "workload")
    (template,) = result["templates"]
    assert template["path"] == "spec.template"
    if rc == 0:
        assert result["outcome"] == template["outcome"] == "patched" and template["placement"]["order"][0] == "H100"
        assert result["patch"] == template["patch"] and result["patch"][0]["path"].startswith("/spec/template/")
    else:
        assert result["outcome"] == template["outcome"] == "refused" and result["patch"] == []
    assert any(r.path == f"/apis/apps/v1/namespaces/ml/statefulsets/{argv[argv.index('explain') + 1].split('/')[1]}"
               for r in api.request_log)


def test_explain_of_a_workload_that_does_not_exist(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "jobset/nope", "-n", "ml", "--kubeconfig", str(kubeconfig)]) == 2
    assert "jobsets ml/nope not found" in capsys.readouterr().err


def kubectl() -> str:
    path = Path(sys.executable).parent / "kubectl"
    if not path.exists():
        pytest.fail("kubectl is not installed in the virtual environment: pip install -e '.[test]'", pytrace=False)
    return str(path)


def plugin_env(**extra: str) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def test_kubectl_finds_the_installed_plugin() -> None:
    plugin = Path(sys.executable).parent / "kubectl-gpu_class"
    assert plugin.exists(), "kubectl-gpu_class is not installed: pip install -e '.[test]' (setup.cfg console_scripts)"
    listed = subprocess.run([kubectl(), "plugin", "list"], capture_output=True, text=True, timeout=60, env=plugin_env())
    assert str(plugin) in listed.stdout.splitlines(), listed.stdout + listed.stderr
    assert shutil.which("kubectl-gpu_class", path=plugin_env()["PATH"]) == str(plugin)


@pytest.mark.parametrize("argv, env", [
    pytest.param(["gpu-class", "inventory", "--kubeconfig", "{kc}", "-o", "json"], {}, id="kubeconfig-flag"),
    pytest.param(["gpu-class", "--context", "fake", "inventory", "-o", "json"], {"KUBECONFIG": "{kc}"},
                 id="kubeconfig-env-and-context"),
])
def test_kubectl_runs_the_plugin(kubeconfig: Path, argv: list[str], env: dict[str, str],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    def fill(text: str) -> str:
        return text.replace("{kc}", str(kubeconfig))

    result = subprocess.run([kubectl(), *map(fill, argv)], capture_output=True, text=True, timeout=60,
                            env=plugin_env(**{k: fill(v) for k, v in env.items()}))
    assert result.returncode == 0, result.stderr
    expected = run_json(capsys, ["inventory", "--kubeconfig", str(kubeconfig), "-o", "json"])
    assert json.loads(result.stdout) == expected


def test_kubectl_plugin_errors_name_the_plugin(kubeconfig: Path) -> None:
    result = subprocess.run([kubectl(), "gpu-class", "inventory", "--kubeconfig", str(kubeconfig), "--context", "nope"],
                            capture_output=True, text=True, timeout=60, env=plugin_env())
    assert result.returncode != 0
    assert result.stderr.startswith("kubectl gpu-class: --kubeconfig") and "no context 'nope'" in result.stderr
    assert "Traceback" not in result.stderr
