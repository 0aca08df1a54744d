"""Parse what ``nvidia-smi`` prints into typed GPU records (pure: no I/O, stdlib only).

The node labeller runs ``nvidia-smi --query-gpu=index,name,memory.total,mig.mode.current
--format=csv,nounits`` (see ``QUERY_COMMAND``), but this parser takes every shape that real
nodes produce, because drivers differ and operators paste what they have:

* query CSV with or without the header line, with or without units (``81920 MiB`` / ``81920``),
  any column order when a header names the columns, extra columns ignored;
* ``[N/A]`` / ``N/A`` / ``[Not Supported]`` values;
* ``nvidia-smi -L`` (``GPU 0: NAME (UUID: ...)`` plus indented ``MIG ... Device N:`` lines);
* the default ``nvidia-smi`` table (both the pre-R525 and the newer column layout).

The header is kept in ``QUERY_COMMAND`` on purpose: it makes the output self-describing, so the
fallback query for drivers that predate ``mig.mode.current`` parses with the same code.

This module must stay importable with the standard library alone: the device check runs it on
GPU machines where the project's dependencies may be missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal, Sequence

__all__ = [
    "FALLBACK_QUERY_COMMAND",
    "QUERY_COMMAND",
    "QUERY_FIELDS",
    "Gpu",
    "MigMode",
    "NvidiaSmiParseError",
    "parse_list_gpus",
    "parse_nvidia_smi_output",
    "parse_query_csv",
    "parse_table",
]

#: Fields the labeller asks for. All four are documented in ``nvidia-smi --help-query-gpu``.
QUERY_FIELDS: Final[tuple[str, ...]] = ("index", "name", "memory.total", "mig.mode.current")
QUERY_COMMAND: Final[tuple[str, ...]] = (
    "nvidia-smi",
    "--query-gpu=" + ",".join(QUERY_FIELDS),
    "--format=csv,nounits",
)
# Drivers before MIG existed reject the whole query when one field is unknown
# ('Field "mig.mode.current" is not a valid field to query.'), so the labeller retries without it.
FALLBACK_QUERY_COMMAND: Final[tuple[str, ...]] = (
    "nvidia-smi",
    "--query-gpu=" + ",".join(QUERY_FIELDS[:3]),
    "--format=csv,nounits",
)

#: "enabled"/"disabled": what the driver reports; "unsupported": the GPU has no MIG ([N/A]);
#: "unknown": the output did not say (``-L`` without MIG lines, a table without the MIG column).
MigMode = Literal["enabled", "disabled", "unsupported", "unknown"]


class NvidiaSmiParseError(ValueError):
    """The text is not nvidia-smi output this module understands; the message says which line."""


@dataclass(frozen=True)
class Gpu:
    """One physical GPU as nvidia-smi reports it."""

    index: int
    #: As the driver prints it, e.g. "NVIDIA A100-SXM4-80GB" or (older drivers) "A100-SXM4-40GB".
    name: str
    #: memory.total in MiB; None when nvidia-smi said N/A or the output shape does not carry it.
    memory_mib: int | None
    mig_mode: MigMode
    #: MIG profiles of the instances listed under this GPU (``-L`` output only), e.g. ("1g.5gb",).
    mig_devices: tuple[str, ...] = ()


# nvidia-smi writes these instead of a value; all of them mean "no value".
_NO_VALUE: Final[frozenset[str]] = frozenset(
    {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]"}
)
_HEADER_CELL = re.compile(r"^[a-z][a-z0-9_.]*(?:\s*\[[^\]]*\])?$")
_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]*\]$")
_MEMORY = re.compile(r"^(\d+)\s*(MiB)?$", re.IGNORECASE)
_LIST_GPU = re.compile(r"^GPU\s+(\d+):\s*(.*?)\s*(?:\(UUID:.*)?$")
_LIST_MIG = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+\d+:")
_TABLE_GPU_ROW = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(?:On|Off)\s+\|")
_TABLE_MEMORY = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_TABLE_LAST_CELL = re.compile(r"\|\s*([^|]*?)\s*\|\s*$")


def _is_no_value(cell: str) -> bool:
    return cell.strip().lower() in _NO_VALUE


def _parse_memory_mib(cell: str, line_number: int) -> int | None:
    if _is_no_value(cell):
        return None
    match = _MEMORY.match(cell.strip())
    if match is None:
        raise NvidiaSmiParseError(f"line {line_number}: memory.total {cell.strip()!r} is not '<n>' or '<n> MiB'")
    return int(match.group(1))


def _parse_mig_mode(cell: str) -> MigMode:
    value = cell.strip().lower()
    if value == "enabled":
        return "enabled"
    if value == "disabled":
        return "disabled"
    if _is_no_value(value):
        return "unsupported"
    # "Pending" and other future states: claim nothing rather than guess.
    return "unknown"


def _is_header(cells: Sequence[str]) -> bool:
    # Header cells are lower-case dotted field names ("memory.total [MiB]"); data rows always hold
    # a GPU name with a capital letter or a space, or a numeric index, so they never look like this.
    return all(_HEADER_CELL.match(cell) for cell in cells)


def _content_lines(text: str) -> list[tuple[int, str]]:
    """Non-blank lines with 1-based numbers; driver warnings printed before the data are skipped."""
    lines: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().upper().startswith("WARNING"):
            continue
        lines.append((number, line.rstrip("\r")))
    return lines


def parse_query_csv(text: str, *, fields: Sequence[str] = QUERY_FIELDS) -> tuple[Gpu, ...]:
    """Parse ``--query-gpu=... --format=csv[,noheader][,nounits]`` output.

    With a header line the columns are taken from it (units in brackets dropped) and ``fields`` is
    ignored; without one the columns are ``fields``. ``name`` is required; ``index`` defaults to
    the row number, ``memory.total`` to None, ``mig.mode.current`` to "unknown".
    """
    lines = _content_lines(text)
    if not lines:
        raise NvidiaSmiParseError("no output: expected one CSV line per GPU")
    first_cells = [cell.strip() for cell in lines[0][1].split(",")]
    columns: list[str]
    if _is_header(first_cells):
        columns = [_UNIT_SUFFIX.sub("", cell) for cell in first_cells]
        rows = lines[1:]
    else:
        columns = list(fields)
        rows = lines
    if "name" not in columns:
        raise NvidiaSmiParseError(f"no 'name' column in {columns!r}")
    if not rows:
        raise NvidiaSmiParseError("header only: nvidia-smi listed no GPU")
    gpus: list[Gpu] = []
    for row_number, (line_number, line) in enumerate(rows):
        # GPU names never contain commas, and nvidia-smi does not quote: a plain split is exact.
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(columns):
            raise NvidiaSmiParseError(
                f"line {line_number}: {len(cells)} values for {len(columns)} columns {columns!r}: {line.strip()!r}"
            )
        row = dict(zip(columns, cells))
        name = row["name"]
        if _is_no_value(name):
            raise NvidiaSmiParseError(f"line {line_number}: GPU without a name: {line.strip()!r}")
        index_cell = row.get("index")
        if index_cell is None:
            index = row_number
        elif index_cell.isdigit():
            index = int(index_cell)
        else:
            raise NvidiaSmiParseError(f"line {line_number}: index {index_cell!r} is not a number")
        memory_cell = row.get("memory.total")
        mig_cell = row.get("mig.mode.current")
        gpus.append(
            Gpu(
                index=index,
                name=name,
                memory_mib=None if memory_cell is None else _parse_memory_mib(memory_cell, line_number),
                mig_mode="unknown" if mig_cell is None else _parse_mig_mode(mig_cell),
            )
        )
    return tuple(gpus)


def parse_list_gpus(text: str) -> tuple[Gpu, ...]:
    """Parse ``nvidia-smi -L``: names and MIG instances, no memory.

    A GPU followed by ``MIG <profile> Device N:`` lines is MIG-enabled. One without them may be
    MIG-enabled with no instance created yet; ``-L`` cannot tell, so its mode is "unknown".
    The closing parenthesis after the UUID is optional (it is missing in some pasted output).
    """
    names: list[tuple[int, str]] = []
    migs: list[list[str]] = []
    for line_number, line in _content_lines(text):
        gpu_match = _LIST_GPU.match(line)
        if gpu_match is not None:
            names.append((int(gpu_match.group(1)), gpu_match.group(2)))
            migs.append([])
            continue
        mig_match = _LIST_MIG.match(line)
        if mig_match is not None and migs:
            migs[-1].append(mig_match.group(1))
            continue
        raise NvidiaSmiParseError(f"line {line_number}: not 'GPU <n>: <name> (UUID: ...)': {line.strip()!r}")
    if not names:
        raise NvidiaSmiParseError("no 'GPU <n>:' line")
    return tuple(
        Gpu(
            index=index,
            name=name,
            memory_mib=None,
            mig_mode="enabled" if profiles else "unknown",
            mig_devices=tuple(profiles),
        )
        for (index, name), profiles in zip(names, migs)
    )


def parse_table(text: str) -> tuple[Gpu, ...]:
    """Parse the default ``nvidia-smi`` table (the GPU section; the Processes section is ignored).

    Each GPU is a block of three rows: index/name/persistence, then memory "used / total", then
    the MIG mode in the last cell. The table truncates long names with "..."; such a name is
    refused rather than turned into a label that names no real model.
    """
    lines = [line for _, line in _content_lines(text)]
    gpus: list[Gpu] = []
    for position, line in enumerate(lines):
        if "Processes:" in line or "MIG devices:" in line:
            break
        row = _TABLE_GPU_ROW.match(line)
        if row is None:
            continue
        name = row.group(2).strip()
        if name.endswith("..."):
            raise NvidiaSmiParseError(f"GPU {row.group(1)}: name {name!r} is truncated by the table; use --query-gpu")
        memory_mib: int | None = None
        mig_mode: MigMode = "unknown"
        if position + 1 < len(lines):
            memory = _TABLE_MEMORY.search(lines[position + 1])
            if memory is not None:
                memory_mib = int(memory.group(2))
        if position + 2 < len(lines) and not lines[position + 2].startswith("+"):
            last = _TABLE_LAST_CELL.search(lines[position + 2])
            if last is not None:
                mig_mode = _parse_mig_mode(last.group(1))
        gpus.append(Gpu(index=int(row.group(1)), name=name, memory_mib=memory_mib, mig_mode=mig_mode))
    if not gpus:
        raise NvidiaSmiParseError("no GPU row in the nvidia-smi table")
    return tuple(gpus)


def parse_nvidia_smi_output(text: str, *, fields: Sequence[str] = QUERY_FIELDS) -> tuple[Gpu, ...]:
    """Parse any supported nvidia-smi output shape, detected from its first content line.

    ``fields`` names the columns of header-less CSV. Raises NvidiaSmiParseError on anything else,
    including empty output: on a GPU node that means the GPUs are not visible, not that there are none.
    """
    lines = _content_lines(text)
    if not lines:
        raise NvidiaSmiParseError("no output: nvidia-smi listed no GPU")
    first = lines[0][1]
    if first.strip().startswith("No devices were found"):
        raise NvidiaSmiParseError("nvidia-smi found no GPU ('No devices were found')")
    if _LIST_GPU.match(first):
        return parse_list_gpus(text)
    # The plain table may start with a timestamp line, so look for its frame anywhere.
    if any(line.startswith("+-") or line.startswith("|") for _, line in lines):
        return parse_table(text)
    return parse_query_csv(text, fields=fields)
