"""The image's Python dependencies, locked: what requirements.lock and requirements-build.lock must hold.

Both are written by pip-compile (`.ci/release lock`) with a hash of every file of every pinned release, and the
Dockerfile installs from them with `--require-hashes`, so the image holds no release, and no file, the lock does not
name. This module reads a lock (pure: text in, records out) and says how it has drifted from what it locks:
requirements.lock must hold exactly the closure of setup.cfg's install_requires, at versions those ranges admit,
and requirements-build.lock that of pyproject.toml's build-system.requires. pip-compile's `# via` lines say which
pin pulled each one in, so the closure is read from the lock itself, with no index to ask.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from packaging.requirements import Requirement
from packaging.version import Version

# What pip-compile writes after `# via` for the project's own requirements.
RUNTIME_ROOT = "gpu-class (setup.cfg)"
BUILD_ROOT = "gpu-class (pyproject.toml::build-system.requires)"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)\s*\\?$")
HASH = re.compile(r"^\s+--hash=sha256:([0-9a-f]{64})\s*\\?$")
VIA = re.compile(r"^\s+#\s+via(?:\s+(.*))?$")
VIA_MORE = re.compile(r"^\s+#\s+(\S.*)$")


@dataclass(frozen=True)
class Pin:
    """One locked release: its normalised name, version, the sha256 of each of its files, and who requires it."""

    name: str
    version: str
    hashes: tuple[str, ...]
    via: tuple[str, ...]


class LockError(ValueError):
    """A lock that cannot be read, with the line."""


def normalise(name: str) -> str:
    """PEP 503: `PyYAML` and `pyyaml`, `typing_extensions` and `typing-extensions` are one project each."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> list[Pin]:
    """The pins of a pip-compile output (`name==version`, its `--hash` lines, its `# via` block)."""
    read: list[tuple[str, str, list[str], list[str]]] = []  # name, version, hashes, via: filled line by line
    in_via = False
    for number, line in enumerate(text.splitlines(), 1):
        if pin := PIN.match(line):
            read.append((normalise(pin.group(1)), pin.group(2), [], []))
            in_via = False
        elif read and (digest := HASH.match(line)):
            read[-1][2].append(digest.group(1))
        elif read and (first := VIA.match(line)):
            in_via = True
            read[-1][3].extend([first.group(1).strip()] if first.group(1) else [])
        elif read and in_via and (more := VIA_MORE.match(line)):
            read[-1][3].append(more.group(1).strip())
        elif line.strip() and not line.lstrip().startswith("#"):
            raise LockError(f"line {number}: {line.strip()!r} is neither a `name==version` pin, a hash nor a comment")
        else:
            in_via = in_via and bool(line.strip())
    return [Pin(name, version, tuple(hashes), tuple(via)) for name, version, hashes, via in read]


def requirements_of(lines: Iterable[str]) -> list[Requirement]:
    """Requirement lines as setup.cfg writes them (comments and blank lines skipped)."""
    return [Requirement(line.strip()) for line in lines if line.strip() and not line.strip().startswith("#")]


def lock_problems(pins: Sequence[Pin], required: Sequence[Requirement], root: str) -> list[str]:
    """What is wrong with a lock of `required` (the project's own requirements, which pip-compile marks `via root`):
    a requirement not pinned or pinned outside its range, a pin without a hash, a pin the project no longer asks
    for, or one that nothing pinned pulls in."""
    problems: list[str] = []
    by_name = {pin.name: pin for pin in pins}
    wanted = {normalise(r.name): r for r in required}
    for name, requirement in sorted(wanted.items()):
        pin = by_name.get(name)
        if pin is None:
            problems.append(f"{requirement} is required but not locked")
        elif not requirement.specifier.contains(Version(pin.version), prereleases=True):
            problems.append(f"{name}=={pin.version} is outside the required {requirement}")
    for pin in pins:
        if not pin.hashes:
            problems.append(f"{pin.name}=={pin.version} has no --hash")
        if root in pin.via and pin.name not in wanted:
            problems.append(f"{pin.name}=={pin.version} is locked as the project's own but it no longer requires it")
    problems += [f"{name} is locked but nothing requires it" for name in sorted(unreached(pins, root))]
    return problems


def unreached(pins: Sequence[Pin], root: str) -> set[str]:
    """The pins no chain of `via` leads to from the project."""
    reached = {pin.name for pin in pins if root in pin.via}
    grown = True
    while grown:
        grown = False
        for pin in pins:
            if pin.name not in reached and any(normalise(v) in reached for v in pin.via):
                reached.add(pin.name)
                grown = True
    return {pin.name for pin in pins} - reached
