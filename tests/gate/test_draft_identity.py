"""compare and history key a method's series on its draft length: a tuned run is never gated as the same method as
a fixed-K base."""

from __future__ import annotations

from report.factory import point, write_run
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.gate.draft_identity import draft_identity


def test_a_method_given_its_own_k_or_schedule_is_keyed_by_it():
    assert draft_identity({}, "dflash") == "dflash"  # the drafter's own length
    assert draft_identity({"suite_config": {"num_speculative_tokens": {"dflash": 3}}}, "dflash") == "dflash-k3"
    tuned = draft_identity({"suite_config": {"schedules": {"dflash": [[1, 1, 7], [2, 64, 3]]}}}, "dflash")
    other = draft_identity({"suite_config": {"schedules": {"dflash": [[1, 2, 7], [3, 64, 3]]}}}, "dflash")
    assert tuned.startswith("dflash-schedule-") and tuned != other  # two schedules: two methods
    assert draft_identity({"suite_config": {"num_speculative_tokens": {"dflash": 3}}}, "dflash-k7") == "dflash-k7"


def run(root, name, manifest_suite: dict, throughput: float):
    points = [point("ar", 1, 50, 50, run_id=name), point("dflash", 1, 150, throughput, tau=4.0, run_id=name)]
    return write_run(root, points, run_id=name, manifest={"config": {"backend": "reference"},
                                                          "suite_config": manifest_suite})  # fmt: skip


def test_compare_never_gates_a_schedule_against_a_fixed_k(tmp_path):
    base = run(tmp_path, "base", {}, 100.0)
    same = run(tmp_path, "same", {}, 80.0)
    tuned = run(tmp_path, "tuned", {"schedules": {"dflash": [[1, 1, 7], [2, 64, 3]]}}, 80.0)
    gated = CliRunner().invoke(app, ["compare", str(base), str(same), "--max-drop", "throughput=5%"])
    assert gated.exit_code == 1 and "REGRESSION" in gated.output  # same method, same length: gated
    apart = CliRunner().invoke(app, ["compare", str(base), str(tuned), "--max-drop", "throughput=5%"])
    # dflash and its schedule are two methods: the 20 % is never read as dflash's move; compare says the fixed K is
    # missing from NEW (its rule: a method gone from NEW fails) and the schedule has no counterpart in BASE
    assert "-20.0%" not in apart.output and "method(s) dflash entirely" in apart.output
    assert "1 point(s) of NEW have no counterpart in BASE" in apart.output


def test_history_keeps_a_schedule_out_of_the_fixed_k_series(tmp_path):
    from dflashbench.gate.history_read import summarize

    fixed = summarize(run(tmp_path, "fixed", {}, 100.0))
    tuned = summarize(run(tmp_path, "tuned", {"schedules": {"dflash": [[1, 1, 7], [2, 64, 3]]}}, 80.0))
    assert any("|dflash|" in k for k in fixed.figures) and not any("|dflash|" in k for k in tuned.figures)
    assert any("|dflash-schedule-" in k for k in tuned.figures)
