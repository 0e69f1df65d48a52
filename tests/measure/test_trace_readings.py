"""A trace replay's readings on hand-computed cases: lateness overall and at the peak second, lengths against the
trace's, tau as committed tokens per step with and without the text past the EOS, each method against AR on the
same traffic with paired intervals, and the verdict's sentence."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from dflashbench.measure import trace_readings as tr
from dflashbench.report import trace as trace_report
from dflashbench.types import RequestResult

MS = 1_000_000


def _r(i: int, *, late_ms: float = 0.0, arrival_s: float = 0.0, out: int = 10, asked: int | None = None,
       ttft_ms: float = 100.0, tpot_ms: float = 10.0, point: str = "p", steps: int | None = None,
       accepted: int | None = None, eos: int | None = None, steps_eos: int | None = None, prompt: int = 50,
       target: int = 50, speed: float = 2.0, start_ns: int = 10**12) -> RequestResult:  # fmt: skip
    queued = start_ns + round(arrival_s / speed * 1e9)  # due on the trace's clock at the speed, as the open loop stamps it
    sent = queued + int(late_ms * MS)
    first = sent + int(ttft_ms * MS)
    chunks = tuple(first + int(k * tpot_ms * MS) for k in range(out))
    return RequestResult(run_id="run", point_id=point, request_id=f"t#{i}", category="code", concurrency=0, ok=True,
                         error=None, queued_ns=queued, sent_ns=sent, first_token_ns=first, last_token_ns=chunks[-1],
                         output_tokens=out, output_tokens_source="server", prompt_tokens=prompt, chunk_ns=chunks,
                         chunk_tokens=(1,) * out, spec_verify_steps=steps, spec_accepted_tokens=accepted,
                         eos_token_index=eos, spec_verify_steps_to_eos=steps_eos,
                         spec_accepted_tokens_to_eos=None if steps_eos is None else 0, trace_index=i,
                         trace_arrival_s=arrival_s, trace_input_tokens=target * 10, trace_output_tokens=asked or out,
                         trace_target_input_tokens=target, trace_target_output_tokens=asked or out)  # fmt: skip


def test_lateness_over_the_point_and_at_its_peak_second():
    # arrivals at 2x: the second 1 of the schedule (trace seconds 2-4) holds three requests, the busiest
    rows = [_r(0, arrival_s=0.1, late_ms=1), _r(1, arrival_s=2.2, late_ms=4), _r(2, arrival_s=2.6, late_ms=8),
            _r(3, arrival_s=3.9, late_ms=2), _r(4, arrival_s=9.0, late_ms=0.5)]  # fmt: skip
    late = tr.lateness(rows, speed=2.0)
    assert late["requests"] == 5 and late["p50_ms"] == pytest.approx(2.0) and late["max_ms"] == pytest.approx(8.0)
    assert late["peak"]["second"] == 1 and late["peak"]["requests"] == 3
    assert late["peak"]["p50_ms"] == pytest.approx(4.0) and late["peak"]["max_ms"] == pytest.approx(8.0)
    assert tr.lateness([dataclasses.replace(rows[0], warmup=True)], 1.0)["requests"] == 0  # warm-up is not sent


def test_lengths_against_the_traces():
    rows = [_r(0, prompt=50, target=50), _r(1, prompt=60, target=50), _r(2, prompt=20, target=100, out=7, asked=9)]
    got = tr.lengths(rows)
    assert got["input_counted"] == 3 and got["input_within_10pct"] == pytest.approx(1 / 3)
    assert got["input_median_abs_error"] == 10 and got["input_target_p50"] == 50 and got["input_sent_p50"] == 50
    assert got["output_as_asked"] == pytest.approx(2 / 3)


def test_tau_counts_committed_tokens_and_leaves_out_the_text_past_the_eos():
    # 10 tokens asked, one 16-token block accepted whole: the counters say 1 + 15/1 = 16, but 9 tokens came
    # after the prefill's first in that one step; the second request's EOS was its 4th token (index 3), committed
    # by its first of 3 steps
    rows = [_r(0, out=10, steps=1, accepted=15, steps_eos=1), _r(1, out=25, steps=3, accepted=30, eos=3, steps_eos=1)]
    got = tr.tau_split(rows)
    assert got["tau"] == pytest.approx((9 + 24) / 4)
    assert got["tau_to_eos"] == pytest.approx((9 + 3) / 2)
    assert got["eos_requests"] == 1 and got["eos_reported"] == 2
    assert got["past_eos_share"] == pytest.approx(21 / 35)  # tokens after index 3 of the second request
    ar = tr.tau_split([_r(0)])
    assert ar["tau"] is None and ar["past_eos_share"] is None


def _point(method: str, reqs: list[RequestResult], good: int, slo: dict, ttft_p99: float, tpot_p50: float) -> dict:
    # the rate the schedule asks: arrivals 0.3 s apart on the trace at 2× (the achieved one is read from the requests)
    extra = {"load": {"request_rate": 2.0 / 0.3, "arrivals": "trace"},
             "goodput": {"slo": slo, "good": good, "requests": len(reqs), "good_share": good / len(reqs),
                         "goodput_req_per_s": good / 10},
             "trace": {"trace": "azure-code", "window_s": 600.0, "speed": 2.0, "content": "workloads",
                       **tr.point_figures(reqs, 2.0)}}  # fmt: skip
    return {"run_id": "run", "point_id": method, "backend": "reference", "model": "m", "workload": "trace azure-code: x",
            "category": "all", "method": method, "concurrency": 0, "status": "ok", "extra": extra,
            "throughput_tok_per_s_per_gpu": 100.0, "ttft_s_p50": 0.1, "ttft_s_p99": ttft_p99, "tpot_s_p50": tpot_p50,
            "tpot_s_p99": tpot_p50 * 2}  # fmt: skip


def test_each_method_against_ar_on_the_same_traffic_and_the_verdicts_sentence():
    slo = {"ttft_s": 0.5}
    ar = [_r(i, point="ar", ttft_ms=100 if i % 5 else 900, arrival_s=i * 0.3) for i in range(40)]  # 32 of 40 meet it
    df = [_r(i, point="dflash", ttft_ms=80 if i % 10 else 700, arrival_s=i * 0.3, steps=2, accepted=12,
             steps_eos=2) for i in range(40)]  # 36 of 40  # fmt: skip
    points = pd.DataFrame([_point("ar", ar, 32, slo, 0.9, 0.010), _point("dflash", df, 36, slo, 0.7, 0.005)])
    requests = pd.DataFrame([r.to_dict() for r in ar + df])
    table = tr.trace_table(points, requests, n=400)
    row = table[table["method"] == "dflash"].iloc[0]
    assert row["goodput_x"] == pytest.approx(36 / 32)
    assert row["goodput_x_lo"] < row["goodput_x"] < row["goodput_x_hi"]  # paired by trace row
    assert row["tpot_p50_x"] == pytest.approx(0.5)
    # 40 requests hold no p99 (the SLO reading's rule: 1,000): it is their maximum, so it is not shown
    assert row["ttft_s_p99"] is None and row["tpot_s_p99"] is None
    assert row["tau"] == pytest.approx(9 / 2) and row["peak_requests"] == 7  # 0.3 s apart at 2x: 0.15 s, 7 in a second at most
    # what the verdict decides on: the requests' time, paired by trace row, as on a closed loop
    e2e = [(r.last_token_ns - r.sent_ns) / 1e9 for r in df], [(r.last_token_ns - r.sent_ns) / 1e9 for r in ar]
    assert row["latency_x"] == pytest.approx(sum(e2e[0]) / sum(e2e[1])) and row["latency_x_hi"] < 1
    assert row["latency_verdict"] == "better"
    line = trace_report.verdict_lines_of(points, requests, {})[0]
    assert line.startswith("Serve DFlash on azure-code, first 10 min at 2× (requests take "), line
    from dflashbench.report.tables import x_iv

    assert f"goodput {x_iv(row.to_dict(), 'goodput_x')} AR's beside it" in line, line
    nothing = tr.trace_table(points.assign(extra=[{"load": {"request_rate": 2.0}}] * 2), requests)
    assert nothing.empty  # rate points are not trace points


def test_lateness_is_read_on_the_traces_clock_not_from_when_a_request_was_stamped():
    """A sender that stamps each request when it goes (in turn, after the one before) makes ``sent - queued`` zero;
    the lateness against ``start + arrival / speed`` still shows how late each went."""
    paced = [_r(i, arrival_s=i * 0.1, speed=1.0) for i in range(10)]  # due every 100 ms
    stamped = [dataclasses.replace(r, queued_ns=10**12 + i * 300 * MS, sent_ns=10**12 + i * 300 * MS)
               for i, r in enumerate(paced)]  # went every 300 ms, each stamped as it went  # fmt: skip
    late = tr.lateness(stamped, speed=1.0)
    assert late["max_ms"] == pytest.approx(9 * 200.0) and late["p50_ms"] == pytest.approx(900.0)
    assert tr.lateness(paced, speed=1.0)["max_ms"] == pytest.approx(0.0)  # on time


def test_the_rate_sent_is_read_from_the_requests_where_they_are_stored():
    """Review 2026-11-29, probe p10b: a point row that says its schedule was kept while its requests went at 1/3 of
    the pace reads as not kept (the lateness is read from the same requests)."""
    paced = [_r(i, arrival_s=i * 0.1, speed=1.0) for i in range(10)]  # due every 100 ms: 10/s
    slow = [dataclasses.replace(r, sent_ns=10**12 + i * 300 * MS) for i, r in enumerate(paced)]
    row = {"extra": {"load": {"request_rate": 10.0, "achieved_rate_per_s": 10.0}}}
    assert tr.rates_sent(row, paced) == pytest.approx((10.0, 10.0))
    asked, achieved = tr.rates_sent(row, slow)
    assert achieved == pytest.approx(10 / 3) and tr.schedule_kept(asked, achieved) is False
    assert tr.rates_sent(row, []) == (10.0, 10.0)  # no requests stored: the point row's own


def test_the_traces_clock_starts_with_each_point():
    """Each point replays the trace from its own start (a repeat round's, a resumed run's): the same requests
    sent an hour later are on time on their own clock."""
    first = [_r(i, arrival_s=i * 0.5, late_ms=2) for i in range(6)]
    later = [_r(i, arrival_s=i * 0.5, late_ms=2, start_ns=10**12 + 3600 * 10**9) for i in range(6)]
    assert tr.clock_start_ns(later, 2.0) - tr.clock_start_ns(first, 2.0) == 3600 * 10**9
    assert tr.lateness(later, 2.0)["max_ms"] == pytest.approx(2.0) == tr.lateness(first, 2.0)["max_ms"]


def test_a_schedule_more_than_five_percent_off_is_not_kept():
    assert tr.schedule_kept(3.153, 3.0) is True  # 95.1 %
    assert tr.schedule_kept(3.153, 2.99) is False and tr.schedule_kept(7.86, 16.05) is False  # short, and over
    assert tr.schedule_kept(None, 2.0) is None and tr.schedule_kept(2.0, None) is None
