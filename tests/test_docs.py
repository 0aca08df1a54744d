"""The docs cannot rot silently.

- Every relative link in the repository's Markdown resolves: the file exists and its #anchor is a heading of that
  file, by GitHub's slug rules (lower case; punctuation dropped but for hyphens, underscores and spaces; spaces to
  hyphens; a repeated heading gets -1, -2, ...). External links are not fetched, but must be well-formed URLs.
- Every path of a Markdown file written in the repository's files (docstrings, comments, alert rules' runbook
  URLs: `docs/operators/runbooks.md#gpuclassnoreplicaup`) names a file that exists, and a heading of it.
- Every `gpuclass ...` and `kubectl gpu-class ...` command shown in a fenced code block parses with the command
  line's own parser (webhook.cli.build_parser), so a renamed or removed flag fails here, not for the reader. A
  synopsis line (`gpuclass serve [--bind HOST:PORT] ...`) is checked flag by flag against its subcommand.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import subprocess
import urllib.parse
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from webhook.cli import KUBECTL_PLUGIN, build_parser, kubectl_argv

REPO = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^\s{0,3}(```|~~~)\s*([\w+-]*)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
# A page of this documentation named by its path from the repository's root in any text file: a page of docs/, or
# a README.md or RESULTS.md of a top-level folder (not after `/` or `.`: the tail of a relative link, which the
# link check reads).
MD_PATH = re.compile(r"(?<![\w./-])((?:docs/(?:README|(?:users|operators|contributors|decisions)/[\w.-]+)"
                     r"|(?:deploy|bench|tests|webhook)/(?:[\w-]+/)*(?:README|RESULTS))\.md)(#[\w-]+)?")
NOT_COMMANDS = {"yaml", "yml", "json"}  # fenced blocks of data, never of shell


def repo_files(pattern: str | None = None) -> list[Path]:
    """Tracked files and new ones git does not ignore, so a page is checked before it is committed."""
    argv = ["git", "ls-files", "--cached", "--others", "--exclude-standard"] + ([pattern] if pattern else [])
    names = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=True).stdout.split("\n")
    return sorted({REPO / n for n in names if n and (REPO / n).is_file()})


def markdown_files() -> list[Path]:
    return repo_files("*.md")


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks."""
    out, fence = [], None
    for no, line in enumerate(path.read_text().split("\n"), 1):
        m = FENCE.match(line)
        if m and (fence is None or m.group(1) == fence):
            fence = m.group(1) if fence is None else None
            continue
        if fence is None:
            out.append((no, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path):
        found.update(HTML_ID.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


@dataclass(frozen=True)
class Link:
    source: Path
    line: int
    target: str

    def __str__(self) -> str:
        return f"{rel(self.source)}:{self.line} -> {self.target}"


def links() -> list[Link]:
    found = []
    for path in markdown_files():
        for no, line in prose_lines(path):
            text = INLINE_CODE.sub("", line)
            targets = LINK.findall(text) + REFERENCE.findall(text)
            found += [Link(path, no, t) for t in targets]
    return found


def check_target(path: Path, base: Path, target: str, where: str) -> None:
    page, _, anchor = target.partition("#")
    dest = path if not page else (REPO / page.lstrip("/") if page.startswith("/") else base / page)
    dest = Path(urllib.parse.unquote(str(dest))).resolve()
    assert dest.exists(), f"{where}: {target}: no such file {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest}"
    assert dest.is_relative_to(REPO), f"{where}: {target}: outside the repository"
    if anchor and dest.suffix == ".md":
        assert anchor in anchors(dest), (f"{where}: {target}: no heading #{anchor} in {rel(dest)}; its anchors: "
                                         f"{', '.join(sorted(anchors(dest)))}")


@pytest.mark.parametrize("link", links(), ids=str)
def test_link_resolves(link: Link) -> None:
    target = link.target
    assert target, f"{link}: empty link"
    scheme = urllib.parse.urlsplit(target).scheme
    if scheme in ("http", "https"):
        parts = urllib.parse.urlsplit(target)
        assert re.fullmatch(r"[A-Za-z0-9.-]+\.[A-Za-z]{2,}(:\d+)?", parts.netloc), f"{link}: not a well-formed URL"
        assert not re.search(r"\s", target), f"{link}: not a well-formed URL"
        return
    if scheme == "mailto":
        return
    assert not scheme, f"{link}: unexpected scheme {scheme!r}"
    check_target(link.source, link.source.parent, target, str(link))


def ignored(paths: set[str]) -> set[str]:
    """The paths git ignores: what a run writes (bench/out/), not a page of the documentation."""
    done = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=REPO, input="\n".join(paths),
                          capture_output=True, text=True, check=False)
    return set(done.stdout.split())


def md_paths() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for path in repo_files():
        if path == Path(__file__).resolve():  # its own examples of broken links
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for no, line in enumerate(text.split("\n"), 1):
            for page, anchor in MD_PATH.findall(line):
                found.append((f"{rel(path)}:{no}", page.rstrip(".") + anchor))
    skip = ignored({target.partition("#")[0] for _, target in found})
    return [(where, target) for where, target in found if target.partition("#")[0] not in skip]


MD_PATHS = md_paths()


@pytest.mark.parametrize(("where", "target"), MD_PATHS, ids=[f"{w} -> {t}" for w, t in MD_PATHS])
def test_named_markdown_file_exists(where: str, target: str) -> None:
    check_target(REPO / "README.md", REPO, target, where)


@dataclass(frozen=True)
class Command:
    source: Path
    line: int
    text: str
    synopsis: bool

    def __str__(self) -> str:
        return f"{rel(self.source)}:{self.line}: {self.text}"


SYNOPSIS = re.compile(r"\[-|\(-|\s\.\.\.|\w\|\w")
OPERATORS = re.compile(r"^[&|;<>()]+$")


def command_start(words: list[str]) -> tuple[str, list[str]] | None:
    """Which CLI a simple command runs, and its arguments: `gpuclass ...` (any path to it) or `kubectl gpu-class ...`."""
    while words and re.fullmatch(r"\w+=\S*", words[0]):  # VAR=value before the command
        words = words[1:]
    if not words:
        return None
    name = words[0].rsplit("/", 1)[-1]
    if name == "gpuclass":
        return "gpuclass", words[1:]
    if name == "kubectl-gpu_class":
        return KUBECTL_PLUGIN, words[1:]
    if name == "kubectl" and words[1:2] == ["gpu-class"]:
        return KUBECTL_PLUGIN, words[2:]
    return None


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line: split at &&, ||, |, ;, and redirections."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    out: list[list[str]] = [[]]
    for token in lexer:
        if OPERATORS.match(token):
            out.append([])
        else:
            out[-1].append(token)
    return [c for c in out if c]


def logical_lines(block: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Lines of a code block with `\\` continuations joined, and a synopsis' indented continuation lines joined."""
    out: list[tuple[int, str]] = []
    pending = False
    for no, line in block:
        stripped = re.sub(r"^\s*\$\s+", "", line)  # a `$ ` prompt
        if pending or (out and line[:1].isspace() and SYNOPSIS.search(out[-1][1]) and stripped.strip()[:1] in "-[("):
            out[-1] = (out[-1][0], out[-1][1] + " " + stripped.strip())
        else:
            out.append((no, stripped))
        pending = out[-1][1].endswith("\\")
        if pending:
            out[-1] = (out[-1][0], out[-1][1][:-1])
    return out


def commands() -> list[Command]:
    found = []
    for path in markdown_files():
        block: list[tuple[int, str]] | None = None
        fence, info = None, ""
        for no, line in enumerate(path.read_text().split("\n"), 1):
            m = FENCE.match(line)
            if m and (fence is None or m.group(1) == fence):
                if fence is None:
                    fence, info, block = m.group(1), m.group(2).lower(), []
                    continue
                fence = None
                if info not in NOT_COMMANDS:
                    found += commands_of(path, block or [])
                continue
            if block is not None and fence is not None:
                block.append((no, line))
    return found


def commands_of(path: Path, block: list[tuple[int, str]]) -> list[Command]:
    found = []
    for no, line in logical_lines(block):
        line = re.sub(r"<([A-Za-z][\w.-]*)>", r"\1", line)  # <pod>, a placeholder: a value
        if SYNOPSIS.search(line.split("#")[0]) and command_start(line.split()):
            found.append(Command(path, no, line.strip(), synopsis=True))
            continue
        try:
            simple = simple_commands(line)
        except ValueError:  # not shell (output, say)
            continue
        found += [Command(path, no, shlex.join(words), synopsis=False) for words in simple if command_start(words)]
    return found


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # noqa: SLF001 (argparse has no public way to list subcommands)
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return dict(action.choices)
    return {}


def check_synopsis(command: Command) -> None:
    start = command_start(command.text.split())
    assert start is not None
    prog, words = start
    commands = subparsers(build_parser(prog))
    names = words[0].split("|") if words else []
    assert names, f"{command}: no subcommand"
    for name in names:
        assert name in commands, f"{command}: no subcommand {name!r}; {prog} has {', '.join(commands)}"
        known = set(commands[name]._option_string_actions)  # noqa: SLF001
        if prog == KUBECTL_PLUGIN:
            known |= {"--kubeconfig", "--context", "-n", "--namespace"}
        for flag in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", " ".join(words[1:])):
            assert flag in known, f"{command}: {prog} {name} has no option {flag}; it has {', '.join(sorted(known))}"


def strict_parser(prog: str) -> argparse.ArgumentParser:
    """The command line's parser, taking no abbreviated flag: a page that writes `--quo` for `--quota` would
    break as soon as another flag began the same way."""
    parser = build_parser(prog)
    for p in (parser, *subparsers(parser).values()):
        p.allow_abbrev = False
    return parser


def check_command(command: Command) -> None:
    start = command_start(shlex.split(command.text))
    assert start is not None
    prog, argv = start
    if prog == KUBECTL_PLUGIN:
        argv = kubectl_argv(argv)
    errors, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(out):
            strict_parser(prog).parse_args(argv)
    except SystemExit as exc:
        assert not exc.code, f"{command}\n{errors.getvalue().strip()}"


ALL_COMMANDS = commands()


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=str)
def test_command_parses(command: Command) -> None:
    (check_synopsis if command.synopsis else check_command)(command)


def test_commands_are_found() -> None:
    """The check above sees the commands it is meant to: the README's install, a synopsis of every subcommand,
    and the kubectl plugin's form."""
    shown = {(rel(c.source), c.text.split()[1] if c.text.startswith("kubectl ") else c.text.split()[0].rsplit("/")[-1])
             for c in ALL_COMMANDS}
    assert ("README.md", "gpuclass") in shown
    assert any(c.synopsis for c in ALL_COMMANDS)
    assert any(c.text.startswith("kubectl gpu-class") for c in ALL_COMMANDS)
    listed = {c.text.split()[1] for c in ALL_COMMANDS
              if rel(c.source) == "docs/operators/commands.md" and c.text.startswith("gpuclass ")}
    assert set(subparsers(build_parser())) <= listed, "a subcommand missing from docs/operators/commands.md"


def test_slug_follows_github() -> None:
    assert slug("One GPU type per job: `gpu-class.io/group`") == "one-gpu-type-per-job-gpu-classiogroup"
    assert slug("Placement at scale (`python -m bench placement`)") == "placement-at-scale-python--m-bench-placement"
    assert slug("The live inventory through a burst (`python -m bench live_burst burst`)") == (
        "the-live-inventory-through-a-burst-python--m-bench-live_burst-burst")
    assert slug("[Link](x.md) and text") == "link-and-text"


def test_a_repeated_heading_gets_a_number(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A\n\n## Steady\n\n```\n## not a heading\n```\n\n## Steady\n")
    assert anchors(page) == {"a", "steady", "steady-1"}


@pytest.mark.parametrize("text", ["gpuclass kueue --quotas 16", "gpuclass kueue --quo 16",
                                  "kubectl gpu-class explain pod/train -n ml-team --bogus", "gpuclass nosuch"])
def test_a_wrong_command_fails(text: str) -> None:
    with pytest.raises(AssertionError, match="error:"):
        check_command(Command(REPO / "README.md", 1, text, synopsis=False))


def test_a_wrong_synopsis_fails() -> None:
    with pytest.raises(AssertionError, match="has no option --interval"):
        check_synopsis(Command(REPO / "README.md", 1, "gpuclass label-node [--interval N]", synopsis=True))


@pytest.mark.parametrize("target", ["docs/operators/dra.md#no-such-heading", "docs/no-such-page.md"])
def test_a_broken_link_fails(target: str) -> None:
    with pytest.raises(AssertionError, match="no heading|no such file"):
        check_target(REPO / "README.md", REPO, target, "README.md:1")
