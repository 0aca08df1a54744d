"""The older Kubernetes minors gpu-class-scheduler is built for (tests/e2e/local_cluster.py's Release): each
has module files for the control plane and for the scheduler, pinned at one release, and patches that still
apply to the plugin as it is. Building and running each minor is the command docs/operators/compatibility.md
gives; the suite runs the newest."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
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


def make_context(minor: str, out: Path, context: Path = local_cluster.SCHEDULER_CONTEXT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(context), minor, str(out)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("minor", MINORS)
def test_the_minors_patches_apply_to_the_plugin_as_it_is(minor: str, tmp_path: Path) -> None:
    made = make_context(minor, tmp_path / "src")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == kubernetes_pin(Release(minor).mod(MODULE_DIR))
    assert (tmp_path / "src" / "go.mod").read_text() == Release(minor).mod(SCHEDULER_MODULE_DIR).read_text()
    changed = [p for p in (tmp_path / "src").rglob("*.go")
               if p.read_text() != (SCHEDULER_MODULE_DIR / p.relative_to(tmp_path / "src")).read_text()]
    assert changed and not list((tmp_path / "src").rglob("*_test.go")), changed


@pytest.mark.parametrize("minor", MINORS)
def test_the_minors_scheduler_compiles(minor: str, tmp_path: Path) -> None:
    """What the minor's image builds (the plugin's Dockerfile in its context): a change to the plugin that its
    patches do not carry to an older minor fails here, not in a user's docker build."""
    assert make_context(minor, tmp_path / "src").returncode == 0
    go = local_cluster.go_toolchain(f"gpu-class-scheduler for Kubernetes {minor} is built with Go")
    done = subprocess.run([go, "build", "-trimpath", "-o", os.devnull, "./cmd/gpu-class-scheduler"], cwd=tmp_path / "src",
                          env=local_cluster.go_env(), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]


def test_a_patch_that_no_longer_applies_says_which(tmp_path: Path) -> None:
    scheduler = tmp_path / "deploy" / "scheduler"
    shutil.copytree(RELEASE_DIRS[SCHEDULER_MODULE_DIR], scheduler / "releases")
    shutil.copytree(SCHEDULER_MODULE_DIR, scheduler / "plugin")
    plugin = scheduler / "plugin" / "nodelabelindex" / "plugin.go"
    plugin.write_text(plugin.read_text().replace("fwk.AssignedPod", "fwk.UnscheduledPod"))
    made = make_context(MINORS[-1], tmp_path / "src", scheduler / "releases" / "context")
    assert made.returncode == 1
    assert "patches/assigned-pod-events.patch no longer applies to deploy/scheduler/plugin" in made.stderr


@pytest.mark.parametrize(("argv", "error"), [
    (["1.30", "out"], r"no 1\.30\.mod in \S+: Kubernetes 1\.30 is not a minor gpu-class-scheduler is built for"),
    ([], r"usage: \S+ MINOR DIR +\(MINOR: one of " + " ".join(re.escape(m) for m in MINORS)),
])
def test_the_context_script_refuses_what_it_cannot_build(argv: list[str], error: str, tmp_path: Path) -> None:
    made = subprocess.run([str(local_cluster.SCHEDULER_CONTEXT), *argv], capture_output=True, text=True, cwd=tmp_path)
    assert made.returncode != 0 and re.search(error, made.stderr), made.stderr
    assert not (tmp_path / "out").exists()


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
