"""What a release writes beside its images, made from what was built (pure: records in, documents out).

- values.yaml for the chart: every image by digest (`image.digest`, `scheduler.image.digests` per minor), so an
  install pulls the bytes the release built and no tag can move under it.
- manifest.json: the version (and whether the CHANGELOG dates it or still marks it unreleased), the commit, and
  for each image its digest, its image ID, its base by digest and its
  SBOM, so a digest seen in a cluster can be traced to the sources and the base it was built from.
- Each SBOM as CycloneDX JSON, about the image: the image is the BOM's subject, and what the tool that read its
  contents found (the Python packages of the lock, the Go modules stamped into the binary) are its components,
  beside the base image by digest.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from tools.lockfile import Pin

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
WEBHOOK = "gpu-class"
SCHEDULER = "gpu-class-scheduler"


@dataclass(frozen=True)
class BuiltImage:
    """One image of the release: which component, for which Kubernetes minor (the scheduler's builds), where."""

    repository: str  # gpu-class or gpu-class-scheduler: the chart's default repository
    tag: str  # the version, and -k8s<minor> for the scheduler's builds of older minors
    minor: str | None
    image_id: str  # the config's digest (podman's image ID)
    digest: str  # the manifest's digest, what a registry serves the image under and the chart pulls
    base: str  # the base image by digest, name@sha256:...
    sbom: str  # the SBOM's path, relative to the release directory
    layout: str  # the OCI image layout holding it, relative to the release directory

    def __post_init__(self) -> None:
        for name in ("digest", "image_id"):
            if not DIGEST.fullmatch(getattr(self, name)):
                raise ValueError(f"{self.repository}:{self.tag}: {name} {getattr(self, name)!r} is not sha256:<64 hex>")
        if "@sha256:" not in self.base:
            raise ValueError(f"{self.repository}:{self.tag}: base {self.base!r} is not pinned by digest")


def chart_values(images: Sequence[BuiltImage], registry: str | None = None) -> dict[str, Any]:
    """The chart's values that pull every image of the release by digest; `registry` (host/path) prefixes the
    repositories where the images are pushed under it."""
    webhooks = [i for i in images if i.repository == WEBHOOK]
    schedulers = [i for i in images if i.repository == SCHEDULER]
    if len(webhooks) != 1:
        raise ValueError(f"a release has one webhook image, not {len(webhooks)}")
    if not schedulers or any(i.minor is None for i in schedulers):
        raise ValueError("a release has gpu-class-scheduler images, each for its Kubernetes minor")
    prefix = f"{registry.rstrip('/')}/" if registry else ""
    values: dict[str, Any] = {
        "image": {"digest": webhooks[0].digest},
        "scheduler": {"image": {"digests": {i.minor: i.digest for i in sorted(schedulers, key=minor_key)}}},
    }
    if prefix:
        values["image"]["repository"] = prefix + WEBHOOK
        values["scheduler"]["image"]["repository"] = prefix + SCHEDULER
    return values


CHANGELOG_SECTION = re.compile(r"^## (\S+)(?: \((unreleased|\d{4}-\d{2}-\d{2})\))?\s*$", re.M)


def version_state(version: str, chart: Mapping[str, Any], changelog: str) -> tuple[str, list[str]]:
    """The CHANGELOG's state of `version` (`unreleased` or its date) and every place that names another version:
    a release is of one version, written in the package, the chart and the CHANGELOG's newest section."""
    problems = [f"Chart.yaml's {key} is {chart.get(key)!r}, the package's version {version}"
                for key in ("version", "appVersion") if str(chart.get(key)) != version]
    sections = CHANGELOG_SECTION.findall(changelog)
    if not sections or sections[0][0] != version or not sections[0][1]:
        newest = f"`## {sections[0][0]} ...`" if sections else "none"
        problems.append(f"CHANGELOG.md's newest section is {newest}, not `## {version} (unreleased or YYYY-MM-DD)`")
        return "", problems
    return sections[0][1], problems


def minor_key(image: BuiltImage) -> tuple[int, ...]:
    return tuple(int(x) for x in (image.minor or "0").split("."))


def manifest(*, version: str, changelog: str, commit: str, modified: bool, commit_time: str,
             tools: Mapping[str, str], images: Sequence[BuiltImage]) -> dict[str, Any]:
    """`changelog`: the version's state there, `unreleased` for a build between releases, else the release date."""
    return {"version": version, "changelog": changelog, "commit": commit, "modified": modified,
            "commitTime": commit_time, "tools": dict(tools), "images": [asdict(i) for i in images]}


def oci_purl(repository: str, digest: str, tag: str | None = None) -> str:
    """The package URL of an image by digest (purl's oci type: the digest is the version)."""
    purl = f"pkg:oci/{repository.rsplit('/', 1)[-1]}@{urllib.parse.quote(digest)}"
    qualifiers = {"repository_url": repository} if "/" in repository else {}
    if tag:
        qualifiers["tag"] = tag
    return purl + ("?" + urllib.parse.urlencode(qualifiers) if qualifiers else "")


def image_sbom(bom: Mapping[str, Any], image: BuiltImage, *, timestamp: str,
               own: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The BOM a tool wrote about what is inside `image` (its own subject, if any, becomes a component), made a
    BOM about the image: the image as its subject, the base image and `own` (the project's own package) beside
    the tool's components, each a dependency of the image. `timestamp` (the commit's time) keeps it the same
    from build to build."""
    out = dict(bom)
    metadata = dict(out.get("metadata") or {})
    components = list(out.get("components") or [])
    subject_ref = f"{image.repository}@{image.digest}"
    added = [c for c in (metadata.get("component"), own) if c]
    base_name, _, base_digest = image.base.partition("@")
    base = {"type": "container", "bom-ref": image.base, "name": base_name, "version": base_digest,
            "purl": oci_purl(base_name, base_digest)}
    components = [*added, base, *components]
    metadata["component"] = {"type": "container", "bom-ref": subject_ref, "name": image.repository,
                             "version": image.tag, "purl": oci_purl(image.repository, image.digest, image.tag)}
    metadata["timestamp"] = timestamp
    out["metadata"] = metadata
    out["components"] = components
    out.pop("serialNumber", None)  # random per run; the subject's digest names this BOM
    dependencies = list(out.get("dependencies") or [])
    out["dependencies"] = [{"ref": subject_ref, "dependsOn": [c["bom-ref"] for c in [*added, base] if "bom-ref" in c]},
                           *dependencies]
    return out


def python_package(name: str, version: str) -> dict[str, Any]:
    """The project's own package, as a CycloneDX component."""
    purl = f"pkg:pypi/{name}@{version}"
    return {"type": "application", "bom-ref": purl, "name": name, "version": version, "purl": purl}


def installed_problems(installed: Mapping[str, str], pins: Sequence[Pin], own: str, version: str) -> list[str]:
    """How the Python packages an image holds (normalised name -> version) differ from the lock and the project's
    own package: the SBOM is made from the lock, so they must be the same."""
    expected = {p.name: p.version for p in pins} | {own: version}
    problems = [f"the image holds {name} {v}, the lock says {expected[name]}"
                for name, v in sorted(installed.items()) if name in expected and expected[name] != v]
    problems += [f"the image holds {name} {v}, which the lock does not name"
                 for name, v in sorted(installed.items()) if name not in expected]
    problems += [f"the image lacks {name} {v}" for name, v in sorted(expected.items()) if name not in installed]
    return problems
