"""What a sweep prints (issue #27): a point's line with the answer first and findings as tags, `sweep --help`
readable at 80 columns, and a dry run one can take in (a compact grid, the run's size, a duration estimate with
where its rate came from)."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.plan.plan_size import (
    RunSize,
    WorkloadSize,
    duration_s,
    human_duration_range,
    parse_rate,
    run_size,
)
from dflashbench.run.sweep_console import NOT_MEASURED, TAG_CLIENT, TAG_NOISE, TAG_RAMP, point_line
from dflashbench.types import PointSummary

# A client that lagged 7.3 ms against a 3.4 ms ITL while 5% busy: a shared CPU (the embedded default's case).
SHARED_CPU = {"processes": 1, "busy_share_max": 0.05, "loop_lag_ms_p99": 7.3, "cpu_s": [0.1], "busy_share": [0.05]}


def summary(**fields) -> PointSummary:
    values = dict(run_id="r", backend="reference", method="dflash", model="m", draft="d", workload="synthetic",
                  category="all", concurrency=4, num_gpus=0, num_requests=32, num_errors=1, duration_s=1.0,
                  output_tokens=3000, throughput_tok_per_s=1165.1, throughput_tok_per_s_per_gpu=1165.1,
                  per_user_tok_per_s_mean=360.0, per_user_tok_per_s_p50=355.0, per_user_tok_per_s_p10=300.0,
                  ttft_s_p50=0.0333, ttft_s_p99=0.05, tpot_s_p50=0.00282, tpot_s_p99=0.004, itl_s_p50=0.0034,
                  itl_s_p99=0.005, e2e_s_p50=0.3, e2e_s_p99=0.4, tau=7.72, acceptance_rate=0.9,
                  energy_j_per_tok=None, steady_share=0.8)  # fmt: skip
    values.update(fields)
    return PointSummary(**values)


# --- a point's line ------------------------------------------------------------------------------------------


def test_point_line_shows_the_answer_first_and_a_tag_not_a_sentence():
    line = point_line(summary(extra={"client": SHARED_CPU}))
    assert line == ("1165.1 tok/s · 355.0 tok/s/user · TTFT 33.3 ms · TPOT 2.82 ms · tau 7.72 · errors 1/32  "
                    f"[{TAG_NOISE}]")  # fmt: skip
    assert "lagged" not in line and "proc" not in line and "CPU" not in line  # the explanation is the end's


def test_point_line_tags_client_overhead_and_a_short_steady_window():
    busy = {**SHARED_CPU, "busy_share_max": 0.95}
    assert point_line(summary(extra={"client": busy})).endswith(f"[{TAG_CLIENT}]")
    assert point_line(summary(steady_share=0.2)).endswith(f"[{TAG_RAMP}]")
    assert "[" not in point_line(summary(extra={"client": {**SHARED_CPU, "loop_lag_ms_p99": 0.5}}))


def test_point_line_shows_a_figure_not_measured_as_nm_never_zero():
    line = point_line(summary(ttft_s_p50=None, tpot_s_p50=float("nan"), per_user_tok_per_s_p50=None, tau=None))
    assert f"TTFT {NOT_MEASURED} · TPOT {NOT_MEASURED}" in line and f"{NOT_MEASURED} tok/s/user" in line
    assert f"tau {NOT_MEASURED}" in line and "0.00" not in line


def test_failed_and_degraded_points_say_so_first():
    assert point_line(summary(status="failed", failure_reason="server did not start")) == \
        "FAILED: server did not start"  # fmt: skip
    assert point_line(summary(status="degraded", failure_reason="5 of 32 failed")).startswith(
        "DEGRADED (5 of 32 failed): 1165.1 tok/s")


# --- sweep --help at 80 columns ------------------------------------------------------------------------------


def test_sweep_help_reads_at_80_columns():
    """Every option name appears whole (rich cuts a squeezed name with "…"), options sit in the five panels,
    and the page stays under 120 lines."""
    result = CliRunner().invoke(app, ["sweep", "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert result.exit_code == 0, result.output
    text = result.output
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80 and len(lines) < 120, len(lines)
    command = typer.main.get_command(app).commands["sweep"]  # type: ignore[attr-defined]
    names = [o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")]
    assert len(names) > 30
    for name in names:
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), f"{name} is not shown whole"
    assert "…" not in text
    for panel in ("What to run", "Load shape", "Engine and parallelism", "Output", "Limits and reliability"):
        assert f"─ {panel} ─" in text


# --- the dry run -------------------------------------------------------------------------------------------------


def dry(*args: str):
    return CliRunner().invoke(app, ["sweep", "--dry-run", *args], env={"COLUMNS": "80"})


def test_dry_run_shows_a_compact_grid_size_and_names_the_rate_it_lacks():
    result = dry("--num-prompts", "8", "--concurrency", "1,2,4")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "grid: 3 methods × 1 workload × 3 concurrencies = 9 points" in out
    # the demo suite sizes its points by precision: at least 8 rounds of the streams (its floor), 8 prompts reused
    assert re.search(r"  synthetic +8 +96  8; 16 at c=2; 32 at c=4\n", out), out
    assert "precision: ±20.0%: a point stops once its intervals are within it" in out
    assert re.search(r"  synthetic +ar +8 +16 +32\n", out), out  # the planned requests, per method and load
    assert "point(s) run out of prompts first and reach less than ±20%" in out
    assert "against every prompt: 168 requests instead of 96" in out
    assert "size: 168 requests (+9 warm-up), 16,128 output tokens at most" in out  # every request to its max_tokens
    assert "duration: one method at a time" in out  # the embedded pair: the rates a committed run measured
    assert "rates (tok/s/user, measured, the embedded pair on reference, demo-" in out
    assert "point ids: reference:ar:synthetic:c1 … (--verbose: all 9, requests, budgets, flag sources)" in out
    assert "reference:dflash:synthetic:c2" not in out and "max_tokens=96:" not in out  # ids and prompts: -v
    full = dry("--num-prompts", "8", "--concurrency", "1,2,4", "--verbose").output
    assert "reference:dflash:synthetic:c2" in full and full.count("max_tokens=96:") == 8
    assert "request_spread.toml" in full  # where the planned requests come from


def test_dry_run_estimates_at_a_given_rate():
    out = dry("--num-prompts", "8", "--concurrency", "1,2,4", "--assume-user-tok-per-s", "48-96").output
    # a stream decodes ceil(R/c) x 96 tokens per point: (8 + 8 + 8) x 96 per method (8 rounds each: the precision
    # rule's floor), 3 methods: 72 s at 96 tok/s, 144 s at 48; one method at a time adds a 10 s server start per
    # method (1.7-2.9 min), in turn one for all (1.4-2.6 min)
    assert "duration: one method at a time 1.7–2.9 min; in turn 1.4–2.6 min (0.89x)" in out, out
    assert "rates (tok/s/user, given by --assume-user-tok-per-s): c=1: ar 48–96, dflash 48–96, eagle3 48–96" in out
    bad = dry("--assume-user-tok-per-s", "fast")
    assert bad.exit_code == 2 and "--assume-user-tok-per-s 'fast': expected tokens/s per user" in bad.output


def test_the_embedded_pair_is_named_in_messages_not_given_as_this_machines_path():
    """Issue #52: the dry run's duration line and the --budget error said "no published per-user rate for
    /home/…/dflashbench/embedded/target": a path of this machine where a name does. A server's argv keeps its paths
    (it is the exact command that runs). Issue #63: the embedded pair is planned at a committed run's rates, named
    by its run, and --budget plans it."""
    from dflashbench.embedded import default_paths

    out = dry("--num-prompts", "8", "--concurrency", "1").output
    assert "rates (tok/s/user, measured, the embedded pair on reference" in out, out
    budgeted = dry("--num-prompts", "8", "--concurrency", "1", "--budget", "1h")
    assert budgeted.exit_code == 0, budgeted.output
    assert "budget 1.0 h: " in budgeted.output and "at the slow end of the measured rates" in budgeted.output
    folder = str(default_paths().target)
    said = [ln for ln in (out + budgeted.output).splitlines()
            if not ln.startswith(("server for ", "    --"))]  # a server's argv (wrapped under it) keeps its paths
    assert said and not [ln for ln in said if folder in ln or "embedded/target" in ln], said


# --- the arithmetic -----------------------------------------------------------------------------------------------


class _P:  # the fields of a GridPoint run_size reads
    def __init__(self, label, concurrency, rate=None):
        self.workload = type("W", (), {"label": label})()
        self.concurrency, self.request_rate = concurrency, rate


def test_run_size_by_hand():
    sizes = {"a": WorkloadSize("a", 10, True, 100, turns=2.0), "b": WorkloadSize("b", 300, False, 50)}
    points = [_P("a", 1), _P("a", 4), _P("b", 64), _P("a", 0, rate=2.0)]
    size = run_size(points, sizes, per_stream=4, warmup=1)
    # a c=1: 10 requests; a c=4: 16 (4 streams x 4); b c=64: 300 (>= 256); a at 2/s: 10 (one stream's worth, 4)
    assert size.requests == 10 + 16 + 300 + 10 and size.warmup_requests == 4
    assert size.output_tokens_max == (10 + 16 + 10) * 200 + 300 * 50
    assert size.decode_tokens_per_stream == 10 * 200 + 4 * 200 + 5 * 50 + 200 and size.open_loop_s == 5.0
    assert not size.exact and size.from_cards  # "b" is a bound, counted from a card (turns not read)
    assert duration_s(size, 100.0) == pytest.approx((2000 + 800 + 250 + 200) / 100 + 5)
    unknown = run_size([_P("c", 1)], {"c": WorkloadSize("c", None, False, 10)}, 4, 1)
    assert unknown.unknown == ("c",) and unknown.requests == 0


def test_rate_and_duration_words():
    assert parse_rate("100") == (100.0, 100.0) and parse_rate(" 50 - 200 ") == (50.0, 200.0)
    for bad in ("0", "200-50", "x"):
        with pytest.raises(Exception, match="--assume-user-tok-per-s"):
            parse_rate(bad)
    assert human_duration_range(3600, 5400) == "1.0–1.5 h" and human_duration_range(45, 90) == "0.8–1.5 min"
    assert human_duration_range(100, 100.2) == "1.7 min"
    assert RunSize(1, 1, 0, 1, 1.0, 0.0, True).unknown == ()
