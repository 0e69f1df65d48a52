"""Metric functions on hand-computed cases (all times below are in ms unless said otherwise)."""

import pytest

from dflashbench.measure import metrics as m
from dflashbench.types import AcceptCounters, RequestResult

MS = 1_000_000  # ns per ms


def req(chunks_ms, tokens, *, sent_ms=0, queued_ms=None, n=None, ok=True, warmup=False, category="math", **kw):
    chunk_ns = tuple(int(c * MS) for c in chunks_ms)
    return RequestResult(
        run_id="r", point_id="p", request_id=kw.pop("rid", "q"), category=category, concurrency=1, ok=ok,
        error=None if ok else "boom", queued_ns=int((sent_ms if queued_ms is None else queued_ms) * MS),
        sent_ns=int(sent_ms * MS), first_token_ns=chunk_ns[0] if chunk_ns else None,
        last_token_ns=chunk_ns[-1] if chunk_ns else None, output_tokens=sum(tokens) if n is None else n,
        output_tokens_source="server", chunk_ns=chunk_ns, chunk_tokens=tuple(tokens), warmup=warmup, **kw,
    )  # fmt: skip


def test_single_token_chunks():
    # sent at 0; chunks at 100, 110, 130, 160 ms, one token each -> n = 4
    r = req([100, 110, 130, 160], [1, 1, 1, 1])
    assert m.ttft_s(r) == pytest.approx(0.100)
    assert m.e2e_s(r) == pytest.approx(0.160)
    assert m.tpot_s(r) == pytest.approx((0.160 - 0.100) / 3)  # 20 ms
    assert m.per_user_tok_per_s(r) == pytest.approx(50.0)
    assert m.itl_s(r) == pytest.approx([0.010, 0.020, 0.030])
    assert m.icl_s(r) == pytest.approx([0.010, 0.020, 0.030])


def test_multi_token_chunks_give_per_token_gaps():
    # speculative decoding: first chunk 1 token at 50 ms, then 4 tokens at 90 ms, 2 tokens at 100 ms -> n = 7
    r = req([50, 90, 100], [1, 4, 2])
    assert m.tpot_s(r) == pytest.approx(0.050 / 6)
    assert m.itl_s(r) == pytest.approx([0.010] * 4 + [0.005] * 2)  # 40 ms / 4 tokens, 10 ms / 2 tokens
    assert m.icl_s(r) == pytest.approx([0.040, 0.010])  # chunk gaps kept separately
    assert sum(m.itl_s(r)) == pytest.approx(m.e2e_s(r) - m.ttft_s(r))


def test_multi_token_first_chunk_and_zero_token_chunk():
    # first chunk carries 3 tokens (no gaps from it); a chunk with 0 tokens carries its time to the next one
    r = req([20, 30, 40, 60], [3, 1, 0, 2])
    assert m.itl_s(r) == pytest.approx([0.010, 0.015, 0.015])  # (60-30)/2 twice
    assert m.tpot_s(r) == pytest.approx(0.040 / 5)


def test_single_token_output_has_no_tpot():
    r = req([80], [1])
    assert m.ttft_s(r) == pytest.approx(0.080) and m.e2e_s(r) == pytest.approx(0.080)
    assert m.tpot_s(r) is None and m.per_user_tok_per_s(r) is None
    assert m.itl_s(r) == [] and m.icl_s(r) == []


def test_everything_in_one_chunk_has_zero_tpot_but_no_interactivity():
    r = req([80], [5])
    assert m.tpot_s(r) == 0.0
    assert m.per_user_tok_per_s(r) is None


def test_no_output_is_undefined_not_zero():
    r = req([], [], ok=False)
    assert m.ttft_s(r) is None and m.e2e_s(r) is None and m.tpot_s(r) is None


def test_queueing_time():
    r = req([100, 110], [1, 1], sent_ms=7, queued_ms=2)
    assert m.queue_s(r) == pytest.approx(0.005)
    assert m.ttft_s(r) == pytest.approx(0.093)  # TTFT starts when the request is sent, not when it was due


def test_throughput_over_measured_window():
    warm = req([0, 5], [1, 1], sent_ms=-100, warmup=True)
    a = req([100, 200], [1, 3], sent_ms=10)  # 4 tokens
    b = req([150, 300], [2, 4], sent_ms=20)  # 6 tokens; last response at 300
    failed = req([50], [1], sent_ms=5, ok=False)  # starts the window, adds no tokens
    rs = [warm, a, b, failed]
    assert m.window_s(rs) == pytest.approx(0.295)  # 300 - 5 ms
    assert m.throughput_tok_per_s(rs) == pytest.approx(10 / 0.295)
    assert m.per_device(20.0, 4) == 5.0 and m.per_device(20.0, 0) == 20.0 and m.per_device(None, 2) is None


def test_tau_and_acceptance_from_counter_deltas():
    before = AcceptCounters(drafts=10, draft_tokens=150, accepted_tokens=30, accepted_per_pos=(8, 6))
    after = AcceptCounters(drafts=30, draft_tokens=450, accepted_tokens=90, accepted_per_pos=(24, 18, 3))
    d = after.minus(before)
    assert m.tau(d, "dflash") == pytest.approx(1 + 60 / 20)  # 4.0
    assert m.acceptance_rate(d) == pytest.approx(60 / 300)
    assert m.accepted_per_pos_rate(d) == pytest.approx((16 / 20, 12 / 20, 3 / 20))


def test_tau_for_ar_and_unknown():
    assert m.tau(None, "ar") == 1.0
    assert m.tau(AcceptCounters(), "ar") == 1.0
    assert m.tau(None, "dflash") is None  # unknown, never silently 1 or 0
    assert m.tau(AcceptCounters(), "eagle3") is None
    assert m.acceptance_rate(None) is None and m.acceptance_rate(AcceptCounters()) is None


def test_percentiles_linear():
    assert m.percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert m.percentile([1, 2, 3, 4, None], 10) == pytest.approx(1.3)
    assert m.percentile([10.0], 99) == 10.0
    assert m.percentile([], 50) is None and m.percentile([None], 50) is None


def test_summarize_point_by_hand():
    rs = [
        req([0, 10], [1, 1], sent_ms=-50, warmup=True, rid="w"),
        req([100, 120, 140], [1, 2, 2], sent_ms=0, rid="a", category="math"),  # n=5, TPOT 10 ms
        req([60, 100], [1, 4], sent_ms=20, rid="b", category="code"),  # n=5, TPOT 10 ms
        req([200, 260], [1, 2], sent_ms=30, rid="c", category="code"),  # n=3, TPOT 30 ms
        req([], [], sent_ms=40, ok=False, rid="d", category="code"),
    ]
    delta = AcceptCounters(drafts=6, draft_tokens=90, accepted_tokens=12)
    p = m.summarize_point(
        rs, delta, run_id="r", point_id="p", backend="reference", method="dflash", model="t", draft="d",
        workload="synthetic", concurrency=2, num_gpus=0, energy_j=2.6,
    )  # fmt: skip
    assert (p.num_requests, p.num_errors, p.output_tokens) == (4, 1, 13)
    assert p.duration_s == pytest.approx(0.260)
    assert p.throughput_tok_per_s == pytest.approx(13 / 0.260)
    assert p.throughput_tok_per_s_per_gpu == pytest.approx(13 / 0.260)
    assert p.tpot_s_p50 == pytest.approx(0.010) and p.tpot_s_p99 == pytest.approx(0.0296)
    assert p.per_user_tok_per_s_mean == pytest.approx((100 + 100 + 100 / 3) / 3)
    assert p.per_user_tok_per_s_p10 == pytest.approx(100 / 3 + 0.2 * (100 - 100 / 3))
    assert p.ttft_s_p50 == pytest.approx(0.100)  # TTFTs 100, 40, 170 ms
    # per-token gaps: a: 10,10,10,10; b: 10 x4; c: 30,30 -> p50 = 10 ms
    assert p.itl_s_p50 == pytest.approx(0.010)
    assert p.icl_s_p50 == pytest.approx(0.030)  # chunk gaps 20, 20, 40, 60
    assert p.tau == pytest.approx(3.0) and p.acceptance_rate == pytest.approx(12 / 90)
    assert p.energy_j_per_tok == pytest.approx(0.2)
    assert p.category == "all" and p.status == "ok"

    code = m.summarize_point(
        rs, delta, run_id="r", point_id="p", backend="reference", method="dflash", model="t", draft="d",
        workload="synthetic", concurrency=2, num_gpus=0, category="code", energy_j=2.6,
    )  # fmt: skip
    assert (code.num_requests, code.num_errors, code.output_tokens) == (3, 1, 8)
    assert code.tau is None and code.energy_j_per_tok is None  # server-wide counters cannot be split


def test_summarize_point_per_category_tau_from_per_request_stats():
    rs = [
        req([10, 20], [1, 6], rid="a", category="math", spec_verify_steps=2, spec_accepted_tokens=5),
        req([10, 20], [1, 1], rid="b", category="writing", spec_verify_steps=2, spec_accepted_tokens=0),
    ]
    kw = dict(run_id="r", point_id="p", backend="x", method="dflash", model="t", draft="d", workload="w",
              concurrency=1, num_gpus=1)  # fmt: skip
    assert m.summarize_point(rs, None, category="math", **kw).tau == pytest.approx(3.5)
    assert m.summarize_point(rs, None, category="writing", **kw).tau == pytest.approx(1.0)
    assert m.summarize_point(rs, None, **kw).tau == pytest.approx(1 + 5 / 4)  # no counters: pooled per request
    ar = dict(kw, method="ar")
    assert m.summarize_point(rs, None, category="math", **ar).tau == 1.0


def test_summarize_point_with_no_successes_is_all_none():
    rs = [req([], [], ok=False)]
    p = m.summarize_point(
        rs, None, run_id="r", point_id="p", backend="x", method="ar", model="t", draft=None,
        workload="w", concurrency=1, num_gpus=1,
    )  # fmt: skip
    assert p.num_errors == 1 and p.output_tokens == 0
    assert p.throughput_tok_per_s is None and p.ttft_s_p50 is None and p.itl_s_p50 is None
    assert p.duration_s is None and p.energy_j_per_tok is None
