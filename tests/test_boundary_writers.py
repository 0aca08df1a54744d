"""The boundary's table as the union of the tables written lately (webhook/core/published/writers.py)."""

from __future__ import annotations

from typing import Any, Mapping

import pytest

from webhook.core.published.boundary import boundary_data
from webhook.core.published.writers import (
    WRITER_TTL_SECONDS, Stored, Written, digest, next_stored, read_writers, union,
)
from webhook.core.catalog.loading import load_default_catalog

OLD = {"resources": ",nvidia.com/gpu,", "classes": ",high,economy,",
       "class.high": "|gpu h100 nvidia.com/gpu|gpu a100 nvidia.com/gpu|", "class.economy": "|gpu t4 nvidia.com/gpu|",
       "otherDeviceClasses": ","}
# the next version: A100 out of high, T4 in; a class of its own; a glob
NEW = {"resources": ",nvidia.com/gpu,amd.com/gpu,", "classes": ",high,economy,amd,",
       "class.high": "|gpu h100 nvidia.com/gpu|gpu t4 nvidia.com/gpu|", "class.economy": "|gpu t4 nvidia.com/gpu|",
       "class.amd": "|", "globs.amd": "gpu amd.com/gpu ^MI3.*$", "otherDeviceClasses": ",nic.example.com,"}
BOTH = {"resources": ",nvidia.com/gpu,amd.com/gpu,", "classes": ",high,economy,amd,",
        "class.high": "|gpu h100 nvidia.com/gpu|gpu a100 nvidia.com/gpu|gpu t4 nvidia.com/gpu|",
        "class.economy": "|gpu t4 nvidia.com/gpu|", "class.amd": "|", "globs.amd": "gpu amd.com/gpu ^MI3.*$",
        "otherDeviceClasses": ",nic.example.com,"}
NOW = 1_000_000
TTL = WRITER_TTL_SECONDS


def _entries(data: Mapping[str, str]) -> dict[str, set[str]]:
    """Each key's entries, whatever their order: what the policy finds in it."""
    sep = {"class.": "|", "globs.": "\n"}
    return {k: {e for e in v.split(next((s for p, s in sep.items() if k.startswith(p)), ",")) if e}
            for k, v in data.items()}


def test_the_union_holds_every_entry_of_either_table() -> None:
    assert _entries(union([OLD, NEW])) == _entries(BOTH)
    assert union([OLD]) == OLD
    assert union([OLD, OLD]) == OLD


def test_the_union_of_the_shipped_tables_keeps_their_layout() -> None:
    table = boundary_data(load_default_catalog())
    assert union([table, table]) == table, "the union of a table with itself is that table, byte for byte"


def joined(*tables: Mapping[str, str]) -> dict[str, str]:
    """The union as a writer stores it: the tables in the order of their digests."""
    return union(sorted(tables, key=digest))


def stored_writers(*tables: tuple[Mapping[str, str], int]) -> dict[str, Written]:
    return {digest(t): Written(dict(t), expires) for t, expires in tables}


@pytest.mark.parametrize("stored_data, writers, own, data, written_by", [
    pytest.param(None, {}, NEW, _entries(NEW), {digest(NEW)}, id="first-write"),
    pytest.param(NEW, stored_writers((NEW, NOW + TTL)), NEW, None, set(), id="nothing-to-write"),
    pytest.param(NEW, stored_writers((NEW, NOW + TTL // 2 - 1)), NEW, _entries(NEW), {digest(NEW)},
                 id="own-mark-refreshed-past-half-its-time"),
    pytest.param(OLD, stored_writers((OLD, NOW + TTL)), NEW, _entries(BOTH), {digest(OLD), digest(NEW)},
                 id="the-other-version-joined"),
    pytest.param(joined(OLD, NEW), stored_writers((OLD, NOW + 5), (NEW, NOW + TTL)), NEW, None, set(),
                 id="both-while-both-write"),
    pytest.param(joined(OLD, NEW), stored_writers((OLD, NOW), (NEW, NOW + TTL)), NEW, _entries(NEW),
                 {digest(NEW)}, id="a-writer-gone-drops-out-once-expired"),
    pytest.param(OLD, {}, NEW, _entries(BOTH), {digest(OLD), digest(NEW)}, id="a-table-without-marks-taken-in"),
    pytest.param(OLD, stored_writers((NEW, NOW + TTL)), NEW, _entries(BOTH), {digest(OLD), digest(NEW)},
                 id="written-over-by-one-that-keeps-no-marks"),
])
def test_what_a_writer_stores(stored_data: Mapping[str, str] | None, writers: dict[str, Written],
                              own: Mapping[str, str], data: dict[str, set[str]] | None, written_by: set[str]) -> None:
    stored = next_stored(stored_data, writers, own, NOW)
    if data is None:
        assert stored is None
        return
    assert stored is not None
    assert _entries(stored.data) == data
    assert set(stored.writers) == written_by
    assert stored.writers[digest(own)].expires > NOW + TTL // 2
    assert stored.data == union(w.data for _, w in sorted(stored.writers.items()))


def test_a_table_taken_in_without_marks_expires_like_any_writer() -> None:
    first = next_stored(OLD, {}, NEW, NOW)
    assert first is not None
    later = NOW + TTL + 1
    again = next_stored(first.data, read_writers(first.writers_field()), NEW, later)
    assert again is not None and again.data == NEW and set(again.writers) == {digest(NEW)}


def test_two_writers_that_take_turns_settle_on_the_union() -> None:
    """Each reads what the other wrote and writes again: after one turn each, neither needs to write."""
    data: Mapping[str, str] | None = None
    writers: dict[str, Written] = {}
    writes = 0
    for turn in range(6):
        stored = next_stored(data, writers, (OLD, NEW)[turn % 2], NOW + turn)
        if stored is not None:
            writes += 1
            data, writers = stored.data, read_writers(stored.writers_field())
    assert writes == 2 and data is not None and _entries(data) == _entries(BOTH)


@pytest.mark.parametrize("field, read", [
    pytest.param({"a": {"expires": 5, "data": {"k": "v"}}}, {"a": Written({"k": "v"}, 5)}, id="a-writer"),
    pytest.param({"a": {"expires": "5", "data": {"k": "v"}}}, {}, id="expires-not-a-number"),
    pytest.param({"a": {"expires": True, "data": {"k": "v"}}}, {}, id="expires-a-bool"),
    pytest.param({"a": {"expires": 5, "data": {"k": 1}}}, {}, id="a-value-not-a-string"),
    pytest.param({"a": "x"}, {}, id="not-an-object"),
    pytest.param(None, {}, id="no-writers"),
    pytest.param(["a"], {}, id="a-list"),
])
def test_what_is_read_as_a_writer(field: Any, read: dict[str, Written]) -> None:
    assert read_writers(field) == read


def test_the_writers_field_reads_back() -> None:
    stored = Stored(dict(NEW), stored_writers((OLD, 7), (NEW, 9)))
    assert read_writers(stored.writers_field()) == stored.writers
