"""The boundary's table while more than one table is written at once. Pure.

Every webhook worker keeps the BoundaryTable equal to the table it decides with (cluster/publish.py). Two workers
decide with different tables for a while: the two versions of a rolling upgrade or a rollback (one catalog each),
or two views of the cluster a moment apart. Were the stored table whichever was written last, the boundary would
refuse a Pod that one version placed on a type only that version gives the class. So `data`, what the policies
read, is the union of every table written within the last WRITER_TTL_SECONDS: each writer stores its own table
under `writers`, keyed by its digest, with the time it expires, and a table no writer writes again drops out of
the union once it has expired. A table stored by a writer that keeps no `writers` (gpu-class before 0.2.0, or an
apply of manifests) is taken in as one more writer until it expires.

The union only widens the boundary to what one of the writing versions gives a class: a type taken out of a class
stays allowed until the last writer that still has it stops, and WRITER_TTL_SECONDS after.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .boundary import CLASSES_KEY, OTHER_DEVICE_CLASSES_KEY, RESOURCES_KEY

# A writer refreshes its own mark when less than half of this is left, at its keeper's reread (every 30 s), so a
# writer that runs never expires; one that stopped drops out of the union this long after its last write at most.
WRITER_TTL_SECONDS = 90
LISTED_KEYS = (RESOURCES_KEY, CLASSES_KEY, OTHER_DEVICE_CLASSES_KEY)  # `,a,b,`


@dataclass(frozen=True)
class Written:
    """One writer's table, and when it drops out of the union (seconds since the epoch)."""

    data: Mapping[str, str]
    expires: int


@dataclass(frozen=True)
class Stored:
    """What to store: the union the policies read, and the writers it is the union of."""

    data: dict[str, str]
    writers: dict[str, Written]

    def writers_field(self) -> dict[str, Any]:
        return {d: {"expires": w.expires, "data": dict(w.data)} for d, w in sorted(self.writers.items())}


def digest(data: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(data), sort_keys=True).encode()).hexdigest()[:16]


def read_writers(field: Any) -> dict[str, Written]:
    """The stored `writers`; an entry that is not one (written by hand) is no writer."""
    found: dict[str, Written] = {}
    for key, entry in (field.items() if isinstance(field, dict) else ()):
        data, expires = (entry.get("data"), entry.get("expires")) if isinstance(entry, dict) else (None, None)
        if (isinstance(data, dict) and all(isinstance(v, str) for v in data.values())
                and isinstance(expires, int) and not isinstance(expires, bool)):
            found[str(key)] = Written(data, expires)
    return found


def union(tables: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """Every entry of every table, key by key, in the layout core/published/boundary.py writes."""
    tables = list(tables)
    if len(tables) == 1:
        return dict(tables[0])
    keys = sorted({k for t in tables for k in t})
    return {key: _union_of(key, [t[key] for t in tables if key in t]) for key in keys}


def _union_of(key: str, values: list[str]) -> str:
    if key in LISTED_KEYS:
        return "," + "".join(f"{n}," for n in _unique(v.split(",") for v in values))
    if key.startswith("class."):
        return "|" + "".join(f"{e}|" for e in _unique(v.split("|") for v in values))
    if key.startswith("globs."):
        return "\n".join(_unique(v.split("\n") for v in values))
    # a key of a layout this version does not know: kept as the writers agree, else the largest value, so that
    # the same writers give the same table whoever computes it
    return max(values, key=lambda v: (len(v), v))


def _unique(parts: Iterable[list[str]]) -> list[str]:
    seen: dict[str, None] = {}
    for items in parts:
        for item in items:
            if item:
                seen.setdefault(item, None)
    return list(seen)


def next_stored(stored_data: Mapping[str, str] | None, stored_writers: Mapping[str, Written],
                own: Mapping[str, str], now: int) -> Stored | None:
    """What a writer whose table is `own` stores at `now`, given what is stored; None when that needs no write
    (the union holds, and its own mark has more than half its time left)."""
    writers = {d: w for d, w in stored_writers.items() if w.expires > now}
    if stored_data is not None and dict(stored_data) != union(w.data for _, w in sorted(stored_writers.items())):
        # written by a writer that keeps no marks: one more writer, for as long as one of ours lasts
        writers.setdefault(digest(stored_data), Written(dict(stored_data), now + WRITER_TTL_SECONDS))
    mine = digest(own)
    if mine not in writers or writers[mine].expires - now < WRITER_TTL_SECONDS / 2:
        writers[mine] = Written(dict(own), now + WRITER_TTL_SECONDS)
    data = union(w.data for _, w in sorted(writers.items()))
    if stored_data is not None and dict(stored_data) == data and writers == dict(stored_writers):
        return None
    return Stored(data, writers)
