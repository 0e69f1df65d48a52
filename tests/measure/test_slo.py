"""SLO terms parse strictly; a point meets an SLO when every percentile is within its bound; each method's best
throughput within the SLO and its ratio to AR's, on hand-made points."""

import pandas as pd
import pytest

from dflashbench.errors import UserError
from dflashbench.measure import slo


def test_parse_terms_and_units():
    terms = slo.parse_slo("tpot_p90=20ms, ttft_p99=2s,e2e_p50=1500us")
    assert [(t.metric, t.percentile, t.limit_s) for t in terms] == [
        ("tpot", 90.0, pytest.approx(0.02)), ("ttft", 99.0, 2.0), ("e2e", 50.0, pytest.approx(0.0015))]
    assert terms[0].label == "TPOT p90 ≤ 20 ms"
    assert [t.text for t in slo.parse_slo(None)] == ["ttft_p99=2s", "tpot_p90=50ms"]  # the default set


@pytest.mark.parametrize("bad", ["tpot=20ms", "tpot_p90=20", "itl_p90=20ms", "tpot_p100=1s", "tpot_p90<20ms"])
def test_bad_terms_name_the_fix(bad):
    with pytest.raises(UserError, match="bad --slo term .*e.g. tpot_p90=20ms,ttft_p99=2s"):
        slo.parse_slo(bad)


def test_best_throughput_within_the_slo_and_ratio_to_ar():
    terms = slo.parse_slo("tpot_p90=20ms")
    rows, pct = [], {}
    # AR: c=1 10 ms, c=4 25 ms (too slow). DFlash: c=1 4 ms, c=4 12 ms, c=8 30 ms (too slow).
    for method, c, tput, tpot in (("ar", 1, 100, 0.010), ("ar", 4, 300, 0.025),
                                  ("dflash", 1, 250, 0.004), ("dflash", 4, 700, 0.012), ("dflash", 8, 900, 0.030)):
        rows.append({"run_id": "r", "point_id": f"{method}{c}", "backend": "b", "model": "m", "workload": "w",
                     "category": "all", "method": method, "concurrency": c, "throughput_tok_per_s_per_gpu": tput,
                     "per_user_tok_per_s_mean": 1 / tpot})  # fmt: skip
        pct[("r", f"{method}{c}")] = {"tpot_p90=20ms": tpot}
    table = slo.best_within(pd.DataFrame(rows), pct, terms).set_index("method")
    assert table.loc["ar", "best_throughput_per_gpu"] == 100 and table.loc["ar", "concurrency"] == 1
    assert table.loc["dflash", "best_throughput_per_gpu"] == 700 and table.loc["dflash", "concurrency"] == 4
    assert table.loc["dflash", "ratio"] == pytest.approx(7.0)
    assert table.loc["dflash", "measured"] == "TPOT p90 12.0 ms"


def test_a_method_that_never_meets_the_slo_says_so():
    terms = slo.parse_slo("tpot_p90=1ms")
    pts = pd.DataFrame([{"run_id": "r", "point_id": "a", "backend": "b", "model": "m", "workload": "w",
                         "category": "all", "method": "ar", "concurrency": 1, "throughput_tok_per_s_per_gpu": 10.0}])
    table = slo.best_within(pts, {("r", "a"): {"tpot_p90=1ms": 0.01}}, terms)
    assert table.iloc[0]["note"] == "no measured point of 1 meets every bound"
    assert not slo.meets({"tpot_p90=1ms": None}, terms)  # unmeasured is not met


def test_a_percentile_is_read_only_where_the_requests_support_it():
    assert slo.supported(1000, 99) == 99 and slo.supported(100, 90) == 90
    # issue #53: read as asked or not at all, never a lower percentile under the asked one's name (32 requests: p68)
    assert slo.supported(32, 99) is None and slo.supported(999, 99) is None
    assert slo.supported(20, 50) == 50 and slo.supported(19, 50) is None
    assert slo.needs(slo.parse_slo("ttft_p99=30ms")[0]) == 1000 and slo.needs(slo.parse_slo("tpot_p90=6ms")[0]) == 100
    values, support = {"ttft_p99=30ms": None}, {"ttft_p99=30ms": (None, 32)}
    assert slo.unmeasured_why(values, support, slo.parse_slo("ttft_p99=30ms")) == \
        "TTFT p99 needs at least 1,000 requests; this point has 32"  # fmt: skip


def _row(method, c, tput, point):
    return {"run_id": "r", "point_id": point, "backend": "b", "model": "m", "workload": "w", "category": "all",
            "method": method, "concurrency": c, "throughput_tok_per_s_per_gpu": tput}  # fmt: skip


def test_a_best_is_never_read_past_a_point_not_measured():
    """AR's c=4 point, with the most throughput, lost its TPOT (bursts): AR's best within the SLO is not known, and
    DFlash is not read against AR's c=1 instead."""
    terms = slo.parse_slo("tpot_p50=50ms")
    pts = pd.DataFrame([_row("ar", 1, 100.0, "a1"), _row("ar", 4, 300.0, "a4"), _row("dflash", 4, 700.0, "d4")])
    pct = {("r", "a1"): {"tpot_p50=50ms": 0.01}, ("r", "a4"): {"tpot_p50=50ms": None}, ("r", "d4"): {"tpot_p50=50ms": 0.01}}
    table = slo.best_within(pts, pct, terms).set_index("method")
    assert not table.loc["ar", "known"] and pd.isna(table.loc["ar", "best_throughput_per_gpu"])
    assert pd.isna(table.loc["dflash", "ratio"])
    assert table.loc["dflash", "note"].startswith("no ratio: AR's best within the SLO is not known (not read: at c=4")
    # measured and failing is different: then c=1 is AR's best, and the SLO binds
    pct[("r", "a4")] = {"tpot_p50=50ms": 0.09}
    table = slo.best_within(pts, pct, terms).set_index("method")
    assert table.loc["ar", "best_throughput_per_gpu"] == 100 and bool(table.loc["ar", "binds"])
    assert table.loc["dflash", "ratio"] == pytest.approx(7.0) and not table.loc["dflash", "binds"]
