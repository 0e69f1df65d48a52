"""The steady window on hand-made closed-loop timelines (times in seconds, one token per chunk)."""

from __future__ import annotations

import pytest

from dflashbench.measure.steady import MIN_SHARE, steady_figures, steady_window, tokens_between
from dflashbench.types import RequestResult

S = 1_000_000_000


def req(i: int, sent: float, end: float, tokens: int = 10, warmup: bool = False) -> RequestResult:
    """A request sent at ``sent`` whose ``tokens`` chunks (one token each) arrive evenly up to ``end``."""
    step = (end - sent) / tokens
    chunks = tuple(int((sent + step * (k + 1)) * S) for k in range(tokens))
    return RequestResult(run_id="r", point_id="p", request_id=str(i), category="c", concurrency=2, ok=True,
                         error=None, queued_ns=int(sent * S), sent_ns=int(sent * S), first_token_ns=chunks[0],
                         last_token_ns=chunks[-1], output_tokens=tokens, output_tokens_source="server",
                         chunk_ns=chunks, chunk_tokens=(1,) * tokens, warmup=warmup)  # fmt: skip


def closed_loop(streams: list[list[tuple[float, float]]]) -> list[RequestResult]:
    return [req(10 * s + k, sent, end) for s, stream in enumerate(streams) for k, (sent, end) in enumerate(stream)]


def test_window_from_all_busy_to_first_stream_dry():
    # stream A: 0-2, 2-4, 4-6 ; stream B starts late at 1: 1-3.5, 3.5-5, then dry at 5 while A runs to 6
    rows = closed_loop([[(0, 2), (2, 4), (4, 6)], [(1, 3.5), (3.5, 5)]])
    w = steady_window(rows, concurrency=2)
    assert (w.start_ns, w.end_ns) == (1 * S, 5 * S)  # last stream's first send .. first response after the last send
    assert w.duration_s == pytest.approx(4.0)
    assert w.share == pytest.approx(4 / 6)
    assert not w.ramp_dominated


def test_figures_count_only_tokens_inside_the_window():
    rows = closed_loop([[(0, 2), (2, 4), (4, 6)], [(1, 3.5), (3.5, 5)]])
    f = steady_figures(rows, 2)
    # chunk arrivals in [1, 5]: A's 0-2 at 1.0..2.0 (6 of its 0.2 s steps), all of 2-4 (10), 4-6 at 4.2..5.0
    # (5), B's 1-3.5 (10) and 3.5-5 (10)
    expected = 6 + 10 + 5 + 10 + 10
    assert sum(tokens_between(r, 1 * S, 5 * S) for r in rows) == expected
    assert f.throughput_tok_per_s == pytest.approx(expected / 4.0)
    assert f.requests == 3  # 2-4, 1-3.5 and 3.5-5 ran entirely inside
    assert f.ttft_s_p50 is not None and f.share == pytest.approx(4 / 6)


def test_one_wave_is_ramp_dominated_and_warmups_are_ignored():
    # four streams, one request each, staggered starts and ends: all four busy only from 0.6 to 1.0 of 0..2
    rows = [req(i, 0.2 * i, 1.0 + 0.33 * i) for i in range(4)] + [req(9, -5, -4, warmup=True)]
    w = steady_window(rows, concurrency=4)
    assert (w.start_ns, w.end_ns) == (int(0.6 * S), int(1.0 * S))
    assert w.share < MIN_SHARE and w.ramp_dominated
    assert steady_figures(rows, 4).ramp_dominated


def test_fewer_requests_than_streams_has_no_window():
    rows = closed_loop([[(0, 2)], [(0.5, 3)]])
    assert steady_window(rows, concurrency=3) is None and steady_figures(rows, 3) is None


def test_fill_streams_reuses_prompts_in_order_with_new_ids():
    from dflashbench.plan.grid import fill_streams
    from dflashbench.types import Request

    prompts = [Request(id=f"q{i}", workload="w", category="c", messages=({"role": "user", "content": str(i)},),
                       max_tokens=8) for i in range(3)]  # fmt: skip
    filled = fill_streams(prompts, concurrency=2, per_stream=4)
    assert [r.id for r in filled] == ["q0", "q1", "q2", "q0~1", "q1~1", "q2~1", "q0~2", "q1~2"]
    assert [r.metadata.get("reuse") for r in filled] == [None, None, None, 1, 1, 1, 2, 2]
    assert filled[3].messages == prompts[0].messages
    assert fill_streams(prompts, concurrency=1, per_stream=2) == prompts  # enough already: unchanged


def test_report_warns_of_ramp_dominated_points_and_notes_reuse():
    import pandas as pd

    from dflashbench.measure.steady import ramp_warnings, reuse_note

    points = pd.DataFrame([
        {"method": "dflash", "workload": "gsm8k", "concurrency": 64, "category": "all", "status": "ok", "steady_share": 0.3},
        {"method": "ar", "workload": "gsm8k", "concurrency": 64, "category": "all", "status": "ok", "steady_share": 0.8},
        {"method": "ar", "workload": "gsm8k", "concurrency": 128, "category": "all", "status": "ok", "steady_share": None,
         "extra": {"steady": None}},
        {"method": "ar", "workload": "gsm8k", "concurrency": 256, "category": "all", "status": "ok", "steady_share": None,
         "extra": {}},  # a run from before steady windows: nothing to say
        {"method": "ar", "workload": "gsm8k", "concurrency": 4, "category": "math", "status": "ok", "steady_share": 0.1},
    ])  # fmt: skip
    warnings = ramp_warnings(points)
    assert len(warnings) == 2
    assert warnings[0].startswith("dflash gsm8k c=64: ramp-dominated, steady window 30% of the run")
    assert warnings[1].startswith("ar gsm8k c=128: never had all 128 streams busy")
    requests = pd.DataFrame({"request_id": ["q0", "q1", "q0~1"]})
    assert reuse_note(requests).startswith("1 requests reuse a prompt")
    assert reuse_note(pd.DataFrame({"request_id": ["q0", "q1"]})) is None
