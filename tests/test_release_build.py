"""`.ci/release build`, run as docs/contributors/releases.md shows it, for the newest Kubernetes minor (each older
minor's build is the same code with another context; building them all would compile Kubernetes four more times).

What it wrote is checked against what it built: the manifest's digests are the OCI layouts' (so values.yaml pins
the bytes in the layouts), each layout holds the image podman built (its config is the image ID, its labels name
the commit and the base), the release leaves none of its images in podman's shared storage, each base is
pinned by the digest podman has for it, values.yaml makes `helm template` pull those digests, and each SBOM is
about its image and lists what the image holds (the lock's releases; the Kubernetes release the minor pins).

It builds without podman's layer cache (about three minutes on 2 shared cores, most of it pip's downloads).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import local_cluster
import test_chart
import webhook
from test_release import pod_images
from tools import image
from tools.lockfile import normalise, parse_lock
from tools.release import LOCK, REPO, chart_minors, git
from tools import release_outputs
from tools.release_outputs import SCHEDULER, WEBHOOK

pytestmark = pytest.mark.slow
NEWEST, _ = chart_minors()


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("release")
    done = subprocess.run([str(REPO / ".ci" / "release"), "build", "--out", str(out), "--minor", NEWEST,
                           "--allow-modified"], capture_output=True, text=True, timeout=1800)
    print(done.stdout)
    if done.returncode != 0:
        pytest.fail(f".ci/release build failed:\n{done.stdout}\n{done.stderr}", pytrace=False)
    return out


def manifest(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return data


def layout_digest(layout: Path, tag: str) -> str:
    index = json.loads((layout / "index.json").read_text())
    (found,) = [m["digest"] for m in index["manifests"]
                if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
    return str(found)


def blob(layout: Path, digest: str) -> str:
    return (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_text()


def test_the_manifest_names_the_version_the_commit_and_one_image_each(released: Path) -> None:
    written = manifest(released)
    assert written["version"] == webhook.__version__
    newest_section = release_outputs.CHANGELOG_SECTION.findall((REPO / "CHANGELOG.md").read_text())[0]
    assert newest_section == (webhook.__version__, written["changelog"])
    assert written["commit"] == git("rev-parse", "HEAD").strip()
    assert [(i["repository"], i["tag"], i["minor"]) for i in written["images"]] == [
        (WEBHOOK, webhook.__version__, None), (SCHEDULER, webhook.__version__, NEWEST)]


def test_each_digest_is_the_layouts_and_the_layout_holds_the_built_image(released: Path) -> None:
    for built in manifest(released)["images"]:
        layout = released / built["layout"]
        digest = layout_digest(layout, built["tag"])
        assert built["digest"] == digest
        config = json.loads(blob(layout, digest))["config"]
        assert config["digest"] == built["image_id"]
        labels = json.loads(blob(layout, config["digest"]))["config"]["Labels"]
        assert labels["org.opencontainers.image.base.digest"] == built["base"].partition("@")[2]
        assert labels["org.opencontainers.image.revision"] == manifest(released)["commit"]


def test_the_release_leaves_no_image_in_podmans_storage(released: Path) -> None:
    commit = manifest(released)["commit"]
    assert image.podman("images", "--all", "--filter", f"label=org.opencontainers.image.revision={commit}",
                        "--quiet") == ""


def test_each_base_is_pinned_by_the_digest_podman_has_for_it(released: Path) -> None:
    for built in manifest(released)["images"]:
        name, _, digest = built["base"].partition("@")
        assert image.podman("image", "inspect", "--format", "{{.Digest}}", built["base"]).strip() == digest, name


def test_the_values_make_the_chart_pull_the_built_digests(released: Path) -> None:
    digests = {i["repository"]: i["digest"] for i in manifest(released)["images"]}
    values = yaml.safe_load((released / "values.yaml").read_text())
    assert values == {"image": {"digest": digests[WEBHOOK]},
                      "scheduler": {"image": {"digests": {NEWEST: digests[SCHEDULER]}}}}
    objects = test_chart.template("-f", str(released / "values.yaml"), "--kube-version", f"{NEWEST}.0")
    images = pod_images(objects)
    assert images["gpu-class"] == [f"{WEBHOOK}@{digests[WEBHOOK]}"]
    assert images["gpu-class-scheduler"] == [f"{SCHEDULER}@{digests[SCHEDULER]}"]


def components(out: Path, built: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    bom = json.loads((out / built["sbom"]).read_text())
    return bom, {c["name"]: c.get("version", "") for c in bom["components"]}


def test_the_sboms_are_about_their_images_and_list_what_they_hold(released: Path) -> None:
    webhook_image, scheduler_image = manifest(released)["images"]
    bom, found = components(released, webhook_image)
    assert bom["bomFormat"] == "CycloneDX" and webhook_image["digest"][7:] in bom["metadata"]["component"]["purl"]
    locked = {p.name: p.version for p in parse_lock(LOCK.read_text())}
    assert {normalise(n): v for n, v in found.items() if normalise(n) in locked} == locked
    assert found["gpu-class"] == webhook.__version__
    bom, found = components(released, scheduler_image)
    assert scheduler_image["digest"][7:] in bom["metadata"]["component"]["purl"]
    kubernetes = local_cluster.pinned_version(local_cluster.SCHEDULER_MODULE_DIR / "go.mod", "k8s.io/kubernetes")
    assert found["k8s.io/kubernetes"] == kubernetes
