"""gpu-class-scheduler's image (deploy/scheduler/plugin/Dockerfile), built with podman and run as the
Deployment runs it.

tests/tools/scheduler_image.py builds it on a local golang base (the webhook image's Debian root
filesystem and the host's Go toolchain) with the host's module and build caches mounted, so that
after local_cluster.build_scheduler() the build is a link, not a compile of Kubernetes.
"""

from __future__ import annotations

import re

import pytest
import yaml

import local_cluster
import test_deploy as deploy
from test_image import podman
from tools import image, scheduler_image

KUBE_VERSION = local_cluster.pinned_version(scheduler_image.CONTEXT / "go.mod", "k8s.io/kubernetes")


def test_the_dockerfile_stamps_the_release_go_mod_pins() -> None:
    (stamped,) = re.findall(r"^ARG KUBE_VERSION=(\S+)$", scheduler_image.DOCKERFILE.read_text(), re.M)
    assert stamped == KUBE_VERSION


@pytest.fixture(scope="module")
def built() -> str:
    try:
        return scheduler_image.build_image(lambda line: print(line, flush=True))
    except (image.ImageError, local_cluster.ClusterError) as e:
        pytest.fail(f"gpu-class-scheduler's image could not be built: {e}", pytrace=False)


def deployment_command() -> str:
    deployment = yaml.safe_load((deploy.DEPLOY / "scheduler" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    command: str = container["command"][0]
    return command


@pytest.mark.parametrize("entrypoint", [
    pytest.param([], id="image-entrypoint"),
    # The Deployment's `command` replaces the ENTRYPOINT and is found on the image's PATH.
    pytest.param(["--entrypoint", deployment_command()], id="deployment-command"),
])
def test_the_image_runs_gpu_class_scheduler_as_the_manifests_user(built: str, entrypoint: list[str]) -> None:
    user = podman("image", "inspect", "--format", "{{.Config.User}}", built).stdout.strip()
    assert user == f"{deploy.USER_ID}:{deploy.USER_ID}"
    # The Deployment's securityContext, as tests/test_image.py runs the webhook's image.
    done = podman("run", "--rm", "--user", user, "--read-only", "--cap-drop=ALL", "--security-opt", "no-new-privileges",
                  "--network", "none", *entrypoint, built, "--version")
    assert done.stdout.strip() == f"Kubernetes {KUBE_VERSION}"
