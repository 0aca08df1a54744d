"""Tests for the node labeller (webhook.core.labeller.labels, webhook.cluster.labeller): the pure label decision and patch, nvidia-smi execution, and the
node round trip against the fake API server (real kubernetes client over loopback HTTP)."""

from __future__ import annotations

import io
import json
import logging
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client import CoreV1Api

from builders import RecordedFlag
from fakeapi import FakeApiServer, merge_patch
from webhook.cluster.labeller import (
    MERGE_PATCH_CONTENT_TYPE,
    NvidiaSmiError,
    main_label_node,
    run_label_node,
    run_nvidia_smi,
)
from webhook.core.labeller.labels import (
    GPU_COUNT_LABEL,
    GPU_MEMORY_LABEL,
    GPU_MIG_ENABLED_LABEL,
    GPU_MODELS_MIXED_LABEL,
    GPU_TYPE_LABEL,
    OWNED_LABELS,
    NodeGpuSummary,
    build_desired_labels,
    build_full_label_patch,
    build_label_patch,
    gpu_model_label_value,
    is_valid_label_value,
    sanitise_label_value,
    summarise_gpus,
)
from webhook.core.labeller.nvidia_smi import Gpu, MigMode, parse_nvidia_smi_output

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"
A100_8X = "csv_name-memtotal-driver_8x_A100-SXM4-80GB.csv"
A100_LABELS = {GPU_TYPE_LABEL: "NVIDIA-A100-SXM4-80GB", GPU_COUNT_LABEL: "8", GPU_MEMORY_LABEL: "81920"}
OTHER_LABELS = {
    "kubernetes.io/hostname": "gpu-1",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.count": "8",
    "gpu-class.io/inject": "enabled",
    "gpu-type-note": "set by hand",
}


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def gpu(name: str, memory_mib: int | None = 81920, mig_mode: MigMode = "disabled", index: int = 0) -> Gpu:
    return Gpu(index=index, name=name, memory_mib=memory_mib, mig_mode=mig_mode)


# ------------------------------------------------------------------ label values


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", id="nvidia-prefix-kept"),
        pytest.param("Tesla V100-SXM2-16GB", "Tesla-V100-SXM2-16GB", id="tesla"),
        pytest.param("A100-SXM4-40GB", "A100-SXM4-40GB", id="old-driver-no-prefix-unchanged"),
        pytest.param("Tesla T4", "Tesla-T4", id="tesla-t4-as-gfd"),
        pytest.param("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", id="h100-as-gfd"),
        pytest.param("NVIDIA A100 80GB PCIe", "NVIDIA-A100-80GB-PCIe", id="a100-pcie-as-gfd"),
        pytest.param("NVIDIA GeForce RTX 5090", "NVIDIA-GeForce-RTX-5090", id="geforce-as-gfd"),
        pytest.param("  NVIDIA L4  ", "NVIDIA-L4", id="outer-spaces-trimmed"),
        pytest.param("NVIDIA RTX 6000 Ada Generation", "NVIDIA-RTX-6000-Ada-Generation", id="several-spaces"),
        pytest.param("Quadro RTX 6000/8000", "Quadro-RTX-6000-8000", id="slash-sanitised"),
        pytest.param("NVIDIA Graphics Device (rev a1)", "NVIDIA-Graphics-Device--rev-a1", id="parens-sanitised-end-trimmed"),
        pytest.param("NVIDIA GéForce", "NVIDIA-G-Force", id="non-ascii-sanitised"),
        pytest.param("-NVIDIA A10.", "NVIDIA-A10", id="non-alphanumeric-ends-dropped"),
        pytest.param("NVIDIA " + "X" * 70, "NVIDIA-" + "X" * 56, id="cut-to-63"),
        pytest.param("NVIDIA " + "Y" * 55 + " Z", "NVIDIA-" + "Y" * 55, id="cut-then-trailing-dash-dropped"),
        pytest.param("???", None, id="nothing-usable"),
        pytest.param("", None, id="empty"),
    ],
)
def test_gpu_model_label_value(name: str, expected: str | None) -> None:
    value = gpu_model_label_value(name)
    assert value == expected
    assert value is None or is_valid_label_value(value)


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        pytest.param("", True, id="empty-is-valid"),
        pytest.param("a", True, id="one-char"),
        pytest.param("A100-SXM4-40GB-MIG-1g.5gb", True, id="dots-dashes"),
        pytest.param("x" * 63, True, id="63-chars"),
        pytest.param("x" * 64, False, id="64-chars"),
        pytest.param("-a", False, id="starts-with-dash"),
        pytest.param("a.", False, id="ends-with-dot"),
        pytest.param("a b", False, id="space"),
        pytest.param("a/b", False, id="slash"),
    ],
)
def test_is_valid_label_value(value: str, valid: bool) -> None:
    assert is_valid_label_value(value) is valid


@given(st.text())
def test_sanitised_values_are_always_valid_and_stable(raw: str) -> None:
    value = sanitise_label_value(raw)
    if value is not None:
        assert value and is_valid_label_value(value)
        assert sanitise_label_value(value) == value


@given(st.from_regex(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?", fullmatch=True))
def test_valid_values_pass_through_unchanged(value: str) -> None:
    assert sanitise_label_value(value) == value


# ------------------------------------------------------------------ decision


@pytest.mark.parametrize(
    ("gpus", "labels"),
    [
        pytest.param(
            [gpu("NVIDIA H100 80GB HBM3", 81559, index=i) for i in range(8)],
            {GPU_TYPE_LABEL: "NVIDIA-H100-80GB-HBM3", GPU_COUNT_LABEL: "8", GPU_MEMORY_LABEL: "81559"},
            id="uniform-node",
        ),
        pytest.param(
            [gpu("NVIDIA A100-SXM4-80GB", 81920), gpu("NVIDIA A100-SXM4-40GB", 40960, index=1)],
            {GPU_COUNT_LABEL: "2", GPU_MEMORY_LABEL: "40960", GPU_MODELS_MIXED_LABEL: "true"},
            id="mixed-models-no-gpu-type-min-memory",
        ),
        pytest.param(
            [gpu("NVIDIA L40S", 46068, index=i) for i in range(6)] + [gpu("NVIDIA L4", 23034, index=6 + i) for i in range(2)],
            {GPU_COUNT_LABEL: "8", GPU_MEMORY_LABEL: "23034", GPU_MODELS_MIXED_LABEL: "true"},
            id="mixed-majority-still-no-gpu-type",
        ),
        pytest.param(
            [gpu("NVIDIA A100-SXM4-80GB", 81920, "enabled", index=i) for i in range(8)],
            {GPU_MIG_ENABLED_LABEL: "true"},
            id="all-mig-no-whole-gpu",
        ),
        pytest.param(
            [gpu("NVIDIA A100-SXM4-80GB", 81920, "enabled")] + [gpu("NVIDIA A100-SXM4-80GB", 81920, index=i) for i in (1, 2, 3)],
            {GPU_TYPE_LABEL: "NVIDIA-A100-SXM4-80GB", GPU_COUNT_LABEL: "3", GPU_MEMORY_LABEL: "81920", GPU_MIG_ENABLED_LABEL: "true"},
            id="partial-mig-whole-gpus-counted",
        ),
        pytest.param(
            [gpu("NVIDIA H100 80GB HBM3", 81559, "enabled"), gpu("NVIDIA A100-SXM4-80GB", 81920, index=1)],
            {GPU_TYPE_LABEL: "NVIDIA-A100-SXM4-80GB", GPU_COUNT_LABEL: "1", GPU_MEMORY_LABEL: "81920", GPU_MIG_ENABLED_LABEL: "true"},
            id="mig-gpu-of-other-model-does-not-make-node-mixed",
        ),
        pytest.param(
            [gpu("Tesla T4", 15360, "unsupported"), gpu("Tesla T4", None, "unsupported", index=1)],
            {GPU_TYPE_LABEL: "Tesla-T4", GPU_COUNT_LABEL: "2"},
            id="memory-unknown-on-one-gpu-no-memory-label",
        ),
        pytest.param(
            [gpu("GeForce GTX 1660 Ti", None, "unknown")],
            {GPU_TYPE_LABEL: "GeForce-GTX-1660-Ti", GPU_COUNT_LABEL: "1"},
            id="mig-unknown-counts-as-whole",
        ),
        pytest.param(
            [gpu("???", 1024)],
            {GPU_COUNT_LABEL: "1", GPU_MEMORY_LABEL: "1024"},
            id="unusable-name-no-gpu-type",
        ),
        pytest.param([], {}, id="no-gpus-no-labels"),
    ],
)
def test_desired_labels(gpus: list[Gpu], labels: dict[str, str]) -> None:
    desired = build_desired_labels(summarise_gpus(gpus))
    assert desired == labels
    assert set(desired) <= set(OWNED_LABELS)
    assert all(is_valid_label_value(value) for value in desired.values())


def test_summary_explains_what_it_left_out() -> None:
    summary = summarise_gpus([gpu("NVIDIA L4", 23034), gpu("NVIDIA L40S", 46068, index=1), gpu("NVIDIA L4", 23034, "enabled", index=2)])
    assert summary == NodeGpuSummary(
        gpu_type=None,
        whole_gpu_count=2,
        min_memory_mib=23034,
        models=("NVIDIA-L4", "NVIDIA-L40S"),
        mig_gpu_count=1,
        notes=summary.notes,
    )
    assert summary.models_mixed
    assert any("NVIDIA-L4, NVIDIA-L40S" in note for note in summary.notes)
    assert any("MIG" in note for note in summary.notes)


@pytest.mark.parametrize(
    ("name", "labels"),
    [
        pytest.param(A100_8X, A100_LABELS, id="real-8x-a100-80gb"),
        pytest.param(
            "csv_index-name-memtotal-memused-util_2x_RTX-A6000.csv",
            {GPU_TYPE_LABEL: "NVIDIA-RTX-A6000", GPU_COUNT_LABEL: "2", GPU_MEMORY_LABEL: "49140"},
            id="real-2x-rtx-a6000",
        ),
        pytest.param(
            # GFD's documented labels for this GPU are product Tesla-T4, memory 15360: the same values.
            "nvidia-cloud-native-docs_gpu-sharing_nvidia-smi_TeslaT4_timesliced.txt",
            {GPU_TYPE_LABEL: "Tesla-T4", GPU_COUNT_LABEL: "1", GPU_MEMORY_LABEL: "15360"},
            id="real-tesla-t4-matches-gfd-labels",
        ),
        pytest.param(
            "nvidia-cloud-native-docs_gpu-operator-mig_nvidia-smi-L_A100-SXM4-40GB_7x1g.5gb.txt",
            {GPU_MIG_ENABLED_LABEL: "true"},
            id="real-a100-all-mig-slices",
        ),
        pytest.param(
            "L_GTX1660Ti_from_issue.txt",
            {GPU_TYPE_LABEL: "GeForce-GTX-1660-Ti", GPU_COUNT_LABEL: "1"},
            id="real-list-gpus-no-memory",
        ),
    ],
)
def test_desired_labels_from_recorded_outputs(name: str, labels: dict[str, str]) -> None:
    assert build_desired_labels(summarise_gpus(parse_nvidia_smi_output(fixture(name)))) == labels


@pytest.mark.parametrize(
    ("name", "catalog_type"),
    [
        pytest.param("NVIDIA A100-SXM4-80GB", "A100-80GB", id="a100-80gb"),
        pytest.param("A100-SXM4-40GB", "A100-40GB", id="a100-40gb-old-driver"),
        pytest.param("NVIDIA H100 80GB HBM3", "H100", id="h100"),
        pytest.param("NVIDIA H200", "H200", id="h200"),
        pytest.param("Tesla T4", "T4", id="t4"),
        pytest.param("Tesla V100-SXM2-16GB", "V100", id="v100"),
    ],
)
def test_gpu_type_values_are_what_the_built_in_catalog_matches(name: str, catalog_type: str) -> None:
    from webhook.core.catalog.loading import load_default_catalog

    value = gpu_model_label_value(name)
    assert value is not None
    assert load_default_catalog().type_of_product(value) == catalog_type


# ------------------------------------------------------------------ patch


@pytest.mark.parametrize(
    ("current", "desired", "patch_labels"),
    [
        pytest.param(OTHER_LABELS, A100_LABELS, A100_LABELS, id="fresh-node-sets-all"),
        pytest.param({**OTHER_LABELS, **A100_LABELS}, A100_LABELS, None, id="up-to-date-no-patch"),
        pytest.param(
            {**OTHER_LABELS, **A100_LABELS, GPU_COUNT_LABEL: "7"}, A100_LABELS, {GPU_COUNT_LABEL: "8"}, id="changed-value-only"
        ),
        pytest.param(
            {**OTHER_LABELS, GPU_TYPE_LABEL: "Tesla-T4", GPU_MODELS_MIXED_LABEL: "true", GPU_MIG_ENABLED_LABEL: "true"},
            A100_LABELS,
            {**A100_LABELS, GPU_MODELS_MIXED_LABEL: None, GPU_MIG_ENABLED_LABEL: None},
            id="stale-own-labels-removed",
        ),
        pytest.param(
            {**OTHER_LABELS, GPU_TYPE_LABEL: "NVIDIA-A100-SXM4-80GB", GPU_COUNT_LABEL: "8", GPU_MEMORY_LABEL: "81920"},
            {GPU_COUNT_LABEL: "2", GPU_MEMORY_LABEL: "40960", GPU_MODELS_MIXED_LABEL: "true"},
            {GPU_TYPE_LABEL: None, GPU_COUNT_LABEL: "2", GPU_MEMORY_LABEL: "40960", GPU_MODELS_MIXED_LABEL: "true"},
            id="hand-set-gpu-type-removed-when-mixed",
        ),
        pytest.param({**OTHER_LABELS, **A100_LABELS}, {}, {key: None for key in A100_LABELS}, id="nothing-desired-all-removed"),
        pytest.param(OTHER_LABELS, {}, None, id="nothing-desired-nothing-there"),
        pytest.param({}, A100_LABELS, A100_LABELS, id="node-without-labels"),
    ],
)
def test_build_label_patch(current: dict[str, str], desired: dict[str, str], patch_labels: dict[str, str | None] | None) -> None:
    patch = build_label_patch(current, desired)
    if patch_labels is None:
        assert patch is None
        return
    assert patch == {"metadata": {"labels": patch_labels}}
    assert set(patch["metadata"]["labels"]) <= set(OWNED_LABELS)
    # Applied as the API server applies a merge patch: own labels as desired, all others untouched.
    node = {"metadata": {"name": "gpu-1", "labels": dict(current)}}
    patched = merge_patch(node, patch)
    others = {k: v for k, v in current.items() if k not in OWNED_LABELS}
    assert patched["metadata"]["labels"] == {**others, **desired}


def test_label_patch_refuses_foreign_keys() -> None:
    with pytest.raises(ValueError, match="nvidia.com/gpu.product"):
        build_label_patch({}, {"nvidia.com/gpu.product": "x"})


def test_full_label_patch_names_every_owned_key() -> None:
    patch = build_full_label_patch(A100_LABELS)
    assert patch["metadata"]["labels"] == {
        GPU_TYPE_LABEL: "NVIDIA-A100-SXM4-80GB",
        GPU_COUNT_LABEL: "8",
        GPU_MEMORY_LABEL: "81920",
        GPU_MODELS_MIXED_LABEL: None,
        GPU_MIG_ENABLED_LABEL: None,
    }
    stale = {"metadata": {"labels": {**OTHER_LABELS, GPU_MODELS_MIXED_LABEL: "true"}}}
    assert merge_patch(stale, patch)["metadata"]["labels"] == {**OTHER_LABELS, **A100_LABELS}


# ------------------------------------------------------------------ running nvidia-smi


def write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def fake_smi_dir(tmp_path: Path) -> Path:
    """A folder holding an `nvidia-smi` that prints the 8x A100 recording and logs its arguments."""
    folder = tmp_path / "bin"
    folder.mkdir()
    write_script(
        folder / "nvidia-smi",
        f'echo "$@" >> "{folder}/calls"\ncat "{FIXTURES / A100_8X}"\n',
    )
    return folder


def test_run_nvidia_smi_returns_stdout_and_asks_for_the_query(fake_smi_dir: Path) -> None:
    script = str(fake_smi_dir / "nvidia-smi")
    text = run_nvidia_smi(command=(script, "--query-gpu=index,name,memory.total,mig.mode.current", "--format=csv,nounits"))
    assert text == fixture(A100_8X)
    assert (fake_smi_dir / "calls").read_text() == "--query-gpu=index,name,memory.total,mig.mode.current --format=csv,nounits\n"


@pytest.mark.parametrize(
    ("body", "timeout_seconds", "message"),
    [
        pytest.param(
            'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver." >&2\nexit 9\n',
            5.0,
            "exited with status 9: NVIDIA-SMI has failed because it couldn't communicate",
            id="driver-not-loaded",
        ),
        pytest.param("exec sleep 10\n", 0.3, "did not finish within 0.3s", id="timeout"),
    ],
)
def test_run_nvidia_smi_failures(tmp_path: Path, body: str, timeout_seconds: float, message: str) -> None:
    script = write_script(tmp_path / "nvidia-smi", body)
    with pytest.raises(NvidiaSmiError, match=message):
        run_nvidia_smi(command=(str(script),), fallback_command=None, timeout_seconds=timeout_seconds)


def test_run_nvidia_smi_missing_executable(tmp_path: Path) -> None:
    with pytest.raises(NvidiaSmiError, match="not found on PATH; in a Pod it comes from the NVIDIA container runtime"):
        run_nvidia_smi(command=(str(tmp_path / "nvidia-smi"),))


def test_old_driver_gets_the_query_without_mig_field(tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "nvidia-smi",
        'case "$1" in *mig.mode.current*) echo \'Field "mig.mode.current" is not a valid field to query.\'; exit 2;; esac\n'
        'printf "index, name, memory.total [MiB]\\n0, Tesla V100-SXM2-16GB, 16160\\n"\n',
    )
    text = run_nvidia_smi(
        command=(str(script), "--query-gpu=index,name,memory.total,mig.mode.current"),
        fallback_command=(str(script), "--query-gpu=index,name,memory.total"),
    )
    assert parse_nvidia_smi_output(text) == (Gpu(index=0, name="Tesla V100-SXM2-16GB", memory_mib=16160, mig_mode="unknown"),)


# ------------------------------------------------------------------ against the fake API server


def make_node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        yield fake
        assert fake.server_errors == []


@pytest.fixture
def api(server: FakeApiServer) -> CoreV1Api:
    return CoreV1Api(server.api_client())


def smi(name: str) -> Any:
    return lambda: fixture(name)


def failing_smi() -> str:
    raise NvidiaSmiError("nvidia-smi not found on PATH")


def node_labels(server: FakeApiServer, name: str = "gpu-1") -> dict[str, str]:
    node = server.get("Node", name)
    assert node is not None
    return dict(node["metadata"].get("labels") or {})


def resource_version(server: FakeApiServer, name: str = "gpu-1") -> str:
    node = server.get("Node", name)
    assert node is not None
    return str(node["metadata"]["resourceVersion"])


def requests(server: FakeApiServer, since: int = 0) -> list[tuple[str, str]]:
    """(method, path) of the requests the server saw, from the `since`-th on."""
    return [(r.method, r.path) for r in server.request_log[since:]]


def run_once(api: CoreV1Api | None, nvidia_smi: Any, *, dry_run: bool = False, out: io.StringIO | None = None) -> int:
    return run_label_node(
        node_name="gpu-1", interval_seconds=300, once=True, dry_run=dry_run, api=api, nvidia_smi=nvidia_smi, out=out or io.StringIO()
    )


def test_labels_a_node_with_one_merge_patch(server: FakeApiServer, api: CoreV1Api) -> None:
    server.create(make_node("gpu-1", OTHER_LABELS))
    assert run_once(api, smi(A100_8X)) == 0
    assert node_labels(server) == {**OTHER_LABELS, **A100_LABELS}
    assert requests(server) == [("GET", "/api/v1/nodes/gpu-1"), ("PATCH", "/api/v1/nodes/gpu-1")]
    assert server.request_log[1].content_type == MERGE_PATCH_CONTENT_TYPE


def test_rerun_changes_nothing(server: FakeApiServer, api: CoreV1Api, caplog: pytest.LogCaptureFixture) -> None:
    server.create(make_node("gpu-1", OTHER_LABELS))
    assert run_once(api, smi(A100_8X)) == 0
    version = resource_version(server)
    seen = len(server.request_log)
    with caplog.at_level(logging.INFO, logger="gpuclass.labeller"):
        assert run_once(api, smi(A100_8X)) == 0
    assert requests(server, since=seen) == [("GET", "/api/v1/nodes/gpu-1")]
    assert caplog.records == []  # a steady node stays quiet
    assert resource_version(server) == version


def test_only_own_labels_touched_and_stale_ones_removed(server: FakeApiServer, api: CoreV1Api) -> None:
    stale = {GPU_TYPE_LABEL: "Tesla-T4", GPU_MEMORY_LABEL: "15360", GPU_MODELS_MIXED_LABEL: "true", GPU_MIG_ENABLED_LABEL: "true"}
    server.create(make_node("gpu-1", {**OTHER_LABELS, **stale}))
    assert run_once(api, smi(A100_8X)) == 0
    assert node_labels(server) == {**OTHER_LABELS, **A100_LABELS}


def test_mixed_node_loses_its_hand_set_gpu_type(server: FakeApiServer, api: CoreV1Api) -> None:
    server.create(make_node("gpu-1", {**OTHER_LABELS, GPU_TYPE_LABEL: "NVIDIA-L40S"}))
    mixed = "index, name, memory.total [MiB], mig.mode.current\n0, NVIDIA L40S, 46068, [N/A]\n1, NVIDIA L4, 23034, [N/A]\n"
    assert run_once(api, lambda: mixed) == 0
    assert node_labels(server) == {
        **OTHER_LABELS,
        GPU_COUNT_LABEL: "2",
        GPU_MEMORY_LABEL: "23034",
        GPU_MODELS_MIXED_LABEL: "true",
    }


@pytest.mark.parametrize(
    "nvidia_smi",
    [
        pytest.param(failing_smi, id="nvidia-smi-missing"),
        pytest.param(lambda: "", id="nvidia-smi-prints-nothing"),
        pytest.param(lambda: "Failed to initialize NVML: Driver/library version mismatch\n", id="nvidia-smi-garbage"),
    ],
)
def test_nvidia_smi_failure_leaves_labels(
    server: FakeApiServer, api: CoreV1Api, nvidia_smi: Any, caplog: pytest.LogCaptureFixture
) -> None:
    before = {**OTHER_LABELS, **A100_LABELS}
    server.create(make_node("gpu-1", before))
    with caplog.at_level(logging.ERROR, logger="gpuclass.labeller"):
        assert run_once(api, nvidia_smi) == 1
    assert node_labels(server) == before
    assert requests(server) == []  # the node is not even read
    assert "labels left unchanged" in caplog.text


def test_dry_run_prints_the_patch_and_makes_no_patch(server: FakeApiServer, api: CoreV1Api) -> None:
    server.create(make_node("gpu-1", {**OTHER_LABELS, GPU_MIG_ENABLED_LABEL: "true"}))
    out = io.StringIO()
    assert run_once(api, smi(A100_8X), dry_run=True, out=out) == 0
    assert json.loads(out.getvalue()) == {"metadata": {"labels": {**A100_LABELS, GPU_MIG_ENABLED_LABEL: None}}}
    assert requests(server) == [("GET", "/api/v1/nodes/gpu-1")]
    assert node_labels(server) == {**OTHER_LABELS, GPU_MIG_ENABLED_LABEL: "true"}


def test_dry_run_on_an_up_to_date_node_prints_an_empty_patch(server: FakeApiServer, api: CoreV1Api) -> None:
    server.create(make_node("gpu-1", {**OTHER_LABELS, **A100_LABELS}))
    out = io.StringIO()
    assert run_once(api, smi(A100_8X), dry_run=True, out=out) == 0
    assert json.loads(out.getvalue()) == {}


def test_dry_run_without_a_cluster_prints_every_owned_key() -> None:
    out = io.StringIO()
    assert run_once(None, smi(A100_8X), dry_run=True, out=out) == 0
    assert json.loads(out.getvalue()) == build_full_label_patch(A100_LABELS)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        pytest.param(500, "HTTP 500", id="server-error"),
        pytest.param(500, "HTTP 500 Internal Server Error: injected failure (500)", id="the-api-servers-message"),
        pytest.param(403, "needs get and patch on nodes", id="forbidden-hint"),
    ],
)
def test_api_failure_leaves_labels_and_fails_once(
    server: FakeApiServer, api: CoreV1Api, status: int, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    server.create(make_node("gpu-1", OTHER_LABELS))
    server.fail_next(1, status)
    with caplog.at_level(logging.ERROR, logger="gpuclass.labeller"):
        assert run_once(api, smi(A100_8X)) == 1
    assert node_labels(server) == OTHER_LABELS
    assert message in caplog.text


def test_missing_node_says_which_name_to_fix(api: CoreV1Api, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="gpuclass.labeller"):
        assert run_once(api, smi(A100_8X)) == 1
    assert "HTTP 404" in caplog.text and "NODE_NAME" in caplog.text


class RecordingStop(threading.Event):
    """Stands in for the loop's sleep: records each delay and stops after `rounds` of them."""

    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.rounds = rounds
        self.delays: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.delays.append(timeout)
        if len(self.delays) >= self.rounds:
            self.set()
        return self.is_set()


def test_loop_backs_off_on_api_errors_then_recovers(server: FakeApiServer, api: CoreV1Api) -> None:
    server.create(make_node("gpu-1", OTHER_LABELS))
    server.fail_next(3, 503)
    stop = RecordingStop(rounds=5)
    result = run_label_node(
        node_name="gpu-1", interval_seconds=12, once=False, dry_run=False, api=api, nvidia_smi=smi(A100_8X), out=io.StringIO(), stop=stop
    )
    assert result == 0
    # 3 failed GETs: 5s, 10s, then 20s capped at the 12s interval; then success and regular rounds.
    assert stop.delays == [5, 10, 12, 12, 12]
    assert node_labels(server) == {**OTHER_LABELS, **A100_LABELS}
    assert [m for m, _ in requests(server)].count("PATCH") == 1


def test_loop_waits_a_full_interval_after_nvidia_smi_fails_and_keeps_going(server: FakeApiServer, api: CoreV1Api) -> None:
    server.create(make_node("gpu-1", OTHER_LABELS))
    outputs = iter([None, fixture(A100_8X), fixture(A100_8X)])

    def flaky() -> str:
        text = next(outputs)
        if text is None:
            raise NvidiaSmiError("nvidia-smi timed out")
        return text

    stop = RecordingStop(rounds=3)
    run_label_node(node_name="gpu-1", interval_seconds=60, once=False, dry_run=False, api=api, nvidia_smi=flaky, out=io.StringIO(), stop=stop)
    assert stop.delays == [60, 60, 60]
    assert node_labels(server) == {**OTHER_LABELS, **A100_LABELS}


def test_loop_survives_an_unexpected_error(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> str:
        raise RuntimeError("bug")

    stop = RecordingStop(rounds=2)
    with caplog.at_level(logging.ERROR, logger="gpuclass.labeller"):
        assert run_label_node(node_name="n", interval_seconds=1, once=False, dry_run=True, api=None, nvidia_smi=broken, stop=stop) == 0
    assert stop.delays == [1, 1]
    assert "unexpected error" in caplog.text


# ------------------------------------------------------------------ entry points


def label_node_args(**overrides: Any) -> Any:
    import argparse

    values: dict[str, Any] = {"node": None, "interval_seconds": 300.0, "once": True, "dry_run": False, "kubeconfig": None}
    values.update(overrides)
    return argparse.Namespace(**values)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param({}, "no node name", id="no-node-name"),
        pytest.param({"node": "gpu-1", "interval_seconds": 0}, "must be positive", id="zero-interval"),
    ],
)
def test_main_rejects_bad_arguments(
    overrides: dict[str, Any], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main_label_node(label_node_args(**overrides)) == 2
    assert message in capsys.readouterr().err


def test_main_labels_through_a_kubeconfig_with_the_real_nvidia_smi_path(
    server: FakeApiServer, fake_smi_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.create(make_node("gpu-1", OTHER_LABELS))
    monkeypatch.setenv("PATH", f"{fake_smi_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NODE_NAME", "gpu-1")
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    assert main_label_node(label_node_args(kubeconfig=str(kubeconfig))) == 0
    assert node_labels(server) == {**OTHER_LABELS, **A100_LABELS}
    assert "--query-gpu=index,name,memory.total,mig.mode.current" in (fake_smi_dir / "calls").read_text()


def test_main_loop_stops_on_sigterm_and_restores_handlers(
    server: FakeApiServer, fake_smi_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal
    import time

    server.create(make_node("gpu-1", OTHER_LABELS))
    monkeypatch.setenv("PATH", f"{fake_smi_dir}{os.pathsep}{os.environ['PATH']}")
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    before = signal.getsignal(signal.SIGTERM)

    def terminate_after_first_patch() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and node_labels(server).get(GPU_TYPE_LABEL) is None:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    # The loop waits its interval on a flag that records why each wait ended; the stop that the SIGTERM handler
    # sets is passed on to it
    waited = RecordedFlag()

    def run_recording_its_waits(**kwargs: Any) -> int:
        stop: threading.Event = kwargs["stop"]

        def relay() -> None:
            stop.wait()
            waited.set()
        threading.Thread(target=relay, daemon=True).start()
        return run_label_node(**{**kwargs, "stop": waited})

    monkeypatch.setattr("webhook.cluster.labeller.run_label_node", run_recording_its_waits)
    killer = threading.Thread(target=terminate_after_first_patch)
    killer.start()
    result = main_label_node(label_node_args(node="gpu-1", once=False, kubeconfig=str(kubeconfig)))
    killer.join()
    assert result == 0
    # one round, then its 300 s interval ended by the SIGTERM's stop, not sat out
    assert [(w.timeout_seconds, w.ended_by_flag) for w in waited.waits] == [(300.0, True)]
    assert node_labels(server) == {**OTHER_LABELS, **A100_LABELS}
    assert signal.getsignal(signal.SIGTERM) is before


def run_module_stdlib_only(args: list[str], path_dir: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """`python -S -m webhook.cli label-node ...`: no site-packages, so only the standard library is importable."""
    env = {"PATH": f"{path_dir}{os.pathsep}/usr/bin:/bin", "HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-S", "-m", "webhook.cli", "label-node", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


def test_module_dry_run_needs_only_the_standard_library(fake_smi_dir: Path, tmp_path: Path) -> None:
    result = run_module_stdlib_only(["--once", "--dry-run", "--node", "test-node"], fake_smi_dir, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == build_full_label_patch(A100_LABELS)
    assert "without the kubernetes package" in result.stderr


def test_module_once_fails_when_nvidia_smi_is_missing(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_module_stdlib_only(["--once", "--dry-run", "--node", "test-node"], empty, tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "nvidia-smi not found" in result.stderr and "labels left unchanged" in result.stderr


# ------------------------------------------------------------------ deploy/labeller


@pytest.fixture(scope="module")
def rendered_labeller() -> list[dict[str, Any]]:
    import shutil

    import kubernetes_validate
    import yaml

    kubectl = Path(sys.executable).parent / "kubectl"
    if not kubectl.exists():
        found = shutil.which("kubectl")
        if found is None:
            pytest.skip("kubectl is not installed")
        kubectl = Path(found)
    rendered = subprocess.run(
        [str(kubectl), "kustomize", str(REPO / "deploy" / "labeller")], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.35", strict=True)
    return objects


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [obj for obj in objects if obj["kind"] == kind]
    return found


def test_labeller_rbac_is_get_and_patch_on_nodes_only(rendered_labeller: list[dict[str, Any]]) -> None:
    assert by_kind(rendered_labeller, "ClusterRole")["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    binding = by_kind(rendered_labeller, "ClusterRoleBinding")
    account = by_kind(rendered_labeller, "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "gpu-class-system"}]
    assert binding["roleRef"]["name"] == by_kind(rendered_labeller, "ClusterRole")["metadata"]["name"]


def test_labeller_daemonset_runs_label_node_on_gpu_nodes(rendered_labeller: list[dict[str, Any]]) -> None:
    from webhook.cli import build_parser

    daemonset = by_kind(rendered_labeller, "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = build_parser().parse_args(container["args"])
    assert (args.command, args.interval_seconds, args.once, args.dry_run) == ("label-node", 300.0, False, False)
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container["env"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in container["env"]
    assert "nvidia.com/gpu" not in str(container.get("resources", {}))  # takes no GPU from workloads
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["serviceAccountName"] == by_kind(rendered_labeller, "ServiceAccount")["metadata"]["name"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in spec["tolerations"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {expr["key"] for term in terms for expr in term["matchExpressions"]}
    assert {"nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present", "gpu-class.io/gpu-node"} <= keys
    security = container["securityContext"]
    assert security["runAsNonRoot"] and security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not any("hostPath" in volume for volume in spec.get("volumes", []))  # the namespace enforces "restricted"
    assert daemonset["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "node-labeller"
