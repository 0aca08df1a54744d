"""Replicas of gpu-class-scheduler beside the local control plane, as deploy/scheduler runs them: the shipped
KubeSchedulerConfiguration (its leader election included), the gpu-class-scheduler ServiceAccount, and what each
replica did read back from its log (kube-scheduler at -v=2 logs every bind it made, and leader election every
lease it took or lost).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

import local_cluster

SERVICE_ACCOUNT = "gpu-class-scheduler"
# klog's header: severity, MMDD, wall time to the microsecond (the process's local time), pid, file:line]
_KLOG = re.compile(r"^[IWEF](\d{4}) (\d\d:\d\d:\d\d\.\d{6})\s+\d+ \S+\] (.*)$")
_BOUND = re.compile(r'^"Successfully bound pod to node" pod="([^"]+)" node="([^"]+)"')
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m)$")


@dataclass(frozen=True)
class LeaseSettings:
    """kube-scheduler's leaderElection timings, in seconds."""

    lease_seconds: float
    renew_deadline_seconds: float
    retry_seconds: float


# client-go's leaderelection: a candidate looks at the Lease once a retry period stretched by a random share of up
# to JitterFactor more; the leader renews once a retry period and, when a renewal fails, keeps trying until the
# renew deadline and then stops leading.
JITTER_FACTOR = 1.2


def worst_takeover_seconds(settings: LeaseSettings) -> float:
    """From the leader's death (or its partition) to a standby holding the Lease, at most: the standby times the lease
    from the moment it saw the last renewal, up to one look after it was written, and the look that finds the lease
    run out comes up to one look after it did."""
    look_seconds = settings.retry_seconds * (1 + JITTER_FACTOR)
    return settings.lease_seconds + 2 * look_seconds


def cut_off_leader_stops_within_seconds(settings: LeaseSettings) -> float:
    """From a leader's last renewal to its giving the lead up, at most, when it can no longer reach the API server:
    the retry period before its next renewal, then the renew deadline of trying."""
    return settings.retry_seconds + settings.renew_deadline_seconds


def parse_duration_seconds(text: str) -> float:
    """A Go duration as a KubeSchedulerConfiguration writes one ("15s", "500ms", "1m")."""
    found = _DURATION.match(text)
    if not found:
        raise ValueError(f"not a duration this parser knows: {text!r}")
    value, unit = float(found.group(1)), found.group(2)
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0}[unit]


def shipped_lease_settings(config_file: Path = local_cluster.SCHEDULER_CONFIGS[local_cluster.STRICT_SCHEDULER]
                           ) -> LeaseSettings:
    election = yaml.safe_load(config_file.read_text())["leaderElection"]
    return LeaseSettings(*(parse_duration_seconds(election[key]) for key in
                           ("leaseDuration", "renewDeadline", "retryPeriod")))


@dataclass(frozen=True)
class LogLine:
    at: float  # seconds since the epoch
    message: str


def parse_klog(text: str, year: int) -> list[LogLine]:
    """The lines of a klog log with their times (klog writes no year: `year` is the one they were written in)."""
    lines = []
    for line in text.splitlines():
        found = _KLOG.match(line)
        if found:
            stamp = datetime.datetime.strptime(f"{year}{found.group(1)} {found.group(2)}", "%Y%m%d %H:%M:%S.%f")
            lines.append(LogLine(stamp.timestamp(), found.group(3)))  # naive: local time, as klog wrote it
    return lines


@dataclass(frozen=True)
class Bind:
    at: float
    pod: str  # namespace/name
    node: str


def binds(lines: list[LogLine]) -> list[Bind]:
    return [Bind(line.at, m.group(1), m.group(2)) for line in lines if (m := _BOUND.match(line.message))]


def first_at(lines: list[LogLine], message_start: str) -> float | None:
    return next((line.at for line in lines if line.message.startswith(message_start)), None)


ACQUIRED = '"Successfully acquired lease"'
WAITING = '"Attempting to acquire leader lease..."'  # logged once its caches are in sync: a standby from here
LOST = '"Leaderelection lost"'  # and kube-scheduler exits


@dataclass
class Replica:
    """One gpu-class-scheduler process of the cluster (`name` is its process name there, and its log's)."""

    cluster: local_cluster.Cluster
    name: str
    kubeconfig: Path
    log_offset: int = 0  # where this life of the process starts in its log

    @property
    def log_file(self) -> Path:
        return self.cluster.logs / f"{self.name}.log"

    def start(self) -> None:
        """Start (again): the shipped configuration, pointed at the cluster through `kubeconfig`."""
        config = local_cluster.scheduler_config(self.cluster, self.kubeconfig, local_cluster.STRICT_SCHEDULER,
                                                out=self.cluster.dir / f"{self.name}.yaml")
        self.log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        self.cluster.start(self.name, [
            str(local_cluster.build_scheduler()), f"--config={config}",
            f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={local_cluster.free_port()}",
            "--v=2",  # the line of each bind
        ])

    def lines(self) -> list[LogLine]:
        """This life's log lines."""
        with open(self.log_file, "rb") as f:
            f.seek(self.log_offset)
            text = f.read().decode(errors="replace")
        return parse_klog(text, time.localtime().tm_year)

    def binds(self) -> list[Bind]:
        return binds(self.lines())

    def logged(self, message_start: str) -> float | None:
        return first_at(self.lines(), message_start)

    def is_running(self) -> bool:
        return self.cluster.is_running(self.name)

    def pid(self) -> int:
        pid = self.cluster.pid(self.name)
        assert pid is not None, f"{self.name} was not started"
        return pid

    def stop(self) -> None:
        """SIGTERM (a leader gives its lease up: kube-scheduler releases on cancel), and forget it."""
        self.cluster.stop(self.name)


def proxied_kubeconfig(cluster: local_cluster.Cluster, name: str, proxy_address: str) -> Path:
    """The ServiceAccount's kubeconfig, with the API server reached through `proxy_address`."""
    config = yaml.safe_load(local_cluster.service_account_kubeconfig(cluster, SERVICE_ACCOUNT).read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = f"https://{proxy_address}"
    path = cluster.dir / f"{name}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def direct_kubeconfig(cluster: local_cluster.Cluster) -> Path:
    return local_cluster.service_account_kubeconfig(cluster, SERVICE_ACCOUNT)


@contextlib.contextmanager
def session_scheduler_stopped(cluster: local_cluster.Cluster) -> Iterator[None]:
    """The session's gpu-class-scheduler stopped (it gives its lease up) and, afterwards, started again and leading.

    The replicas under test run the shipped configuration word for word: the same profiles, so the same Pods, and
    the same Lease. A third process with those profiles would bind Pods too, whichever replica leads.
    """
    name = local_cluster.STRICT_SCHEDULER
    argv = json.loads((cluster.dir / "run" / f"{name}.argv").read_text())
    cluster.stop(name)
    try:
        yield
    finally:
        since = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        cluster.start(name, argv)
        cluster.wait_leader(name, since=since, seconds=60)


def lease(cluster: local_cluster.Cluster) -> dict[str, Any]:
    """The spec of the shipped Lease, as the API server holds it now."""
    election = yaml.safe_load(local_cluster.SCHEDULER_CONFIGS[local_cluster.STRICT_SCHEDULER].read_text())[
        "leaderElection"]
    proc = cluster.kubectl("-n", election["resourceNamespace"], "get", "lease", election["resourceName"], "-o", "json")
    spec: dict[str, Any] = json.loads(proc.stdout)["spec"]
    return spec
