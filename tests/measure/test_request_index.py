"""The one place a requests table becomes typed records, by point (dflashbench.measure.request_index)."""

import gc

import pandas as pd

from dflashbench.measure import request_index
from dflashbench.measure.request_index import index_of
from dflashbench.types import RequestResult


def _r(i: int, point_id: str = "p1", run_id: str = "run", **kw) -> RequestResult:
    base = dict(run_id=run_id, point_id=point_id, request_id=f"q{i}", category="math" if i % 2 else "code",
                concurrency=2, ok=True, error=None, queued_ns=100 + i, sent_ns=110 + i, first_token_ns=200 + i,
                last_token_ns=400 + i, output_tokens=5, output_tokens_source="server")  # fmt: skip
    return RequestResult(**{**base, **kw})


def test_a_points_measured_requests_one_rule_for_every_reader():
    rows = [_r(0, warmup=True), _r(1), _r(2), _r(3, ok=False, error="timeout", first_token_ns=None, last_token_ns=None),
            _r(4, point_id="p2"), _r(5, run_id="other")]  # fmt: skip
    table = pd.DataFrame([r.to_dict() for r in rows])
    index = index_of(table)
    assert index is index_of(table)  # made once while the table lives
    assert index.of("run", "p1") == [rows[1], rows[2]]  # no warm-up, no failure, as written (gaps read as None)
    assert index.of("run", "p1", failed=True) == [rows[1], rows[2], rows[3]]
    assert index.of("run", "p1", "math") == [rows[1]] and index.of("run", "p1", "code") == [rows[2]]
    assert index.of(None, "p1") == [rows[1], rows[2], rows[5]]  # by id alone: a one-run table's reading
    assert [r.request_id for r in index.measured()] == ["q1", "q2", "q4", "q5"]
    assert index.by_point[("run", "p2")] == [rows[4]] and index.grouped()[("run", "p1")] == [rows[1], rows[2]]
    assert index.grouped(failed=True)[("run", "p1")] == [rows[1], rows[2], rows[3]]
    assert index_of(pd.DataFrame()).of("run", "p1") == []


def test_the_index_goes_with_its_table():
    table = pd.DataFrame([_r(1).to_dict()])
    key = id(table)
    index_of(table)
    assert key in request_index._INDEXES
    del table
    gc.collect()
    assert key not in request_index._INDEXES  # a later table at the same address gets its own
