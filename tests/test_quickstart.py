"""The quick-start cannot drift from the install: the README's "Install on a cluster in five minutes" is run.

Its shell block runs with bash in a copy of the repository, `docker` and `kubectl` stood in for by commands that
record how they were called (and `kubectl get pod ... {.spec.nodeName}` answers with a node's name). The record is
then replayed against what those steps mean:

- `docker build` names a Dockerfile that exists, and `docker push` only what was built;
- `kubectl apply -k DIR` is rendered with the real `kubectl kustomize`: every image a Pod of the install runs is one
  the steps built and pushed, from the Dockerfile that makes it (the webhook's from the repository's Dockerfile,
  gpu-class-scheduler's from deploy/scheduler/plugin);
- a namespace is labelled or used only once it exists (created by a step, or by the install);
- the steps wait for the install's Deployments, and the last one reads the node the Pod is bound to, not an
  annotation.

docs/operators/install.md builds and points the install at the same two images, and its Helm command, rendered with
`helm template`, runs only images it built.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

import local_cluster
import test_deploy as deploy
import webhook
from test_deploy import Obj, copy_deploy, kustomize, pod_templates

README = deploy.REPO / "README.md"
INSTALL_DOC = deploy.REPO / "docs" / "operators" / "install.md"
QUICK_START = "Install on a cluster in five minutes"
FENCE = re.compile(r"^\s{0,3}(```|~~~)\s*([\w+-]*)")
# Which Dockerfile builds the image each workload of the install runs.
DOCKERFILES = {
    ("Deployment", deploy.DEPLOYMENT): "Dockerfile",
    ("Deployment", "gpu-class-scheduler"): "deploy/scheduler/plugin/Dockerfile",
}
BOUND_NODE = "gpu-node-7"

# Records each call as one JSON line; answers the one query the quick-start reads the output of.
STAND_IN = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["QUICKSTART_LOG"], "a") as log:
    log.write(json.dumps({{"argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]], "cwd": os.getcwd()}}) + "\\n")
if any("{{.spec.nodeName}}" in a for a in sys.argv):
    print("{BOUND_NODE}")
"""


def sections(path: Path) -> dict[str, list[str]]:
    """The fenced sh blocks of a Markdown page, by the heading they sit under."""
    found: dict[str, list[str]] = {}
    heading, fence, info = "", None, ""
    block: list[str] = []
    for line in path.read_text().split("\n"):
        m = FENCE.match(line)
        if m and (fence is None or m.group(1) == fence):
            if fence is None:
                fence, info, block = m.group(1), m.group(2).lower(), []
            else:
                if info in ("sh", "bash", "shell"):
                    found.setdefault(heading, []).append("\n".join(block))
                fence = None
            continue
        if fence is not None:
            block.append(line)
        elif line.startswith("#"):
            heading = line.lstrip("#").strip()
    return found


@dataclass(frozen=True)
class Call:
    argv: list[str]
    cwd: Path

    def __str__(self) -> str:
        return shlex.join(self.argv)


def run_quick_start(tmp: Path, script: str) -> list[Call]:
    """The steps, run with bash in a copy of what they read, docker and kubectl stood in for."""
    work = tmp / "checkout"
    copy_deploy(work)
    (work / "Dockerfile").write_bytes((deploy.REPO / "Dockerfile").read_bytes())
    (work / ".venv" / "bin").mkdir(parents=True)
    (work / ".venv" / "bin" / "gpuclass").symlink_to(deploy.tool("gpuclass"))
    shims = tmp / "shims"
    shims.mkdir()
    for name in ("docker", "kubectl"):
        (shims / name).write_text(STAND_IN)
        (shims / name).chmod(0o755)
    log = tmp / "calls.jsonl"
    env = {**os.environ, "PATH": f"{shims}:/usr/bin:/bin", "QUICKSTART_LOG": str(log)}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, f"the quick-start failed:\n{done.stdout}\n{done.stderr}"
    return [Call(c["argv"], Path(c["cwd"])) for c in map(json.loads, log.read_text().splitlines())]


def option(argv: Sequence[str], *names: str) -> str | None:
    for i, word in enumerate(argv):
        if word in names and i + 1 < len(argv):
            return argv[i + 1]
        for name in names:
            if name.startswith("--") and word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def positionals(argv: Sequence[str], with_value: Sequence[str]) -> list[str]:
    """Words that are neither flags nor a flag's value."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in with_value
        else:
            out.append(word)
    return out


def image_repository(image: str) -> str:
    """registry.example.com:5000/x/gpu-class:0.2.0 -> registry.example.com:5000/x/gpu-class"""
    name = image.split("@")[0]
    head, _, tail = name.rpartition("/")
    return f"{head}/{tail.split(':')[0]}" if head else tail.split(":")[0]


@dataclass
class Replay:
    """What the steps made so far, checked call by call."""

    built: dict[str, str] = field(default_factory=dict)  # image -> the Dockerfile it was built from
    pushed: set[str] = field(default_factory=set)
    namespaces: set[str] = field(default_factory=set)
    installed: list[Obj] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def docker(self, call: Call) -> None:
        words = call.argv[1:]
        if words[0] == "build":
            tag, context = option(words, "-t", "--tag"), positionals(words[1:], ("-t", "--tag", "-f", "--file"))
            dockerfile = call.cwd / context[-1] / (option(words, "-f", "--file") or "Dockerfile")
            if tag is None or not dockerfile.is_file():
                self.problems.append(f"{call}: builds no tagged image from a Dockerfile that exists")
            else:
                self.built[tag] = dockerfile.relative_to(call.cwd).as_posix()
        elif words[0] == "push" and words[1] not in self.built:
            self.problems.append(f"{call}: pushes an image no step built")
        elif words[0] == "push":
            self.pushed.add(words[1])

    def kubectl(self, call: Call) -> None:
        argv = call.argv[1:]
        namespace = option(argv, "-n", "--namespace")
        words = positionals(argv, ("-n", "--namespace", "-f", "--filename", "-k", "--kustomize", "-o", "--output",
                                   "-L", "--label-columns", "--for", "--timeout"))
        if namespace is not None and namespace not in self.namespaces:
            self.problems.append(f"{call}: namespace {namespace} does not exist yet")
        if words[:1] == ["apply"] and (directory := option(argv, "-k", "--kustomize")):
            self.install(call, call.cwd / directory)
        elif words[:1] == ["apply"] and (manifest := option(argv, "-f", "--filename")):
            for obj in yaml.safe_load_all((call.cwd / manifest).read_text()):
                if obj and obj["metadata"].get("namespace", namespace) != namespace:
                    self.problems.append(f"{call}: {deploy.name_of(obj)} is not in namespace {namespace}")
        elif words[:2] == ["create", "namespace"]:
            self.namespaces.add(words[2])
        elif words[:2] == ["label", "namespace"] and words[2] not in self.namespaces:
            self.problems.append(f"{call}: namespace {words[2]} does not exist yet")
        elif words[:1] == ["wait"]:
            for target in words[1:]:
                kind, _, name = target.partition("/")
                if kind == "deployment" and not any(
                        o["kind"] == "Deployment" and o["metadata"]["name"] == name
                        and o["metadata"].get("namespace") == namespace for o in self.installed):
                    self.problems.append(f"{call}: the install has no Deployment {namespace}/{name}")

    def install(self, call: Call, directory: Path) -> None:
        rendered = kustomize(directory)
        if isinstance(rendered, str):
            self.problems.append(f"{call}: kubectl kustomize failed: {rendered}")
            return
        self.installed += rendered
        self.namespaces |= {o["metadata"]["name"] for o in rendered if o["kind"] == "Namespace"}
        for owner, spec in pod_templates(rendered):
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                image = container["image"]
                wanted = DOCKERFILES.get((owner["kind"], owner["metadata"]["name"]))
                if image not in self.pushed:
                    self.problems.append(f"{deploy.name_of(owner)} runs {image}, which no step built and pushed")
                elif self.built[image] != wanted:
                    self.problems.append(f"{deploy.name_of(owner)} runs {image}, built from {self.built[image]}, "
                                         f"not {wanted}")


def replay(calls: Sequence[Call]) -> Replay:
    state = Replay()
    for call in calls:
        getattr(state, call.argv[0])(call)
    return state


@pytest.fixture(scope="module")
def quick_start() -> str:
    blocks = sections(README).get(QUICK_START)
    assert blocks and len(blocks) == 1, f"README.md: one sh block under '{QUICK_START}'"
    return blocks[0]


@pytest.fixture(scope="module")
def calls(quick_start: str, tmp_path_factory: pytest.TempPathFactory) -> list[Call]:
    return run_quick_start(tmp_path_factory.mktemp("quick-start"), quick_start)


def test_the_quick_start_builds_pushes_and_installs_every_image_it_runs(calls: list[Call]) -> None:
    state = replay(calls)
    assert state.problems == []
    assert state.installed, "no step installs gpu-class"
    ran = {(o["kind"], o["metadata"]["name"]) for o, _ in pod_templates(state.installed)}
    assert set(DOCKERFILES) <= ran, "the default install runs the webhook and gpu-class-scheduler"


def test_the_quick_start_waits_for_both_deployments(calls: list[Call]) -> None:
    waited = {word for c in calls if c.argv[0] == "kubectl" and "wait" in c.argv for word in c.argv}
    assert {f"deployment/{name}" for _, name in DOCKERFILES} <= waited


def test_the_quick_start_ends_on_the_node_the_pod_is_bound_to(calls: list[Call]) -> None:
    reads = [c for c in calls if c.argv[0] == "kubectl" and "get" in c.argv]
    pod, node = reads[-2:]
    assert "pod" in pod.argv and "jsonpath={.spec.nodeName}" in pod.argv, pod
    assert positionals(node.argv[1:], ("-L", "-n"))[:2] == ["get", "node"] and BOUND_NODE in node.argv, node
    assert "gpu-type" in node.argv, "the node's GPU type is shown"
    assert not any("annotations" in word for c in reads for word in c.argv), "a check that reads an annotation"


@pytest.mark.parametrize(("script", "problem"), [
    pytest.param(lambda s: re.sub(r"^docker build -t \$REGISTRY/gpu-class-scheduler.*$", "", s, flags=re.M),
                 "gpu-class-scheduler runs", id="scheduler-image-not-built"),
    pytest.param(lambda s: re.sub(r"^\s+- \{name: gpu-class-scheduler.*$", "", s, flags=re.M),
                 f"runs gpu-class-scheduler:{webhook.__version__}, which no step built", id="scheduler-image-not-set"),
    pytest.param(lambda s: s.replace("kubectl create namespace ml-team\n", ""), "namespace ml-team does not exist",
                 id="namespace-not-created"),
    pytest.param(lambda s: s.replace("deploy/scheduler/plugin &&", ". &&"),
                 "built from Dockerfile, not deploy/scheduler/plugin/Dockerfile", id="scheduler-from-webhook-dockerfile"),
])
def test_a_broken_quick_start_is_caught(quick_start: str, tmp_path: Path, script: object, problem: str) -> None:
    assert callable(script)
    state = replay(run_quick_start(tmp_path, script(quick_start)))
    assert any(problem in p for p in state.problems), state.problems


def install_doc_images() -> tuple[set[str], set[str]]:
    """Repositories install.md builds, and the names its kustomize `images:` entry sets."""
    text = INSTALL_DOC.read_text()
    built = {image_repository(m) for m in re.findall(r"docker build -t (\S+)", text)}
    named = set()
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        named |= {entry["name"] for entry in (yaml.safe_load(block) or {}).get("images", [])}
    return built, named


def test_install_doc_builds_and_sets_both_images() -> None:
    built, named = install_doc_images()
    assert built == {"REGISTRY/gpu-class", "REGISTRY/gpu-class-scheduler"}
    assert named == {"gpu-class", "gpu-class-scheduler"}


def test_install_doc_helm_command_runs_only_images_it_built() -> None:
    from test_chart import helm

    built, _ = install_doc_images()
    (command,) = [line for block in sections(INSTALL_DOC).get("With Helm", []) for line in
                  block.replace("\\\n", " ").splitlines() if line.startswith("helm install")]
    # the chart by its path from the repository's root, where the page's commands run
    argv = [str(deploy.REPO / word) if word.startswith("deploy/") else word for word in shlex.split(command)[2:]]
    rendered = [o for o in yaml.safe_load_all(helm("template", *argv, "--kube-version", "1.37.0").stdout) if o]
    images = {image_repository(c["image"]) for _, spec in pod_templates(rendered) for c in spec["containers"]}
    assert images and images <= built, images - built


OLDER_MINORS = "On Kubernetes 1.33 to 1.36"


def test_install_doc_builds_the_image_the_chart_runs_on_an_older_minor(tmp_path: Path) -> None:
    """The steps for an older minor build the plugin's Dockerfile from the minor's context, at the release its
    module files pin, into the tag the chart runs on a cluster of that minor."""
    from test_chart import CHART, helm

    (block,) = sections(INSTALL_DOC)[OLDER_MINORS]
    minor = re.search(r"^MINOR=(\S+)", block, re.M)
    assert minor, block
    calls = run_quick_start(tmp_path, block)
    build = next(c for c in calls if c.argv[:2] == ["docker", "build"])
    context = Path(build.argv[-1])
    assert (context / "Dockerfile").read_bytes() == (deploy.REPO / "deploy/scheduler/plugin/Dockerfile").read_bytes()
    pinned = local_cluster.pinned_version(local_cluster.Release(minor.group(1)).mod(local_cluster.MODULE_DIR),
                                          "k8s.io/kubernetes")
    assert option(build.argv, "--build-arg") == f"KUBE_VERSION={pinned}"
    assert (context / "go.mod").read_text() == local_cluster.Release(minor.group(1)).mod(
        local_cluster.SCHEDULER_MODULE_DIR).read_text()
    rendered = helm("template", "gpu-class", str(CHART), "--namespace", deploy.SYSTEM_NAMESPACE, "--kube-version",
                    pinned[1:], "--set", "scheduler.image.repository=REGISTRY/gpu-class-scheduler").stdout
    images = {c["image"] for _, spec in pod_templates([o for o in yaml.safe_load_all(rendered) if o])
              for c in spec["containers"] if "gpu-class-scheduler" in c["image"]}
    assert images == {option(build.argv, "-t")}
    assert [c.argv for c in calls if c.argv[:2] == ["docker", "push"]] == [["docker", "push", *images]]


# Everything an install may hold: each overlay, the labeller and every optional component that adds objects.
UNINSTALLED = [
    pytest.param([deploy.SELF_MANAGED, "labeller"], ["components/monitoring", deploy.LABEL_GUARD], id="self-managed-all"),
    pytest.param([deploy.CERT_MANAGER], [deploy.EXTENDER], id="cert-manager-extender"),
]


def uninstall_steps() -> list[list[str]]:
    (block, *_) = sections(INSTALL_DOC)["Uninstall"]
    return [shlex.split(line) for line in block.splitlines() if line.startswith("kubectl ")]


def removed_by(steps: Sequence[Sequence[str]], obj: Obj) -> bool:
    """Whether one of the `kubectl delete` steps deletes obj, or the namespace it lives in."""
    meta = obj["metadata"]
    for argv in steps:
        namespace = option(argv, "-n", "--namespace")
        words = positionals(argv[1:], ("-n", "--namespace", "-l", "--selector"))
        if words[:1] != ["delete"]:
            continue
        if words[1:] == ["namespace", meta.get("namespace")] or (obj["kind"] == "Namespace" and words[1:] == [
                "namespace", meta["name"]]):
            return True
        selector = option(argv, "-l", "--selector")
        kinds = words[1].split(",") if len(words) > 1 else []
        if selector is not None and obj["kind"].lower() in kinds and namespace == meta.get("namespace"):
            key, _, value = selector.partition("=")
            if (meta.get("labels") or {}).get(key) == value:
                return True
        if kinds == [obj["kind"].lower()] and words[2:] == [meta["name"]]:
            return True
    return False


@pytest.mark.parametrize(("resources", "components"), UNINSTALLED)
def test_uninstall_removes_every_object_without_the_overlay(tmp_path: Path, resources: list[str],
                                                            components: list[str]) -> None:
    from test_chart import kustomize_install

    steps = uninstall_steps()
    assert not any("-k" in argv or "--kustomize" in argv for argv in steps), "uninstall needs no overlay render"
    objects = kustomize_install(tmp_path, deploy.make_test_certificates(), resources, components)
    assert [deploy.name_of(o) for o in objects if not removed_by(steps, o)] == []


def test_uninstall_removes_the_backstop_binding_first() -> None:
    first = uninstall_steps()[0]
    assert first == ["kubectl", "delete", "validatingadmissionpolicybinding", deploy.BACKSTOP_POLICY]
