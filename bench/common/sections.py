"""Sections of bench/RESULTS.md that separate benchmarks own, kept when another one rewrites the file.

A section is the text between `<!-- begin NAME -->` and `<!-- end NAME -->`. The main suite
writes the whole file and carries the sections over; `python -m bench apiserver` (and the like)
replace only their own section.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Sequence


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"<!-- begin {re.escape(name)} -->\n.*?<!-- end {re.escape(name)} -->\n", re.S)


def _block(name: str, body: str) -> str:
    return f"<!-- begin {name} -->\n{body.rstrip()}\n<!-- end {name} -->\n"


def write_section(path: Path, name: str, body: str) -> None:
    """Replace section `name` of the file with `body`, or append it."""
    text = path.read_text() if path.exists() else ""
    block = _block(name, body)
    if _pattern(name).search(text):
        text = _pattern(name).sub(lambda _: block, text)
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + block
    path.write_text(text)


def carry_sections(old: str, new: str) -> str:
    """`new`, followed by every section of `old` that `new` does not have."""
    for match in re.finditer(r"<!-- begin (\S+) -->\n.*?<!-- end \1 -->\n", old, re.S):
        if not _pattern(match.group(1)).search(new):
            new = new.rstrip("\n") + "\n\n" + match.group(0)
    return new


# Options that say where a section is written and how it is labelled, not what was measured: a heading leaves them out.
REPORT_OPTIONS = ("--section", "--label", "--note", "--output")


def command_line(bench: str, argv: Sequence[str], *, measuring_only: bool = False) -> str:
    """`python -m bench BENCH ...` as a shell takes it; `measuring_only`: without REPORT_OPTIONS (for the
    heading, which the note would otherwise fill)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif measuring_only and arg in REPORT_OPTIONS:
            skip = True
        elif not (measuring_only and arg.startswith(tuple(f"{o}=" for o in REPORT_OPTIONS))):
            kept.append(arg)
    return shlex.join(["python", "-m", "bench", bench, *kept])
