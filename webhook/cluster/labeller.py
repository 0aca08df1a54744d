"""The node labeller's I/O (``gpuclass label-node``): the manual ``kubectl label nodes <node> gpu-type=<model>``
done by a DaemonSet on clusters without GPU Feature Discovery.

What the labels are and when they change is decided in ``webhook.core.labeller.labels`` (pure); this module runs
``nvidia-smi`` (``run_nvidia_smi``, a subprocess with a timeout), reads and patches the Node
(``label_node_once``), repeats that with backoff (``run_label_node``) and is what the CLI calls
(``main_label_node``). The command line itself is ``webhook.cli``'s: there is one parser.

nvidia-smi missing, failing, timing out or printing nothing usable: labels are left as they are (the
DaemonSet only runs on GPU nodes, so "no GPU visible" means the container cannot see them, not that the
node has none); the error is logged and the next try is one interval later.

Importing this module needs the standard library only; ``kubernetes`` is imported when an API client is
built, so ``python -S -m webhook.cli label-node --once --dry-run`` works on a machine with just Python.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, TextIO

from ..core.labeller.labels import (
    NodeLabelPatch,
    build_desired_labels,
    build_full_label_patch,
    build_label_patch,
    summarise_gpus,
)
from ..core.labeller.nvidia_smi import (
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
    "MERGE_PATCH_CONTENT_TYPE",
    "LabellerError",
    "NodeApiError",
    "NvidiaSmiError",
    "build_core_v1_api",
    "label_node_once",
    "main_label_node",
    "run_label_node",
    "run_nvidia_smi",
]

logger = logging.getLogger("gpuclass.labeller")

DEFAULT_INTERVAL_SECONDS: Final = 300.0
NVIDIA_SMI_TIMEOUT_SECONDS: Final = 30.0
API_TIMEOUT_SECONDS: Final = 30.0
# First retry after an API failure; doubles per consecutive failure, capped at the interval.
API_BACKOFF_BASE_SECONDS: Final = 5.0
MERGE_PATCH_CONTENT_TYPE: Final = "application/merge-patch+json"


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
        # the API server's Status says why (an admission policy's refusal, say): pass it on
        try:
            message = json.loads(getattr(exc, "body", None) or "{}").get("message")
        except (ValueError, AttributeError):
            message = None
        return f"HTTP {status} {reason or ''}".strip() + (f": {message}" if message else "")
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
