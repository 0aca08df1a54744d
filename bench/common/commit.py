"""Which code a measurement ran: the line a bench/RESULTS.md section opens with.

tests/test_readme_figures.py reads `Commit abc1234` from a section to check that a README figure was
measured on the scheduler that ships, so a run from a tree with changes not yet committed says so in
other words and cannot pass for the commit under it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def measured_at() -> str:
    """`Commit abc1234`, or `Uncommitted changes on top of abc1234` when the tree differs from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    changed = git("status", "--porcelain", "--untracked-files=no")
    return f"Uncommitted changes on top of {head}" if changed else f"Commit {head}"
