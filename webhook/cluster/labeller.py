"""The node labeller (``gpuclass label-node``): the manual ``kubectl label nodes <node> gpu-type=<model>``
done by a DaemonSet on clusters without GPU Feature Discovery.

Two halves, kept apart:

* Pure decision (no I/O): GPUs from ``webhook.core.nvidia_smi`` -> ``summarise_gpus`` -> ``build_desired_labels``
  -> ``build_label_patch`` (a JSON merge patch holding only this labeller's keys, or None when the node
  already carries the right values).
* Thin I/O: ``run_nvidia_smi`` (subprocess with a timeout), ``label_node_once`` (GET the Node, PATCH it),
  ``run_label_node`` (the periodic loop with backoff) and ``main_label_node`` (what the CLI calls).

Labels written (and only these; every other label is left alone):

``gpu-type``                       GFD-style model of the node's whole GPUs, e.g. ``NVIDIA-A100-SXM4-80GB``.
                                   Absent when the whole GPUs are of several models, or there are none.
``gpu-class.io/gpu-count``         number of whole (non-MIG) GPUs.
``gpu-class.io/gpu-memory-mib``    the smallest memory.total among the whole GPUs (MiB).
``gpu-class.io/gpu-models-mixed``  ``"true"`` when the whole GPUs are of more than one model.
``gpu-class.io/gpu-mig-enabled``   ``"true"`` when at least one GPU has MIG mode enabled.

Decisions (see ``summarise_gpus``):

* Mixed models: no ``gpu-type``. The webhook places a Pod by ``gpu-type``, and the device plugin hands out
  any free GPU of the node, so naming the majority model would let a Pod that asked for that model land on
  the other one. A node left out of class placement is visible and safe; a wrong placement is silent.
* MIG: a GPU with MIG enabled is offered as slices, not as a whole GPU, so it does not count towards
  ``gpu-type``/``gpu-count``/``gpu-memory-mib``. A node whose GPUs are all MIG-partitioned gets no
  ``gpu-type``: it does not offer the whole GPU a class promises.
* nvidia-smi missing, failing, timing out or printing nothing usable: labels are left as they are
  (the DaemonSet only runs on GPU nodes, so "no GPU visible" means the container cannot see them, not that
  the node has none); the error is logged and the next try is one interval later.

Importing this module needs the standard library only; ``kubernetes`` is imported when an API client is
built, so ``python -m webhook.cluster.labeller --once --dry-run`` works on a machine with just Python.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, TextIO, TypedDict

from ..core.nvidia_smi import (
    FALLBACK_QUERY_COMMAND,
    QUERY_COMMAND,
    Gpu,
    NvidiaSmiParseError,
    parse_nvidia_smi_output,
)

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api

__all__ = [
    "DEFAULT_INTERVAL_SECONDS",
    "GPU_COUNT_LABEL",
    "GPU_MEMORY_LABEL",
    "GPU_MIG_ENABLED_LABEL",
    "GPU_MODELS_MIXED_LABEL",
    "GPU_TYPE_LABEL",
    "OWNED_LABELS",
    "LabellerError",
    "NodeApiError",
    "NodeGpuSummary",
    "NodeLabelPatch",
    "NvidiaSmiError",
    "add_label_node_arguments",
    "build_core_v1_api",
    "build_desired_labels",
    "build_full_label_patch",
    "build_label_patch",
    "gpu_model_label_value",
    "is_valid_label_value",
    "label_node_once",
    "main",
    "main_label_node",
    "run_label_node",
    "run_nvidia_smi",
    "sanitise_label_value",
    "summarise_gpus",
]

logger = logging.getLogger("gpuclass.labeller")

GPU_TYPE_LABEL: Final = "gpu-type"
GPU_COUNT_LABEL: Final = "gpu-class.io/gpu-count"
GPU_MEMORY_LABEL: Final = "gpu-class.io/gpu-memory-mib"
GPU_MODELS_MIXED_LABEL: Final = "gpu-class.io/gpu-models-mixed"
GPU_MIG_ENABLED_LABEL: Final = "gpu-class.io/gpu-mig-enabled"
#: The keys this labeller sets and removes. Running it on a node hands ``gpu-type`` over to it.
OWNED_LABELS: Final[tuple[str, ...]] = (
    GPU_TYPE_LABEL,
    GPU_COUNT_LABEL,
    GPU_MEMORY_LABEL,
    GPU_MODELS_MIXED_LABEL,
    GPU_MIG_ENABLED_LABEL,
)

DEFAULT_INTERVAL_SECONDS: Final = 300.0
NVIDIA_SMI_TIMEOUT_SECONDS: Final = 30.0
API_TIMEOUT_SECONDS: Final = 30.0
# First retry after an API failure; doubles per consecutive failure, capped at the interval.
API_BACKOFF_BASE_SECONDS: Final = 5.0
MERGE_PATCH_CONTENT_TYPE: Final = "application/merge-patch+json"

_LABEL_VALUE_MAX_CHARS: Final = 63
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)?$")
_NOT_LABEL_CHAR = re.compile(r"[^A-Za-z0-9._-]")
_NOT_ALNUM_EDGES = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


# --------------------------------------------------------------------------------------------
# Pure decision
# --------------------------------------------------------------------------------------------


def is_valid_label_value(value: str) -> bool:
    """Kubernetes label value rules: at most 63 chars of [A-Za-z0-9._-], alphanumeric at both ends."""
    return len(value) <= _LABEL_VALUE_MAX_CHARS and _LABEL_VALUE.match(value) is not None


def sanitise_label_value(raw: str) -> str | None:
    """Make ``raw`` a valid label value, or None when nothing usable is left.

    Every character outside [A-Za-z0-9._-] becomes "-", the value is cut to 63 characters, and
    non-alphanumeric characters are dropped from both ends. Valid input comes back unchanged.
    """
    value = _NOT_ALNUM_EDGES.sub("", _NOT_LABEL_CHAR.sub("-", raw))
    value = _NOT_ALNUM_EDGES.sub("", value[:_LABEL_VALUE_MAX_CHARS])
    return value or None


def gpu_model_label_value(name: str) -> str | None:
    """The ``gpu-type`` value for an nvidia-smi GPU name, as GPU Feature Discovery spells products.

    GFD replaces each space with "-" ("NVIDIA A100-SXM4-80GB" -> "NVIDIA-A100-SXM4-80GB") and keeps the
    rest, including the "NVIDIA " prefix that newer drivers print and older ones omit, so the value
    matches the ``nvidia.com/gpu.product`` label GFD would set on the same node. Anything still invalid
    as a label value is then sanitised (``sanitise_label_value``).
    """
    return sanitise_label_value(name.strip().replace(" ", "-"))


@dataclass(frozen=True)
class NodeGpuSummary:
    """What the labeller concluded about one node's GPUs."""

    #: The single model of all whole GPUs, as a label value; None when mixed, unknown or no whole GPU.
    gpu_type: str | None
    #: GPUs offered whole (MIG mode not enabled).
    whole_gpu_count: int
    #: Smallest memory.total among whole GPUs; None when there is none or one of them did not say.
    min_memory_mib: int | None
    #: Distinct model label values among whole GPUs, sorted.
    models: tuple[str, ...]
    #: GPUs with MIG mode enabled (offered as slices, excluded from the counts above).
    mig_gpu_count: int
    #: Human-readable reasons for what was left out, for the log.
    notes: tuple[str, ...] = ()

    @property
    def models_mixed(self) -> bool:
        return len(self.models) > 1


def summarise_gpus(gpus: Sequence[Gpu]) -> NodeGpuSummary:
    """Decide the node's GPU type, count and memory from its GPUs (rules in the module docstring)."""
    whole = [gpu for gpu in gpus if gpu.mig_mode != "enabled"]
    mig_gpu_count = len(gpus) - len(whole)
    notes: list[str] = []
    models: set[str] = set()
    unnamed = 0
    for gpu in whole:
        model = gpu_model_label_value(gpu.name)
        if model is None:
            unnamed += 1
        else:
            models.add(model)
    gpu_type: str | None = None
    if len(models) > 1:
        notes.append(
            f"whole GPUs of {len(models)} models ({', '.join(sorted(models))}): "
            f"{GPU_TYPE_LABEL} not set, a Pod could be given any of them"
        )
    elif unnamed:
        notes.append(f"{unnamed} GPU name(s) give no valid label value: {GPU_TYPE_LABEL} not set")
    elif models:
        gpu_type = next(iter(models))
    if mig_gpu_count:
        notes.append(
            f"{mig_gpu_count} GPU(s) with MIG enabled are offered as slices, not counted as whole GPUs"
            + ("" if whole else f"; no whole GPU: {GPU_TYPE_LABEL} not set")
        )
    memories = [gpu.memory_mib for gpu in whole]
    min_memory_mib: int | None = None
    if memories and all(memory is not None for memory in memories):
        min_memory_mib = min(memory for memory in memories if memory is not None)
    elif memories:
        notes.append(f"memory.total unknown for some GPU: {GPU_MEMORY_LABEL} not set")
    return NodeGpuSummary(
        gpu_type=gpu_type,
        whole_gpu_count=len(whole),
        min_memory_mib=min_memory_mib,
        models=tuple(sorted(models)),
        mig_gpu_count=mig_gpu_count,
        notes=tuple(notes),
    )


def build_desired_labels(summary: NodeGpuSummary) -> dict[str, str]:
    """The owned labels the node should carry; an owned key missing here should be absent on the node."""
    labels: dict[str, str] = {}
    if summary.gpu_type is not None:
        labels[GPU_TYPE_LABEL] = summary.gpu_type
    if summary.whole_gpu_count > 0:
        labels[GPU_COUNT_LABEL] = str(summary.whole_gpu_count)
        if summary.min_memory_mib is not None:
            labels[GPU_MEMORY_LABEL] = str(summary.min_memory_mib)
    if summary.models_mixed:
        labels[GPU_MODELS_MIXED_LABEL] = "true"
    if summary.mig_gpu_count > 0:
        labels[GPU_MIG_ENABLED_LABEL] = "true"
    return labels


class NodeLabelPatchMetadata(TypedDict):
    labels: dict[str, str | None]


class NodeLabelPatch(TypedDict):
    """A JSON merge patch (RFC 7386) on a Node: a value sets a label, null removes it."""

    metadata: NodeLabelPatchMetadata


def _check_owned(desired: Mapping[str, str]) -> None:
    foreign = sorted(set(desired) - set(OWNED_LABELS))
    if foreign:
        raise ValueError(f"labels {foreign} are not the labeller's own: it never writes them")


def build_label_patch(current: Mapping[str, str], desired: Mapping[str, str]) -> NodeLabelPatch | None:
    """The merge patch that takes ``current`` to ``desired`` on the owned keys only; None if none is needed.

    Owned keys present in ``current`` but not in ``desired`` are set to null (removed); keys that are not
    owned are never named in the patch, whatever ``current`` holds.
    """
    _check_owned(desired)
    changes: dict[str, str | None] = {}
    for key in OWNED_LABELS:
        wanted = desired.get(key)
        if current.get(key) != wanted:
            changes[key] = wanted
    if not changes:
        return None
    return {"metadata": {"labels": changes}}


def build_full_label_patch(desired: Mapping[str, str]) -> NodeLabelPatch:
    """The patch for a node whose labels are unknown: every owned key, null where not desired.

    Applying it to any node gives the same owned labels (removing an absent label is a no-op); the
    dry run without a cluster prints it.
    """
    _check_owned(desired)
    return {"metadata": {"labels": {key: desired.get(key) for key in OWNED_LABELS}}}


# --------------------------------------------------------------------------------------------
# I/O: nvidia-smi, the Node, the loop
# --------------------------------------------------------------------------------------------


class LabellerError(Exception):
    """A labelling round failed; the node's labels were not changed."""


class NvidiaSmiError(LabellerError):
    """nvidia-smi is missing, failed, timed out, or printed nothing this labeller understands."""


class NodeApiError(LabellerError):
    """Reading or patching the Node through the Kubernetes API failed."""


def _output_tail(stdout: str | bytes | None, stderr: str | bytes | None, limit: int = 500) -> str:
    parts: list[str] = []
    for stream in (stderr, stdout):
        if isinstance(stream, bytes):
            stream = stream.decode("utf-8", "replace")
        if stream and stream.strip():
            parts.append(stream.strip())
    text = " | ".join(parts)
    return text[-limit:] if text else "(no output)"


def _run_command(command: Sequence[str], timeout_seconds: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            list(command), capture_output=True, text=True, timeout=timeout_seconds, check=False
        )
    except FileNotFoundError as exc:
        raise NvidiaSmiError(
            f"{command[0]} not found on PATH; in a Pod it comes from the NVIDIA container runtime "
            "(runtimeClassName: nvidia, NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=utility)"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise NvidiaSmiError(
            f"{' '.join(command)} did not finish within {timeout_seconds:g}s (killed); "
            f"output so far: {_output_tail(exc.stdout, exc.stderr)}"
        ) from exc
    except OSError as exc:
        raise NvidiaSmiError(f"cannot run {command[0]}: {exc}") from exc


def run_nvidia_smi(
    *,
    timeout_seconds: float = NVIDIA_SMI_TIMEOUT_SECONDS,
    command: Sequence[str] = QUERY_COMMAND,
    fallback_command: Sequence[str] | None = FALLBACK_QUERY_COMMAND,
) -> str:
    """Run the GPU query and return its stdout; raise NvidiaSmiError on any failure.

    A driver too old to know ``mig.mode.current`` refuses the whole query, so the query is then repeated
    without it (``fallback_command``); its header keeps the output parseable.
    """
    result = _run_command(command, timeout_seconds)
    if result.returncode != 0 and fallback_command is not None:
        if "not a valid field" in (result.stdout + result.stderr):
            logger.info("nvidia-smi does not know a query field; retrying with %s", " ".join(fallback_command))
            result = _run_command(fallback_command, timeout_seconds)
    if result.returncode != 0:
        raise NvidiaSmiError(
            f"{' '.join(result.args)} exited with status {result.returncode}: "
            f"{_output_tail(result.stdout, result.stderr)}"
        )
    return result.stdout


def _describe_api_error(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if status is not None:
        return f"HTTP {status} {reason or ''}".strip()
    return f"{type(exc).__name__}: {exc}"


def _read_node_labels(api: CoreV1Api, node_name: str) -> dict[str, str]:
    try:
        node = api.read_node(node_name, _request_timeout=API_TIMEOUT_SECONDS)
    except Exception as exc:  # the client raises ApiException, urllib3 and socket errors alike
        hint = ""
        if getattr(exc, "status", None) == 404:
            hint = " (--node / NODE_NAME must name the node this runs on)"
        elif getattr(exc, "status", None) == 403:
            hint = " (the ServiceAccount needs get and patch on nodes)"
        raise NodeApiError(f"reading node {node_name!r}: {_describe_api_error(exc)}{hint}") from exc
    labels = node.metadata.labels if node.metadata is not None else None
    return dict(labels or {})


def _patch_node(api: CoreV1Api, node_name: str, patch: NodeLabelPatch) -> None:
    # The client's default for a PATCH is a JSON Patch (a list of operations); this is a merge patch.
    body: dict[str, Any] = {"metadata": {"labels": dict(patch["metadata"]["labels"])}}
    try:
        api.patch_node(
            node_name, body, _content_type=MERGE_PATCH_CONTENT_TYPE, _request_timeout=API_TIMEOUT_SECONDS
        )
    except Exception as exc:
        raise NodeApiError(f"patching node {node_name!r}: {_describe_api_error(exc)}") from exc


LabelOutcome = Literal["patched", "unchanged", "dry-run"]


def _gpus_from(nvidia_smi: Callable[[], str]) -> tuple[Gpu, ...]:
    text = nvidia_smi()
    try:
        return parse_nvidia_smi_output(text)
    except NvidiaSmiParseError as exc:
        raise NvidiaSmiError(f"cannot read the nvidia-smi output: {exc}") from exc


def label_node_once(
    *,
    node_name: str,
    api: CoreV1Api | None,
    nvidia_smi: Callable[[], str],
    dry_run: bool,
    out: TextIO,
) -> LabelOutcome:
    """One round: query the GPUs, compare with the node's labels, patch what differs.

    With ``dry_run`` the patch is printed to ``out`` as JSON (``{}`` when nothing would change) and the
    node is not patched; with ``dry_run`` and no ``api`` the node's labels are unknown, so the printed
    patch names every owned key (``build_full_label_patch``). Raises LabellerError with labels untouched.
    """
    gpus = _gpus_from(nvidia_smi)
    summary = summarise_gpus(gpus)
    desired = build_desired_labels(summary)
    patch: NodeLabelPatch | None
    if api is None:
        if not dry_run:
            raise ValueError("an API client is required unless dry_run is set")
        patch = build_full_label_patch(desired)
    else:
        patch = build_label_patch(_read_node_labels(api, node_name), desired)
    # A steady node logs nothing at INFO: rounds repeat every few minutes on every GPU node.
    level = logging.INFO if dry_run or patch is not None else logging.DEBUG
    logger.log(
        level,
        "node %s: %d GPU(s) (%s); labels wanted: %s",
        node_name,
        len(gpus),
        ", ".join(f"{gpu.index}:{gpu.name}" + (" [MIG]" if gpu.mig_mode == "enabled" else "") for gpu in gpus),
        json.dumps(desired, sort_keys=True),
    )
    for note in summary.notes:
        logger.log(level, "node %s: %s", node_name, note)
    if dry_run:
        out.write(json.dumps(patch or {}, indent=2, sort_keys=True) + "\n")
        out.flush()
        logger.info("node %s: dry run, %s", node_name, "nothing to change" if patch is None else "patch not applied")
        return "dry-run"
    if patch is None:
        logger.debug("node %s: labels already up to date", node_name)
        return "unchanged"
    assert api is not None
    _patch_node(api, node_name, patch)
    logger.info("node %s: patched labels %s", node_name, json.dumps(patch["metadata"]["labels"], sort_keys=True))
    return "patched"


def run_label_node(
    *,
    node_name: str,
    interval_seconds: float,
    once: bool,
    dry_run: bool,
    api: CoreV1Api | None,
    nvidia_smi: Callable[[], str],
    out: TextIO | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Label the node once (``once``: exit status 0 on success, 1 on failure) or every interval until ``stop``.

    Failures leave the labels as they were. An nvidia-smi failure is retried one interval later (a broken
    driver does not mend in seconds); an API failure is retried after 5s, 10s, 20s, ... capped at the
    interval. Returns 0 when ``stop`` is set.
    """
    if interval_seconds <= 0:
        raise ValueError(f"interval_seconds must be positive, got {interval_seconds}")
    stream = out if out is not None else sys.stdout
    stop_event = stop if stop is not None else threading.Event()
    api_failures = 0
    while not stop_event.is_set():
        delay = interval_seconds
        try:
            label_node_once(node_name=node_name, api=api, nvidia_smi=nvidia_smi, dry_run=dry_run, out=stream)
            api_failures = 0
        except NvidiaSmiError as exc:
            api_failures = 0
            logger.error("node %s: %s; labels left unchanged", node_name, exc)
            if once:
                return 1
        except NodeApiError as exc:
            api_failures += 1
            delay = min(interval_seconds, API_BACKOFF_BASE_SECONDS * 2 ** (api_failures - 1))
            logger.error("node %s: %s; labels left unchanged", node_name, exc)
            if once:
                return 1
        except Exception:
            # A bug must not kill a DaemonSet that otherwise keeps labels fresh; it is logged in full.
            logger.exception("node %s: unexpected error; labels left unchanged", node_name)
            if once:
                return 1
        if once:
            return 0
        logger.debug("node %s: next round in %gs", node_name, delay)
        stop_event.wait(delay)
    return 0


def build_core_v1_api(kubeconfig: str | None = None) -> CoreV1Api:
    """A CoreV1Api from ``kubeconfig``, else the in-cluster ServiceAccount, else the default kubeconfig."""
    from kubernetes import client, config  # imported here: the pure part must not need it

    # The config loaders carry no annotations; these names give them one.
    load_kube_config: Callable[..., None] = config.load_kube_config
    load_incluster_config: Callable[..., None] = config.load_incluster_config
    configuration = client.Configuration()
    if kubeconfig:
        load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            load_kube_config(client_configuration=configuration)
    return client.CoreV1Api(client.ApiClient(configuration))


def _api_for_dry_run(kubeconfig: str | None) -> CoreV1Api | None:
    """An API client when one can be built; in a dry run, no cluster is fine (labels then unknown)."""
    try:
        return build_core_v1_api(kubeconfig)
    except ImportError as exc:
        logger.warning("dry run without the kubernetes package (%s): node labels unknown", exc)
    except Exception as exc:  # ConfigException, a missing or unreadable kubeconfig
        if kubeconfig:
            raise
        logger.warning("dry run without a cluster (%s): node labels unknown, printing every owned key", exc)
    return None


def add_label_node_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``label-node`` options, for the ``gpuclass`` CLI and ``python -m webhook.cluster.labeller``."""
    parser.add_argument("--node", default=None, help="node to label (default: env NODE_NAME)")
    parser.add_argument(
        "--interval-seconds",
        type=float,
        default=DEFAULT_INTERVAL_SECONDS,
        help=f"seconds between rounds (default {DEFAULT_INTERVAL_SECONDS:g})",
    )
    parser.add_argument("--once", action="store_true", help="one round; exit status 1 if it failed")
    parser.add_argument("--dry-run", action="store_true", help="print the JSON merge patch; change nothing")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig (default: in-cluster, then ~/.kube/config)")


def main_label_node(args: argparse.Namespace) -> int:
    """Entry point for ``gpuclass label-node``: reads node, interval_seconds, once, dry_run, kubeconfig."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    node_name = getattr(args, "node", None) or os.environ.get("NODE_NAME", "")
    if not node_name:
        print("label-node: no node name: pass --node or set NODE_NAME (the DaemonSet sets it)", file=sys.stderr)
        return 2
    interval_seconds = float(getattr(args, "interval_seconds", DEFAULT_INTERVAL_SECONDS))
    if interval_seconds <= 0:
        print(f"label-node: --interval-seconds must be positive, got {interval_seconds:g}", file=sys.stderr)
        return 2
    dry_run = bool(getattr(args, "dry_run", False))
    kubeconfig: str | None = getattr(args, "kubeconfig", None)
    try:
        api = _api_for_dry_run(kubeconfig) if dry_run else build_core_v1_api(kubeconfig)
    except Exception as exc:
        print(f"label-node: cannot build a Kubernetes client: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    previous_handlers: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        # The kubelet sends SIGTERM on pod deletion; stop between rounds instead of dying mid-PATCH.
        # The handler sets the event from another thread: it runs in the main thread, which may be
        # holding the event's lock at that moment (Event.set from there could deadlock).
        def request_stop(_signum: int, _frame: object) -> None:
            threading.Thread(target=stop.set, name="label-node-stop", daemon=True).start()

        for signum in (signal.SIGTERM, signal.SIGINT):
            previous_handlers[signum] = signal.signal(signum, request_stop)
    try:
        return run_label_node(
            node_name=node_name,
            interval_seconds=interval_seconds,
            once=bool(getattr(args, "once", False)),
            dry_run=dry_run,
            api=api,
            nvidia_smi=run_nvidia_smi,
            stop=stop,
        )
    finally:
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m webhook.cluster.labeller``: the same options as ``gpuclass label-node``, stdlib only for dry runs."""
    parser = argparse.ArgumentParser(prog="python -m webhook.cluster.labeller", description="Label this node with its GPU model, count and memory.")
    add_label_node_arguments(parser)
    return main_label_node(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
