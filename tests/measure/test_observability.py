"""The burst rule (dflashbench.measure.observability) and what the point figures do with it (metrics.latency_fields): hand-made
requests whose every number is known, and the rule against a real vLLM run's requests (tests/fixtures/timing)."""

import json
from pathlib import Path

import pytest

from dflashbench.backends.counters import Histogram, parse_latency_histograms, server_timing, sum_histograms
from dflashbench.measure import metrics, observability
from dflashbench.reference.serving.metrics import ServerMetrics, render_metrics
from dflashbench.types import RequestResult

MS = 1_000_000
FIXTURE = Path(__file__).parent.parent / "fixtures" / "timing" / "vllm-cpu-pinned-requests.jsonl"


def req(gaps_ms, tokens=None, *, first_ms=50.0, ok=True, i=0) -> RequestResult:
    """A request whose chunk ``j >= 1`` arrives ``gaps_ms[j-1]`` after chunk ``j-1``, carrying ``tokens[j]``."""
    sent = 1_000 * MS + i * 1_000 * MS
    t = [sent + int(first_ms * MS)]
    for g in gaps_ms:
        t.append(t[-1] + int(g * MS))
    tokens = tuple(tokens or (1,) * len(t))
    return RequestResult(run_id="r", point_id="p", request_id=f"q{i}", category="c", concurrency=1, ok=ok,
                         error=None if ok else "boom", queued_ns=sent, sent_ns=sent, first_token_ns=t[0],
                         last_token_ns=t[-1], output_tokens=sum(tokens), output_tokens_source="server",
                         chunk_ns=tuple(t), chunk_tokens=tokens)  # fmt: skip


def test_evenly_paced_tokens_are_observable():
    r = req([5.0] * 19)
    assert observability.burst_tokens(r) == 0 and observability.timing_observable(r) is True


def test_a_whole_output_landing_at_once_is_not_observable_and_has_no_tpot_of_zero():
    r = req([0.0] * 79)  # 80 one-token chunks, one stamp: what the first vLLM CPU run recorded
    assert observability.burst_tokens(r) == 79 and observability.timing_observable(r) is False
    assert metrics.tpot_s(r) == 0.0  # the raw formula gives 0 ...
    p = metrics.summarize_point([r], None, run_id="r", point_id="p", backend="b", method="ar", model="m",
                                draft=None, workload="w", concurrency=1, num_gpus=0)  # fmt: skip
    # ... but the point never reports it as measured
    for field in ("tpot_s_p50", "tpot_s_p99", "tpot_s_mean", "itl_s_p50", "itl_s_p99", "icl_s_p50",
                  "per_user_tok_per_s_mean", "per_user_tok_per_s_p50", "per_user_tok_per_s_pooled"):  # fmt: skip
        assert getattr(p, field) is None, field
    assert p.ttft_s_p50 == pytest.approx(0.05) and p.throughput_tok_per_s > 0  # what was measured stands
    assert (p.timing_requests, p.timing_observed_requests, p.timing_observed_share) == (1, 0, 0.0)
    assert p.timing_observed_tokens_share == 0.0
    assert "1 of 1 requests got most of their output in bursts" in p.latency_not_measured_reason


def test_all_tokens_in_the_first_chunk_is_a_burst():
    r = req([], tokens=(40,))
    assert observability.burst_tokens(r) == 39 and observability.timing_observable(r) is False


def test_speculative_chunks_after_real_gaps_are_not_bursts():
    r = req([12.0] * 9, tokens=(1, *(4,) * 9))  # a verification step of 4 tokens every 12 ms
    assert observability.burst_tokens(r) == 0 and observability.timing_observable(r) is True
    assert metrics.itl_s(r) == pytest.approx([0.003] * 36)


@pytest.mark.parametrize(("per_flush", "observable"), [(1, True), (2, False), (4, False)])
def test_chunks_flushed_k_at_a_time(per_flush, observable):
    gaps = [0.0 if j % per_flush else 3.0 * per_flush for j in range(1, 40)]  # 40 chunks made 3 ms apart
    assert observability.timing_observable(req(gaps)) is observable


def test_the_gap_floor_is_the_boundary():
    floor_ms = observability.BURST_GAP_S * 1e3
    assert observability.burst_tokens(req([floor_ms * 0.99] * 9)) == 9
    assert observability.burst_tokens(req([floor_ms * 1.01] * 9)) == 0


def test_nothing_to_observe_is_none_not_false():
    assert observability.timing_observable(req([], tokens=(1,))) is None
    assert observability.timing_observable(req([5.0] * 5, ok=False)) is None
    assert observability.annotated(req([5.0] * 5)).timing_observable is True
    assert observability.annotated(req([0.0] * 5)).burst_tokens == 5


def _point(results):
    return metrics.summarize_point(results, None, run_id="r", point_id="p", backend="b", method="ar", model="m",
                                   draft=None, workload="w", concurrency=4, num_gpus=0)  # fmt: skip


def test_a_point_keeps_its_observed_requests_above_the_threshold():
    timed = [req([5.0 + i] * 19, i=i) for i in range(9)]
    p = _point([*timed, req([0.0] * 19, i=9)])  # 9 of 10 observed: measured, from those 9
    assert p.latency_not_measured_reason is None and p.timing_observed_share == pytest.approx(0.9)
    assert p.tpot_s_p50 == pytest.approx(metrics.percentile([metrics.tpot_s(r) for r in timed], 50))
    assert p.tpot_s_p50 > 0.004  # the burst's zero is not in it
    assert p.timing_observed_tokens_share == pytest.approx(1 - 19 / 190)


def test_below_the_threshold_the_point_says_not_measured():
    p = _point([*(req([5.0] * 19, i=i) for i in range(8)), req([0.0] * 19, i=8), req([0.0] * 19, i=9)])
    assert p.timing_observed_share == pytest.approx(0.8)
    assert p.tpot_s_p50 is None and p.itl_s_p50 is None and p.per_user_tok_per_s_pooled is None
    assert "2 of 10 requests" in p.latency_not_measured_reason and "90%" in p.latency_not_measured_reason


def test_the_pooled_rate_is_not_dominated_by_one_tiny_tpot():
    steady = [req([10.0] * 99, i=i) for i in range(9)]  # 100 tok/s each
    quick = req([0.3] * 99, i=9)  # observable (0.3 ms > the floor), but 3,333 tok/s
    mean = metrics.mean([metrics.per_user_tok_per_s(r) for r in [*steady, quick]])
    pooled = metrics.per_user_tok_per_s_pooled([*steady, quick])
    assert mean == pytest.approx((9 * 100 + 1 / 0.0003) / 10)  # 423: four times what nine users in ten see
    assert pooled == pytest.approx(990 / (9 * 0.99 + 0.0297))  # tokens / decode time: 110.7, a tenth of users faster
    assert mean > 3.8 * pooled


def test_server_histograms_read_as_deltas_over_a_window():
    m = ServerMetrics()
    m.observe_request(0.0, [(0.05, 1), *((0.05 + 0.003 * k, 1) for k in range(1, 20))])
    before = parse_latency_histograms(render_metrics("m", m, None))
    for _ in range(4):
        m.observe_request(0.0, [(0.1, 1), *((0.1 + 0.004 * k, 1) for k in range(1, 11))])
    after = parse_latency_histograms(render_metrics("m", m, None))
    assert set(after) == {"ttft_s", "tpot_s", "itl_s", "e2e_s"}
    timing = server_timing(before, after)
    assert timing["tpot_s"]["count"] == 4 and timing["tpot_s"]["mean_s"] == pytest.approx(0.004)
    assert timing["tpot_s"]["p50_le_s"] == 0.005  # the bucket bound holding the median: all a histogram gives
    assert timing["ttft_s"]["mean_s"] == pytest.approx(0.1) and timing["itl_s"]["count"] == 40
    assert server_timing(None, after)["tpot_s"]["count"] == 5  # no earlier read: since the server started
    assert sum_histograms([after, after])["tpot_s"].count == 10 and sum_histograms([None]) is None


def test_a_histogram_that_went_backwards_is_not_a_delta():
    h = Histogram((0.01, float("inf")), (3.0, 5.0), 5.0, 0.1)
    assert h.minus(Histogram((0.01, float("inf")), (4.0, 6.0), 6.0, 0.2)) is None  # another server
    assert h.quantile_le(0.5) == 0.01 and h.quantile_le(0.99) is None  # beyond the last finite bound


def test_sglang_names_are_read_under_their_prefix():
    text = "\n".join([
        "# TYPE sglang:request_time_per_output_token_seconds histogram",
        'sglang:request_time_per_output_token_seconds_bucket{is_streaming="true",le="0.01"} 2.0',
        'sglang:request_time_per_output_token_seconds_bucket{is_streaming="true",le="+Inf"} 3.0',
        'sglang:request_time_per_output_token_seconds_count{is_streaming="true"} 3.0',
        'sglang:request_time_per_output_token_seconds_sum{is_streaming="true"} 0.06',
    ])  # fmt: skip
    assert parse_latency_histograms(text, "vllm:") == {}
    assert parse_latency_histograms(text, "sglang:")["tpot_s"].summary()["mean_s"] == pytest.approx(0.02)


def test_a_real_vllm_run_raises_no_false_flag():
    """Requests of a vLLM CPU run with the engine and the client on cores of their own (see the fixture's README):
    every request's timing observable, as their spread-out arrivals say."""
    rows = [RequestResult.from_dict(json.loads(line)) for line in FIXTURE.read_text().splitlines()]
    by_point: dict[str, list[RequestResult]] = {}
    for r in rows:
        by_point.setdefault(r.point_id, []).append(r)
    assert len(by_point) >= 3
    for point_id, rs in by_point.items():
        obs = observability.point_observability(rs)
        assert obs.requests == len(rs) and obs.observed == obs.requests, point_id
        assert max(observability.burst_share(r) for r in rs) < observability.MAX_BURST_SHARE


def test_a_real_vllm_run_made_bursty_is_flagged():
    """The same requests, each delivered as the starved first run delivered its (every chunk at the last one's
    stamp): flagged, and the point reports no TPOT."""
    rows = [RequestResult.from_dict(json.loads(line)) for line in FIXTURE.read_text().splitlines()]
    starved = [RequestResult.from_dict({**r.to_dict(), "chunk_ns": [r.chunk_ns[-1]] * len(r.chunk_ns),
                                        "first_token_ns": r.chunk_ns[-1]}) for r in rows]  # fmt: skip
    assert not any(observability.timing_observable(r) for r in starved)
    assert _point(starved).tpot_s_p50 is None


def test_a_burst_does_not_meet_a_tpot_target():
    from dflashbench.measure.goodput import meets_slo

    burst, paced = req([0.0] * 19), req([5.0] * 19)
    assert metrics.tpot_s(burst) == 0.0  # would meet any TPOT bound on its face
    assert not meets_slo(burst, {"tpot_s": 0.05}) and meets_slo(paced, {"tpot_s": 0.05})
    assert meets_slo(burst, {"ttft_s": 1.0})  # its TTFT was measured
