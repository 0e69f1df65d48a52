"""A run set's stored requests as typed records, grouped by point: the one place where a requests table becomes
:class:`~dflashbench.types.RequestResult` records for the readings that need one point's requests (the gate's
tests, the verdict's intervals, the SLO reading, tau by slice, the trace replay's readings).

A table is turned into records once (:func:`index_of` keeps the index while the table lives), so a report that
reads the same point's requests for several figures does not parse them again, and every reader applies the same
rule for "a point's measured requests": the point's rows (by run and point id), warm-ups left out, failures left
out unless asked for, a category row's share where the figure is a category's.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

import pandas as pd

from dflashbench.types import RequestResult

_INDEXES: dict[int, RequestIndex] = {}  # id(table) -> its index, dropped when the table is collected


@dataclass
class RequestIndex:
    """Every stored request of a table as a record, by ``(run_id, point_id)``, in stored order."""

    by_point: dict[tuple[str, str], list[RequestResult]] = field(default_factory=dict)

    def of(self, run_id: str | None, point_id: str, category: str = "all", *, failed: bool = False
           ) -> list[RequestResult]:  # fmt: skip
        """The point's measured requests (no warm-ups; no failures unless ``failed``), its ``category``'s share
        for a category row. ``run_id`` ``None``: by point id alone (a table of one run)."""
        point_id = str(point_id)
        rows = [r for (run, pid), rs in self.by_point.items() if pid == point_id for r in rs] if run_id is None \
            else self.by_point.get((str(run_id), point_id), [])  # fmt: skip
        return [r for r in rows if not r.warmup and (failed or r.ok) and (category == "all" or r.category == category)]

    def grouped(self, *, failed: bool = False) -> dict[tuple[str, str], list[RequestResult]]:
        """``(run_id, point_id) -> its measured requests`` (:meth:`of`), for every point that has any."""
        return {key: mine for key in self.by_point if (mine := self.of(*key, failed=failed))}

    def measured(self) -> Iterator[RequestResult]:
        """Every point's measured, successful requests, point by point in stored order."""
        for run_id, point_id in self.by_point:
            yield from self.of(run_id, point_id)


def index_of(requests: pd.DataFrame | None) -> RequestIndex:
    """The index of a requests table (``Run.requests``, or several runs' concatenated), made on first use and kept
    while the table lives. Tables are not changed in place after they are read (a filter makes a new table)."""
    if requests is None or requests.empty or "point_id" not in requests.columns:
        return RequestIndex()
    key = id(requests)
    found = _INDEXES.get(key)
    if found is None:
        found = RequestIndex()
        for rec in requests.to_dict("records"):
            r = RequestResult.from_dict(rec)  # a table's gaps read back as None, its float-made ints as ints
            found.by_point.setdefault((str(r.run_id), str(r.point_id)), []).append(r)
        _INDEXES[key] = found
        weakref.finalize(requests, _INDEXES.pop, key, None)
    return found
