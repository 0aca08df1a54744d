"""The image: built from the Dockerfile with podman and run as the Deployment runs it.

tests/tools/image.py makes the base image locally (no registry is reachable) and builds the
Dockerfile on it; the first build takes about 100 s (debootstrap is most of it), later ones reuse
the cached base image, and the image itself while its sources do not change. The container then
runs with the Deployment's security context (user 65532, read-only root filesystem, every capability dropped, no privilege
escalation, /tmp in memory), its args and its file layout under /etc/gpu-class (the shipped
catalog, the certificate in tls/), plus a nodes file for an inventory, since there is no API server
here. A review sent to it over TLS comes back placed. The image is the one built from the sources
as they are (tests/tools/image.py keys it by them), and a test checks that its installed package
is those sources, file for file.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import jsonpatch
import pytest

import test_deploy as deploy
from builders import CATALOG_NODES, assert_valid_pod, make_pod, make_review
from servers import Server, free_port, wait_until_serving, write_certs, write_objects
from tools import image

CONFIG_DIR = "/etc/gpu-class"


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(image.podman_argv(*args), capture_output=True, text=True, timeout=120,
                          env=image.podman_env(), check=False)
    if check and done.returncode != 0:
        pytest.fail(f"podman {' '.join(args)} failed:\n{done.stderr}", pytrace=False)
    return done


@pytest.fixture(scope="module")
def built() -> str:
    try:
        return image.build_image(lambda line: print(line, flush=True))
    except image.ImageError as e:
        pytest.fail(f"the image could not be built: {e}", pytrace=False)


def deployment_args() -> list[str]:
    """The args the Deployment passes (test_deploy checks them against the kustomize render), with an
    inventory from a file instead of the API, and so no API server to check scrapes with: metrics unchecked, on the
    container's loopback."""
    return [*deploy.SERVE_ARGS, "--nodes", f"{CONFIG_DIR}/nodes.yaml",
            "--metrics-auth", "none", "--metrics-bind", f"127.0.0.1:{deploy.METRICS_PORT}"]


def config_dir(tmp: Path) -> Path:
    """What the Deployment's projected volume holds, readable by group 65532 only (its fsGroup)."""
    root = tmp / "config"
    write_certs(root / "tls", names=("localhost",), ips=("127.0.0.1",))
    shutil.copy(deploy.DEPLOY / deploy.BASE / "catalog.yaml", root / "catalog.yaml")
    write_objects(root / "nodes.yaml", CATALOG_NODES)
    for path in [root, *root.rglob("*")]:
        os.chown(path, 0, deploy.USER_ID)
        path.chmod(0o750 if path.is_dir() else 0o440)
    return root


@pytest.fixture(scope="module")
def running(built: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    tmp = tmp_path_factory.mktemp("image")
    config = config_dir(tmp)
    port = free_port()
    name = f"gpu-class-test-{uuid.uuid4().hex[:8]}"
    log_file = tmp / "container.log"
    argv = image.podman_argv(
        "run", "--rm", "--name", name, "-p", f"127.0.0.1:{port}:{deploy.CONTAINER_PORT}",
        # The Deployment's securityContext.
        "--user", f"{deploy.USER_ID}:{deploy.USER_ID}", "--group-add", str(deploy.USER_ID),
        "--read-only", "--cap-drop=ALL", "--security-opt", "no-new-privileges",
        "--tmpfs", "/tmp:rw,size=64m", "--volume", f"{config}:{CONFIG_DIR}:ro",
        built, *deployment_args(),
    )
    with open(log_file, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=image.podman_env(),
                                   start_new_session=True)
    server = Server(process, port, config / "tls" / "ca.crt", log_file)
    try:
        wait_until_serving(server, timeout_seconds=60)
        yield server, name
    finally:
        podman("rm", "--force", "--time", "5", name, check=False)
        process.wait(timeout=30)


def test_the_image_serves_a_review_over_tls(running: tuple[Server, str]) -> None:
    server, _ = running
    pod = make_pod({"gpu-class.io/class": "high"}, gpu_limit="1")
    status, body = server.post("/mutate", make_review(pod, uid="image-1"))
    assert status == 200, body
    response = body["response"]
    assert response["uid"] == "image-1" and response["allowed"] is True, response
    patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert patched["metadata"]["annotations"]["gpu-class.io/types"].split(",")[0] == "H100"
    assert_valid_pod(patched)


def test_the_image_reports_ready_and_metrics(running: tuple[Server, str]) -> None:
    server, name = running
    assert server.get("/readyz")[0] == 200
    assert server.get("/metrics")[0] == 404, "the admission port serves no metrics"
    # the metrics listener, from inside the container (loopback there)
    done = podman("exec", name, "python3", "-c",
                  "import ssl, urllib.request; print(urllib.request.urlopen("
                  f"'https://127.0.0.1:{deploy.METRICS_PORT}/metrics', context=ssl._create_unverified_context())"
                  ".read().decode())")
    assert "gpu_class_certificate_expiry_timestamp_seconds" in done.stdout


def test_the_container_runs_locked_down(running: tuple[Server, str]) -> None:
    _, name = running
    done = podman("exec", name, "sh", "-c",
                  "id -u; grep ^CapEff /proc/1/status; touch /probe 2>&1 || true; touch /tmp/probe && echo tmp-ok")
    lines = done.stdout.splitlines()
    assert lines[0] == str(deploy.USER_ID)
    assert lines[1].split() == ["CapEff:", "0000000000000000"]
    assert "Read-only file system" in lines[2]
    assert lines[3] == "tmp-ok", "the Deployment's /tmp emptyDir"


def test_the_image_keeps_no_pip(built: str) -> None:
    """The Dockerfile uninstalls pip once it has installed the wheels."""
    done = podman("run", "--rm", "--entrypoint", "python3", built, "-c", "import pip", check=False)
    assert done.returncode != 0 and "No module named 'pip'" in done.stderr


# Run in the image: the files of the installed package, and their digests.
INSTALLED_FILES = """
import hashlib, json, pathlib, webhook
root = pathlib.Path(webhook.__file__).parent
print(json.dumps({str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                  for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}))
"""


def test_the_image_holds_these_sources(built: str) -> None:
    """An image of older sources would pass or fail for the wrong reasons: what is installed in it
    is exactly the package as the checkout has it."""
    done = podman("run", "--rm", "--entrypoint", "python3", built, "-c", INSTALLED_FILES)
    installed: dict[str, str] = json.loads(done.stdout)
    package = deploy.REPO / "webhook"
    sources = {str(p.relative_to(package)): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert {k for k in sources if k.endswith(".py")} <= set(installed), "a module is missing"
    assert {k: sources.get(k) for k in installed} == installed, "the image holds other sources"
