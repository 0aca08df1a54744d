"""The gpuclass command: explain, review, certs, catalog, and clear errors for bad input."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509

from webhook.cli import main

DEMO = Path(__file__).parent.parent / "deploy" / "demo"
INVENTORY = ["--nodes", str(DEMO / "nodes.yaml"), "--nodes", str(DEMO / "namespaces.yaml")]


def test_explain_text_lists_every_type_with_its_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(DEMO / "pod-economy.yaml"), "--namespace", "ml-team", *INVENTORY]) == 0
    out = capsys.readouterr().out
    assert "Pod ml-team/batch-economy: patched" in out
    assert "too few GPUs: largest allocatable 1, Pod needs 2" in out
    assert "no nodes in the cluster" in out
    assert '"path": "/spec/containers/0/resources"' in out


def test_explain_json_is_machine_readable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(DEMO / "pod-high.yaml"), "--namespace", "ml-team", *INVENTORY, "--output", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["outcome"] == "patched" and result["class"] == "high"
    valid = [t["type"] for t in result["types"] if t["valid"]]
    assert valid and result["placement"]["order"] == [p["type"] for p in result["placement"]["preferences"]][: len(valid)]
    assert all(op["op"] == "add" for op in result["patch"])


def test_explain_of_a_refused_pod_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x, annotations: {gpu-class.io/class: turbo}}\n"
                   "spec: {containers: [{name: a, image: b}]}\n")
    assert main(["explain", str(pod), "--namespace", "ml-team", *INVENTORY]) == 1
    assert "unknown class 'turbo'" in capsys.readouterr().out


def test_demo_pod_with_namespace_default_class(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(DEMO / "pod-default.yaml"), "--namespace", "ml-team", *INVENTORY, "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["class"] == "standard"
    assert main(["explain", str(DEMO / "pod-default.yaml"), "--namespace", "web", *INVENTORY, "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "out-of-scope"


RAYJOB = """\
apiVersion: ray.io/v1
kind: RayJob
metadata: {name: tune, labels: {kueue.x-k8s.io/queue-name: team}}
spec:
  rayClusterSpec:
    headGroupSpec:
      template: {spec: {containers: [{name: head, image: ray}]}}
    workerGroupSpecs:
    - groupName: gpus
      template:
        metadata: {annotations: {gpu-class.io/class: %s}}
        spec: {containers: [{name: w, image: ray, resources: {limits: {nvidia.com/gpu: "1"}}}]}
"""


@pytest.mark.parametrize("class_name, rc, outcome", [
    pytest.param("high", 0, "patched", id="placed"),
    pytest.param("turbo", 1, "refused", id="a-refused-template-exits-1"),
])
def test_explain_a_workload_file_template_by_template(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      class_name: str, rc: int, outcome: str) -> None:
    path = tmp_path / "rayjob.yaml"
    path.write_text(RAYJOB % class_name)
    assert main(["explain", str(path), "-n", "ml-team", *INVENTORY]) == rc
    out = capsys.readouterr().out
    assert out.startswith(f"RayJob ml-team/tune: {outcome}\n")
    # the head asks for no GPU and names no class: out of scope, as a Pod of it would be
    assert "pod template spec.rayClusterSpec.headGroupSpec.template (headGroupSpec): out-of-scope" in out
    assert f"pod template spec.rayClusterSpec.workerGroupSpecs[0].template (gpus): {outcome}" in out
    assert main(["explain", str(path), "-n", "ml-team", *INVENTORY, "-o", "json"]) == rc
    result = json.loads(capsys.readouterr().out)
    assert (result["kind"], result["outcome"], result["decidedAt"]) == ("RayJob", outcome, "workload")
    head, workers = result["templates"]
    assert (head["role"], workers["role"], workers["outcome"]) == ("headGroupSpec", "gpus", outcome)
    assert result["patch"] == (workers["patch"] if outcome == "patched" else [])
    if outcome == "patched":
        assert all(op["path"].startswith("/spec/rayClusterSpec/workerGroupSpecs/0/template/") for op in result["patch"])
        assert workers["placement"]["order"] and workers["class"] == "high"


def test_review_prints_an_admission_review(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["review", str(DEMO / "pod-high.yaml"), "--namespace", "ml-team"]) == 0
    review = json.loads(capsys.readouterr().out)
    assert review["kind"] == "AdmissionReview" and review["request"]["operation"] == "CREATE"
    assert review["request"]["namespace"] == "ml-team" and review["request"]["object"]["kind"] == "Pod"


def test_certs_have_the_service_names_and_a_private_key(tmp_path: Path) -> None:
    assert main(["certs", "--out", str(tmp_path), "--service", "svc", "--namespace", "ns", "--dns", "extra.example",
                 "--ip", "10.0.0.1"]) == 0
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "svc.ns.svc" in sans.get_values_for_type(x509.DNSName)
    assert "extra.example" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.0.0.1"]
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert stat.S_IMODE(os.stat(tmp_path / "tls.key").st_mode) == 0o600


@pytest.mark.parametrize("argv, message", [
    pytest.param(["explain", "missing.yaml", "--nodes", str(DEMO / "nodes.yaml")], "cannot read missing.yaml",
                 id="missing-pod-file"),
    pytest.param(["explain", str(DEMO / "nodes.yaml"), "--nodes", str(DEMO / "nodes.yaml")],
                 "must hold exactly one Pod, or one workload the webhook decides (Job, StatefulSet, JobSet", id="no-pod"),
    pytest.param(["explain", str(DEMO / "pod-high.yaml"), "--nodes", str(DEMO / "namespaces.yaml")], "no Node objects",
                 id="no-nodes"),
    pytest.param(["certs", "--out", "/tmp/x", "--ip", "not-an-ip"], "does not appear to be an IPv4 or IPv6", id="bad-ip"),
    pytest.param(["serve", "--cert-file", "a", "--key-file", "b", "--workers", "0", "--nodes", "x"], "at least 1",
                 id="zero-workers"),
    pytest.param(["serve", "--cert-file", "a", "--key-file", "b"], "not running in a cluster", id="no-cluster"),
    pytest.param(["serve", "--cert-file", "a", "--key-file", "b", "--nodes", str(DEMO / "namespaces.yaml")],
                 "no Node objects", id="serve-inventory-without-nodes"),
    pytest.param(["serve", "--cert-file", "a", "--key-file", "b", "--nodes", str(DEMO / "nodes.yaml")],
                 "cannot use --cert-file a", id="missing-certificate"),
])
def test_bad_input_fails_with_a_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_catalog_prints_the_built_in_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog"]) == 0
    assert "gpuResource: nvidia.com/gpu" in capsys.readouterr().out


def test_catalog_table_shows_each_types_facts_and_the_classes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "-o", "table"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert rows["TYPE"][:8] == ["TYPE", "RESOURCE", "SCORE", "MEMORY-GIB", "ARCHITECTURE", "COMPUTE", "PRECISIONS",
                                "BANDWIDTH-GBPS"]
    assert rows["B300"][:8] == ["B300", "nvidia.com/gpu", "2250", "288", "Blackwell", "10.3", "fp4,fp8,fp16,bf16,tf32",
                                "8000"]
    assert rows["A100-80GB"][6] == "fp16,bf16,tf32,fp64"  # no fp8: Ampere
    assert rows["H100-1g.10gb"][4:8] == ["-", "-", "-", "-"]  # a slice states no facts
    assert rows["fp8"][:4] == ["fp8", "performance", "requires", "fp8:"] and "H100," in rows["fp8"]
    assert "A100-80GB," not in rows["fp8"] and rows["high"][2] == "GB300,"


def test_catalog_prints_a_given_catalog(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from builders import TEST_CATALOG_YAML

    given = tmp_path / "c.yaml"
    given.write_text(TEST_CATALOG_YAML)
    assert main(["catalog", "--config", str(given)]) == 0
    assert capsys.readouterr().out == TEST_CATALOG_YAML


def test_json_inventory_reads_like_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.cluster.loading import read_objects

    nodes = read_objects(str(DEMO / "nodes.yaml"))
    as_json = tmp_path / "nodes.json"
    as_json.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": nodes}))
    assert read_objects(str(as_json)) == nodes
    argv = ["explain", str(DEMO / "pod-high.yaml"), "--namespace", "ml-team", "--output", "json"]
    assert main([*argv, *INVENTORY]) == 0
    from_yaml = json.loads(capsys.readouterr().out)
    assert main([*argv, "--nodes", str(as_json), "--nodes", str(DEMO / "namespaces.yaml")]) == 0
    assert json.loads(capsys.readouterr().out)["types"] == from_yaml["types"]


README = Path(__file__).parent.parent / "README.md"
INVENTORY_PAGE = README.parent / "docs" / "users" / "explain.md"


def test_readme_starts_with_the_demo_command_alone() -> None:
    first_block = README.read_text().split("```")[1]
    assert first_block.splitlines()[1:] == [
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/gpuclass demo"]


def test_ci_runs_the_readme_test_command() -> None:
    test_command = README.read_text().split("```")[3].splitlines()[1]
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == test_command


@pytest.mark.parametrize("extra", [[], ["--nodes", str(DEMO / "dra.yaml")]], ids=["demo", "demo-with-dra"])
def test_docs_show_what_inventory_prints_on_the_demo(capsys: pytest.CaptureFixture[str], extra: list[str]) -> None:
    assert main(["inventory", *INVENTORY, *extra]) == 0
    printed = capsys.readouterr().out
    assert f"```\n{printed}```\n" in INVENTORY_PAGE.read_text(), "paste `gpuclass inventory` on the demo into docs/users/explain.md again"
