"""Counter parsers on the engines' real exposition shapes (fixtures in tests/fixtures/exposition)."""

import json
from pathlib import Path

import pytest

from dflashbench.backends.counters import (
    iter_prometheus_samples,
    parse_latency_histograms,
    parse_sglang_prometheus,
    parse_sglang_server_info,
    parse_vllm_prometheus,
    trtllm_counters_from_iteration_stats,
)
from dflashbench.types import AcceptCounters, CounterResetError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "exposition"


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def load(name: str):
    return json.loads(text(name))


def tau(c: AcceptCounters) -> float:
    return 1 + c.accepted_tokens / c.drafts


# --- vLLM -----------------------------------------------------------------------------------------


def test_vllm_latency_histograms_are_read_beside_the_counters():
    hists = parse_latency_histograms(text("vllm_eagle3_dp2.prom"))
    assert set(hists) == {"ttft_s"}  # what this page exposes of the four
    ttft = hists["ttft_s"].summary()
    assert ttft["count"] == 320 and ttft["mean_s"] == pytest.approx(41.27 / 320)
    assert ttft["p50_le_s"] is None  # every observation above the one finite bucket: no bound to give


def test_vllm_sums_data_parallel_engines_and_ignores_created_gauges():
    c = parse_vllm_prometheus(text("vllm_eagle3_dp2.prom"))
    # engine 0 + engine 1; the *_created gauges (1.78e9) must not be added in
    assert c == AcceptCounters(
        drafts=7460 + 6940,
        draft_tokens=22380 + 20820,
        accepted_tokens=18300 + 17000,
        accepted_per_pos=(6900 + 6400, 6100 + 5700, 5300 + 4900),
    )
    assert tau(c) == pytest.approx(1 + 35300 / 14400)


def test_vllm_dflash_window_delta_gives_tau_of_the_window_only():
    before = parse_vllm_prometheus(text("vllm_dflash_before.prom"))
    after = parse_vllm_prometheus(text("vllm_dflash_after.prom"))
    assert len(after.accepted_per_pos) == 15  # b16 drafter: 15 draft positions
    window = after.minus(before)
    assert window.drafts == 250
    assert window.draft_tokens == 250 * 15
    assert window.accepted_tokens == 11016 - 8813
    assert sum(window.accepted_per_pos) == window.accepted_tokens
    assert tau(window) == pytest.approx(1 + 2203 / 250)
    assert tau(window) != pytest.approx(tau(after))  # lifetime tau differs from the window's


def test_vllm_counter_reset_mid_window_is_detected():
    before = parse_vllm_prometheus(text("vllm_dflash_before.prom"))
    restarted = parse_vllm_prometheus(text("vllm_dflash_restarted.prom"))
    with pytest.raises(CounterResetError, match="restarted"):
        restarted.minus(before)
    # the same counts without identities: still caught, because they went backwards
    with pytest.raises(CounterResetError, match="went backwards"):
        AcceptCounters(restarted.drafts, restarted.draft_tokens, restarted.accepted_tokens).minus(
            AcceptCounters(before.drafts, before.draft_tokens, before.accepted_tokens))


def test_a_restart_whose_counters_already_exceed_the_earlier_read_is_caught_by_the_created_samples():
    before_text = text("vllm_dflash_before.prom")
    after_text = text("vllm_dflash_after.prom")
    before, after = parse_vllm_prometheus(before_text), parse_vllm_prometheus(after_text)
    assert before.server_id and before.server_id == after.server_id  # one server: the window's delta is fine
    assert "vllm:spec_decode_num_drafts_created" in before.server_id
    after.minus(before)
    # the same growing counts, but the counters were created anew (a restarted vLLM): not a window
    restarted = parse_vllm_prometheus(after_text.replace("1776900000.0", "1776903600.0"))
    assert restarted == after  # counts alone cannot tell
    with pytest.raises(CounterResetError, match="the server restarted during the window"):
        restarted.minus(before)


def test_process_start_time_identifies_the_server():
    page = 'process_start_time_seconds 1.7769e+09\nvllm:spec_decode_num_drafts_total{{engine="0"}} {n}\n'
    one = parse_vllm_prometheus(page.format(n=10))
    later = parse_vllm_prometheus(page.format(n=20))
    assert later.minus(one).drafts == 10
    other = parse_vllm_prometheus(page.format(n=20).replace("1.7769e+09", "1.7770e+09"))
    with pytest.raises(CounterResetError, match="identity changed"):
        other.minus(one)
    assert parse_vllm_prometheus("vllm:spec_decode_num_drafts_total 3\n").server_id is None


def test_a_per_position_counter_that_falls_while_totals_rise_is_a_reset():
    before = AcceptCounters(drafts=10, draft_tokens=30, accepted_tokens=20, accepted_per_pos=(9, 7, 4))
    after = AcceptCounters(drafts=20, draft_tokens=60, accepted_tokens=25, accepted_per_pos=(5, 3, 17))
    with pytest.raises(CounterResetError, match="went backwards"):
        after.minus(before)


def test_vllm_ar_server_has_no_counters():
    assert parse_vllm_prometheus(text("vllm_ar.prom")) is None
    assert parse_vllm_prometheus("") is None


def test_vllm_model_name_filter_and_names_without_total_suffix():
    page = (
        'vllm:spec_decode_num_drafts{model_name="a"} 10\n'
        'vllm:spec_decode_num_accepted_tokens{model_name="a"} 25\n'
        'vllm:spec_decode_num_drafts_total{model_name="b"} 100\n'
        'vllm:spec_decode_num_accepted_tokens_total{model_name="b"} 50\n'
    )
    assert parse_vllm_prometheus(page, model_name="a") == AcceptCounters(drafts=10, accepted_tokens=25)
    assert parse_vllm_prometheus(page, model_name="b") == AcceptCounters(drafts=100, accepted_tokens=50)
    assert parse_vllm_prometheus(page).drafts == 110


def test_vllm_schema_under_another_prefix():
    page = "llamacpp:spec_decode_num_drafts 4\nllamacpp:spec_decode_num_accepted_tokens 6\n"
    assert parse_vllm_prometheus(page) is None
    assert parse_vllm_prometheus(page, prefix="llamacpp:spec_decode_") == AcceptCounters(
        drafts=4, accepted_tokens=6
    )


def test_prometheus_samples_handle_quoted_label_values_timestamps_and_junk():
    page = (
        "# HELP x A help line with { braces }\n"
        'x{a="1,2",b="say \\"hi\\"",c="}"} 3.5 1700000000000\n'
        "y 1e+03\n"
        "z NaN\n"
        "not a sample line\n"
    )
    samples = list(iter_prometheus_samples(page))
    assert samples == [("x", {"a": "1,2", "b": 'say "hi"', "c": "}"}, 3.5), ("y", {}, 1000.0)]


# --- SGLang ---------------------------------------------------------------------------------------


def test_sglang_server_info_averages_data_parallel_ranks():
    assert parse_sglang_server_info(load("sglang_server_info_dp2.json")) == pytest.approx(6.0)
    assert parse_sglang_server_info(load("sglang_server_info_ar.json")) is None
    assert parse_sglang_server_info({"avg_spec_accept_length": 3.5}) == pytest.approx(3.5)  # older shape


# --- TensorRT-LLM ---------------------------------------------------------------------------------


def test_trtllm_iteration_stats_tau():
    c = trtllm_counters_from_iteration_stats(load("trtllm_metrics_dflash.json"))
    assert c == AcceptCounters(drafts=2 + 2 + 1, draft_tokens=30 + 30 + 15, accepted_tokens=13 + 6 + 10)
    assert tau(c) == pytest.approx(1 + 29 / 5)


def test_trtllm_ar_iteration_stats_have_no_counters():
    assert trtllm_counters_from_iteration_stats(load("trtllm_metrics_ar.json")) is None
    assert trtllm_counters_from_iteration_stats([]) is None


def test_sglang_prometheus_window_tau_is_completion_over_verify():
    # written by prometheus_client (as SGLang 0.5.23 serves it), SGLang's own metric names and labels
    before = parse_sglang_prometheus(text("sglang_dflash_before.prom"))
    after = parse_sglang_prometheus(text("sglang_dflash_after.prom"))
    assert before == AcceptCounters(drafts=1500, accepted_tokens=9600 - 1500)  # streaming + non-streaming
    window = after.minus(before)
    assert window.drafts == 1000
    assert tau(window) == pytest.approx(6400 / 1000)  # delta completion tokens / delta verify calls
    assert window.draft_tokens == 0  # not reported by SGLang


def test_sglang_prometheus_ar_and_reset():
    assert parse_sglang_prometheus(text("sglang_ar.prom")) is None
    after = parse_sglang_prometheus(text("sglang_dflash_after.prom"))
    with pytest.raises(CounterResetError):
        parse_sglang_prometheus(text("sglang_dflash_before.prom")).minus(after)
