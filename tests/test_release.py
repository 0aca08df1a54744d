"""The release's pure parts (tests/tools/lockfile.py, release_outputs.py) and what the tree ships for it.

- requirements.lock holds exactly the closure of setup.cfg's install_requires, every pin in its range and hashed;
  requirements-build.lock that of pyproject.toml's build-system.requires. A dependency added, dropped or re-ranged
  without `.ci/release lock` fails here, and each kind of drift is shown to be caught on a lock made to drift.
- The Dockerfile installs from the locks with --require-hashes, FROM a base an ARG names (a release passes it by
  digest).
- The values a release writes make `helm template` pull every image of ours by digest, the digest of that
  component (the scheduler's of the cluster's minor), under the registry given.
- An SBOM is about the image: its subject is the image by digest, its base image is a component by digest.

The release command itself builds images (minutes): its reproducibility was shown by two builds from one snapshot
(docs/contributors/releases.md), not here.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import test_chart
import test_deploy as deploy
from test_deploy import Obj
from tools import release
from tools.lockfile import (BUILD_ROOT, RUNTIME_ROOT, LockError, Pin, lock_problems, normalise, parse_lock,
                            requirements_of)
from tools.release_outputs import (SCHEDULER, WEBHOOK, BuiltImage, chart_values, image_sbom, installed_problems,
                                   python_package, version_state)

REPO = deploy.REPO
HASH = "0" * 64
NEWEST, OLDER = release.chart_minors()
MINORS = [*OLDER, NEWEST]  # every minor the chart runs gets a build of its own


def digest(seed: str) -> str:
    return "sha256:" + hashlib.sha256(seed.encode()).hexdigest()


def make_pin(name: str, version: str = "1.0", *, via: tuple[str, ...] = (RUNTIME_ROOT,),
             hashes: tuple[str, ...] = (HASH,)) -> Pin:
    return Pin(name, version, hashes, via)


def make_image(repository: str, minor: str | None = None) -> BuiltImage:
    tag = "0.2.0" if minor in (None, NEWEST) else f"0.2.0-k8s{minor}"
    return BuiltImage(repository, tag, minor, digest(f"id-{repository}-{minor}"), digest(f"{repository}-{minor}"),
                      f"localhost/python@{digest('base')}", f"sbom/{repository}.cdx.json", f"images/{repository}")


# --- the locks ---------------------------------------------------------------------------------------------------

def test_the_shipped_locks_hold_exactly_what_the_project_requires() -> None:
    assert release.lock_report() == []


def test_every_requirement_of_setup_cfg_is_locked_by_name() -> None:
    """The closure check above leans on pip-compile's `# via`; this reads the names alone."""
    locked = {pin.name for pin in parse_lock(release.LOCK.read_text())}
    required = {normalise(r.name) for r in requirements_of(release.runtime_requirements())}
    assert required <= locked
    own = {pin.name for pin in parse_lock(release.LOCK.read_text()) if RUNTIME_ROOT in pin.via}
    assert own == required


LOCK_TEXT = """\
#    .ci/release lock
#
flask==3.1.3 \\
    --hash=sha256:{h} \\
    --hash=sha256:{h}
    # via gpu-class (setup.cfg)
jinja2==3.1.6 \\
    --hash=sha256:{h}
    # via
    #   flask
    #   other
PyYAML==6.0.2 \\
    --hash=sha256:{h}
    # via gpu-class (setup.cfg)
""".format(h=HASH)


def test_a_lock_is_read_with_its_hashes_and_every_via() -> None:
    assert parse_lock(LOCK_TEXT) == [
        Pin("flask", "3.1.3", (HASH, HASH), (RUNTIME_ROOT,)),
        Pin("jinja2", "3.1.6", (HASH,), ("flask", "other")),
        Pin("pyyaml", "6.0.2", (HASH,), (RUNTIME_ROOT,)),
    ]


@pytest.mark.parametrize("line", ["--find-links /opt/wheels", "--index-url https://mirror.example/simple",
                                  "flask>=3.0", "-e ."])
def test_a_lock_line_that_is_no_pin_is_refused(line: str) -> None:
    with pytest.raises(LockError, match="line 3"):
        parse_lock(LOCK_TEXT.replace("flask==3.1.3 \\", line + "\nflask==3.1.3 \\", 1))


REQUIRED = ["Flask>=3.0", "PyYAML>=6.0"]  # the pins below carry the normalised names
LOCK_CASES = [
    pytest.param([make_pin("flask", "3.1"), make_pin("jinja2", via=("flask",)), make_pin("pyyaml", "6.0.2")], [],
                 id="the-closure-hashed"),
    pytest.param([make_pin("flask", "3.1"), make_pin("jinja2", via=("flask",))],
                 ["PyYAML>=6.0 is required but not locked"], id="a-requirement-not-locked"),
    pytest.param([make_pin("flask", "2.3"), make_pin("pyyaml", "6.0.2")],
                 ["flask==2.3 is outside the required Flask>=3.0"], id="a-pin-outside-its-range"),
    pytest.param([make_pin("flask", "3.1", hashes=()), make_pin("pyyaml", "6.0.2")],
                 ["flask==3.1 has no --hash"], id="a-pin-without-hash"),
    pytest.param([make_pin("flask", "3.1"), make_pin("pyyaml", "6.0.2"), make_pin("requests")],
                 ["requests==1.0 is locked as the project's own but it no longer requires it"],
                 id="a-requirement-dropped"),
    pytest.param([make_pin("flask", "3.1"), make_pin("pyyaml", "6.0.2"), make_pin("six", via=("requests",))],
                 ["six is locked but nothing requires it"], id="a-pin-nothing-pulls-in"),
]


@pytest.mark.parametrize("pins,problems", LOCK_CASES)
def test_lock_drift_is_caught(pins: list[Pin], problems: list[str]) -> None:
    assert lock_problems(pins, requirements_of(REQUIRED), RUNTIME_ROOT) == problems


def test_the_build_lock_pins_the_build_backend() -> None:
    pins = parse_lock(release.BUILD_LOCK.read_text())
    assert {"setuptools", "wheel"} <= {p.name for p in pins}
    assert all(BUILD_ROOT in p.via for p in pins if p.name in ("setuptools", "wheel"))


def test_the_dockerfile_installs_only_what_the_locks_hash() -> None:
    text = (REPO / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert froms and set(froms) == {"${BASE_IMAGE}"}, "every stage starts FROM the base a release pins by digest"
    installs = [" ".join(i.split()) for op, i in deploy.dockerfile_instructions() if op == "RUN" and "pip " in i]
    assert installs, "the Dockerfile installs nothing with pip"
    for run in installs:
        for command in re.split(r"&&", run):
            if re.search(r"pip (install|wheel)", command) and "--no-deps" not in command:
                assert "--require-hashes" in command and re.search(r"-r \S*requirements(-build)?\.lock", command), (
                    f"{command.strip()!r} installs without the lock's hashes")


# --- what a release writes ------------------------------------------------------------------------------------

IMAGES = [make_image(WEBHOOK), *(make_image(SCHEDULER, m) for m in MINORS)]
EVERY_COMPONENT = ["--set", "labeller.enabled=true", "--set", "upgrader.enabled=true"]


def pod_images(objects: list[Obj]) -> dict[str, list[str]]:
    """Every image a rendered workload runs, by workload name."""
    found: dict[str, list[str]] = {}
    for obj in objects:
        spec: dict[str, Any] = obj.get("spec", {}).get("template", {}).get("spec", {})
        if obj.get("kind") == "CronJob":
            spec = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        containers = spec.get("containers", []) + spec.get("initContainers", [])
        if containers:
            found[obj["metadata"]["name"]] = [c["image"] for c in containers]
    return found


@pytest.mark.parametrize("registry", [None, "registry.example/platform"])
@pytest.mark.parametrize("minor", MINORS)
def test_the_written_values_pull_every_image_by_its_digest(tmp_path: Path, minor: str, registry: str | None) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(chart_values(IMAGES, registry)))
    objects = test_chart.template("-f", str(values), *EVERY_COMPONENT, "--kube-version", f"{minor}.0")
    images = pod_images(objects)
    prefix = f"{registry}/" if registry else ""
    expected_scheduler = f"{prefix}{SCHEDULER}@{digest(f'{SCHEDULER}-{minor}')}"
    expected_webhook = f"{prefix}{WEBHOOK}@{digest(f'{WEBHOOK}-None')}"
    assert {"gpu-class", "gpu-class-labeller", "gpu-class-upgrader", "gpu-class-scheduler"} <= set(images), images
    for name, refs in images.items():
        for ref in refs:
            assert ref == (expected_scheduler if name == "gpu-class-scheduler" else expected_webhook), (name, ref)


@pytest.mark.parametrize("images,message", [
    pytest.param(IMAGES[1:], "one webhook image", id="no-webhook"),
    pytest.param(IMAGES[:1], "gpu-class-scheduler images", id="no-scheduler"),
    pytest.param([*IMAGES, make_image(SCHEDULER)], "each for its Kubernetes minor", id="a-scheduler-without-minor"),
])
def test_values_are_refused_for_an_incomplete_release(images: list[BuiltImage], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        chart_values(images)


@pytest.mark.parametrize("field,value", [("digest", "0.2.0"), ("image_id", "sha256:abc"),
                                         ("base", "localhost/python:3.12-slim")])
def test_an_image_not_pinned_by_digest_is_refused(field: str, value: str) -> None:
    fields = dict(make_image(WEBHOOK).__dict__, **{field: value})
    with pytest.raises(ValueError, match=field):
        BuiltImage(**fields)


def test_an_sbom_is_about_the_image_and_names_its_base_by_digest() -> None:
    built = make_image(SCHEDULER, "1.36")
    tool_bom = {"bomFormat": "CycloneDX", "specVersion": "1.6", "serialNumber": "urn:uuid:random",
                "metadata": {"component": {"type": "application", "bom-ref": "pkg:golang/gpu-class.io/scheduler",
                                           "name": "gpu-class.io/scheduler"}},
                "components": [{"type": "library", "bom-ref": "pkg:golang/k8s.io/api@v0.36.1", "name": "k8s.io/api"}],
                "dependencies": [{"ref": "pkg:golang/gpu-class.io/scheduler",
                                  "dependsOn": ["pkg:golang/k8s.io/api@v0.36.1"]}]}
    bom = image_sbom(tool_bom, built, timestamp="2026-01-02T03:04:05+00:00")
    subject = bom["metadata"]["component"]
    assert subject["type"] == "container" and subject["version"] == "0.2.0-k8s1.36"
    assert subject["purl"].startswith(f"pkg:oci/{SCHEDULER}@sha256%3A{built.digest[7:]}")
    refs = {c["bom-ref"] for c in bom["components"]} | {subject["bom-ref"]}
    assert {d["ref"] for d in bom["dependencies"]} | {r for d in bom["dependencies"] for r in d["dependsOn"]} <= refs
    (base,) = [c for c in bom["components"] if c["type"] == "container"]
    assert f"{base['name']}@{base['version']}" == built.base
    assert "pkg:golang/gpu-class.io/scheduler" in {c["bom-ref"] for c in bom["components"]}
    assert "serialNumber" not in bom and bom["metadata"]["timestamp"] == "2026-01-02T03:04:05+00:00"
    assert tool_bom["metadata"]["component"]["name"] == "gpu-class.io/scheduler", "the tool's BOM is left as it was"


def test_the_webhooks_sbom_names_the_project_beside_the_lock() -> None:
    bom = image_sbom({"components": []}, make_image(WEBHOOK), timestamp="t", own=python_package("gpu-class", "0.2.0"))
    assert "pkg:pypi/gpu-class@0.2.0" in bom["dependencies"][0]["dependsOn"]


@pytest.mark.parametrize("installed,problems", [
    pytest.param({"flask": "3.1", "gpu-class": "0.2.0"}, [], id="as-locked"),
    pytest.param({"flask": "3.0", "gpu-class": "0.2.0"}, ["the image holds flask 3.0, the lock says 3.1"],
                 id="another-version"),
    pytest.param({"flask": "3.1", "gpu-class": "0.2.0", "pip": "24.0"},
                 ["the image holds pip 24.0, which the lock does not name"], id="a-package-left-behind"),
    pytest.param({"flask": "3.1"}, ["the image lacks gpu-class 0.2.0"], id="the-project-missing"),
])
def test_the_image_must_hold_what_its_sbom_says(installed: dict[str, str], problems: list[str]) -> None:
    assert installed_problems(installed, [make_pin("flask", "3.1")], "gpu-class", "0.2.0") == problems



CHART_0_2_0 = {"version": "0.2.0", "appVersion": "0.2.0"}


@pytest.mark.parametrize("chart,changelog,state,problems", [
    pytest.param(CHART_0_2_0, "# Changelog\n\n## 0.2.0 (unreleased)\n\n## 0.1.0 (2026-01-05)\n", "unreleased", [],
                 id="between-releases"),
    pytest.param(CHART_0_2_0, "## 0.2.0 (2026-12-08)\n", "2026-12-08", [], id="released"),
    pytest.param({"version": "0.2.0", "appVersion": "0.1.0"}, "## 0.2.0 (unreleased)\n", "unreleased",
                 ["Chart.yaml's appVersion is '0.1.0', the package's version 0.2.0"], id="chart-app-version-behind"),
    pytest.param(CHART_0_2_0, "## 0.1.0 (2026-01-05)\n", "",
                 ["CHANGELOG.md's newest section is `## 0.1.0 ...`, not `## 0.2.0 (unreleased or YYYY-MM-DD)`"],
                 id="changelog-without-the-version"),
    pytest.param(CHART_0_2_0, "## Unreleased\n", "",
                 ["CHANGELOG.md's newest section is `## Unreleased ...`, not `## 0.2.0 (unreleased or YYYY-MM-DD)`"],
                 id="changelog-section-without-version"),
])
def test_a_release_is_of_one_version(chart: dict[str, str], changelog: str, state: str, problems: list[str]) -> None:
    assert version_state("0.2.0", chart, changelog) == (state, problems)


def test_the_tree_is_of_one_version() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text()
    state, problems = version_state(release.tree_state().version, yaml.safe_load(release.CHART_YAML.read_text()),
                                    changelog)
    assert problems == [] and state
