"""Issue #63, item 1: a duration for every plan. Each method's per-user rate estimated for any model, GPU, engine
and tp (dflashbench.plan.decode_rate, dflashbench.plan.pace), its error stated on published rates it was not fitted
to, the embedded demo at a committed run's rates, --budget for every registry model, the ETA re-planned per method.
Pure: dry runs in-process (no GPU, no network)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.plan import decode_rate as dr
from dflashbench.plan.gpus import GPU_SPEEDS
from dflashbench.plan.models import lookup, registry


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def dry(*args: str):
    return CliRunner().invoke(app, ["sweep", "--dry-run", *args])


def test_the_fit_uses_only_its_rows_and_the_band_covers_every_held_out_row():
    fit = {f.id for f in dr.figures() if f.role == "fit"}
    held = dr.checks("held-out")
    assert len(held) >= 5 and not fit & {h.figure.id for h in held}
    band = dr.held_out_band()
    assert all(band.low <= h.ratio <= band.high for h in held)
    # the fitted constants are physical: bandwidth efficiency at most 1, costs non-negative
    c = dr.constants()
    assert c.k_bw >= 1.0 and min(c.o_layer_s, c.o_moe_s, c.o_tp_s, c.o_verify_s) >= 0.0


def test_a_held_out_row_moves_the_band_and_not_the_fit(monkeypatch):
    """The band is read from the held-out rows only: a row made 3x faster there widens it; the constants stay."""
    before = dr.constants()
    rows = dr.figures()
    slow = next(f for f in rows if f.role == "held-out" and not f.is_speedup)
    import dataclasses

    changed = tuple(dataclasses.replace(f, measured=f.measured * 3) if f is slow else f for f in rows)
    monkeypatch.setattr(dr, "figures", lambda: changed)
    dr.constants.cache_clear()
    dr.held_out_band.cache_clear()
    try:
        assert dr.constants() == before
        assert dr.held_out_band().high >= 3 * dr.Check(slow, slow.estimate(before)).ratio * 0.999
    finally:
        dr.constants.cache_clear()
        dr.held_out_band.cache_clear()


def test_a_step_is_bandwidth_bound_faster_on_faster_memory_and_slower_under_load():
    shape = dr.shape_of(lookup("qwen3-8b"))
    c = dr.constants()
    h100, b200 = GPU_SPEEDS["h100"], GPU_SPEEDS["b200"]
    one = dr.per_user_tok_per_s(c, shape, h100, 1, 1, 2048)
    assert dr.per_user_tok_per_s(c, shape, b200, 1, 1, 2048) > one  # 8 TB/s against 3.35
    assert dr.per_user_tok_per_s(c, shape, h100, 1, 64, 2048) < 0.75 * one  # 64 users' KV and compute
    # a verify of 16 tokens under load costs more than AR's step: DFlash's edge shrinks as concurrency grows
    block = dr.Drafter("block", 15, 1.95, 5, 1)
    gain = [dr.per_user_tok_per_s(c, shape, h100, 1, n, 2048, block, 6.5) / dr.per_user_tok_per_s(c, shape, h100, 1, n,
            2048) for n in (1, 128)]  # fmt: skip
    assert gain[1] < gain[0]


def test_the_estimate_follows_the_gpu_and_the_tp():
    """The complaint: 1 x B200 and 8 x H100 printed the same 8.0-9.5 h."""
    lines = {}
    for gpu in ("1xb200", "8xh100", "8xb200"):
        out = dry("--backend", "vllm", "--model", "gpt-oss-120b", "--gpu", gpu).output
        lines[gpu] = next(ln for ln in out.splitlines() if ln.startswith("duration: "))
        assert "rates (tok/s/user, estimated, " in out
    assert len(set(lines.values())) == 3, lines


@pytest.mark.parametrize("name", [e.name for e in registry().models])
def test_every_registry_model_gets_a_duration_or_a_memory_refusal(name):
    result = dry("--backend", "vllm", "--model", name, "--gpu", "8xb200")
    out = result.output
    assert "no per-user rate" not in out, out
    assert any(ln.startswith("duration: one method at a time") for ln in out.splitlines()) or "refused" in out, out


def test_budget_works_for_a_model_with_no_published_rate():
    result = dry("--backend", "vllm", "--model", "qwen3-8b", "--gpu", "1xh100", "--budget", "3h", "--concurrency", "1,8")
    assert result.exit_code == 0, result.output
    assert "budget 3.0 h: " in result.output and "estimated rates" in result.output


def test_a_model_nothing_describes_says_how_to_give_a_rate():
    out = dry("--backend", "vllm", "--model", "someorg/unknown-model", "--method", "ar").output
    assert "duration: no per-user rate for someorg/unknown-model" in out and "--assume-user-tok-per-s N" in out
    given = dry("--backend", "vllm", "--model", "someorg/unknown-model", "--method", "ar", "--assume-user-tok-per-s",
                "100").output  # fmt: skip
    assert "rates (tok/s/user, given by --assume-user-tok-per-s): c=1: ar 100" in given


def test_sizing_md_quotes_what_the_dry_run_prints():
    """docs/sizing.md's headline block and its --budget quote are the dry run's own lines."""
    import re
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "sizing.md").read_text()
    block = re.search(r"<!-- sizing:headline.*?```\n(.*?)```", text, re.S).group(1).splitlines()
    command = shlex.split(block[0].removeprefix("$ HF_HUB_OFFLINE=1 dflashbench "))
    out = CliRunner().invoke(app, command).output.splitlines()
    for line in block[1:]:
        if line != "...":
            assert line in out, (line, out)
    budget = CliRunner().invoke(app, [*command, "--budget", "2h"]).output
    quoted = re.search(r'gpt-oss-120b on 8 x H100: "(budget .*?)"\)', " ".join(text.split())).group(1)
    assert quoted in " ".join(budget.split()), budget
