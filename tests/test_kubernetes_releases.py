"""The older Kubernetes minors gpu-class-scheduler is built for (tests/e2e/local_cluster.py's Release): each
has module files for the control plane and for the scheduler, pinned at one release, and patches that still
apply to the plugin as it is. Building and running each minor is the command docs/operators/compatibility.md
gives; the suite runs the newest."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import local_cluster
from local_cluster import MODULE_DIR, RELEASE_DIRS, SCHEDULER_MODULE_DIR, ClusterError, Release

MINORS = local_cluster.older_minors()


def kubernetes_pin(mod: Path) -> str:
    return local_cluster.pinned_version(mod, "k8s.io/kubernetes")


def test_there_are_older_minors_and_the_newest_is_go_mods() -> None:
    newest = kubernetes_pin(MODULE_DIR / "go.mod")
    assert MINORS and all([int(x) for x in m.split(".")] < [int(x) for x in newest[1:].split(".")[:2]] for m in MINORS)
    assert Release(None).mod(MODULE_DIR) == MODULE_DIR / "go.mod"


@pytest.mark.parametrize("minor", MINORS)
def test_both_modules_pin_one_release_of_the_minor(minor: str) -> None:
    release = Release(minor)
    pins = {kubernetes_pin(release.mod(d)) for d in RELEASE_DIRS}
    assert len(pins) == 1 and next(iter(pins)).startswith(f"v{minor}."), pins
    staging = "v0." + next(iter(pins))[3:]
    for module_dir in RELEASE_DIRS:
        text = release.mod(module_dir).read_text()
        replaced = dict(re.findall(r"^\s*(k8s\.io/\S+) => \S+ (v\S+)", text, re.M))
        assert replaced and set(replaced.values()) == {staging}, (module_dir, replaced)
        # the module's own lines are go.mod's
        for line in re.findall(r"^(?:module|go|godebug) .*$", (module_dir / "go.mod").read_text(), re.M):
            assert re.search(rf"^{re.escape(line)}$", text, re.M), (module_dir, line)
        assert release.sum(module_dir).read_text().strip(), release.sum(module_dir)


@pytest.mark.parametrize("minor", MINORS)
def test_the_minors_patches_apply_to_the_plugin_as_it_is(minor: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCLASS_CACHE", str(tmp_path))
    release = Release(minor)
    overlay = release.go_flags(SCHEDULER_MODULE_DIR, "go")[-1]
    assert overlay.startswith("-overlay="), overlay
    replaced = local_cluster.json.loads(Path(overlay.split("=", 1)[1]).read_text())["Replace"]
    assert replaced and all(Path(src).read_text() != Path(dst).read_text() for src, dst in replaced.items())


def test_a_patch_that_no_longer_applies_says_which(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCLASS_CACHE", str(tmp_path / "cache"))
    module = tmp_path / "plugin"
    shutil.copytree(SCHEDULER_MODULE_DIR / "nodelabelindex", module / "nodelabelindex")
    plugin = module / "nodelabelindex" / "plugin.go"
    plugin.write_text(plugin.read_text().replace("fwk.AssignedPod", "fwk.UnscheduledPod"))
    with pytest.raises(ClusterError, match=r"assigned-pod-events\.patch no longer applies"):
        Release(MINORS[-1])._patched(module)


@pytest.mark.parametrize(("value", "error"), [
    ("", None),
    (MINORS[-1], None),
    ("1.30", r"GPUCLASS_KUBERNETES_MINOR=1\.30: tests/e2e/cluster/releases has no module files for it"),
    ("1.37", r"unset it for go\.mod's release"),
])
def test_the_minor_is_chosen_by_the_environment(value: str, error: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(local_cluster.MINOR_ENV, value)
    if error is None:
        assert Release.chosen() == Release(value or None)
    else:
        with pytest.raises(ClusterError, match=error):
            Release.chosen()
