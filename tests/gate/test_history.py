"""``dflashbench history`` (gate/history.py, gate/history_read.py, gate/history_output.py) on hand-made runs
written through the real RunStore: its series, a slowdown found at its run, one noisy night not a change, the
exit codes, the settings kept apart, the marks, the index, the order by commit, the Markdown and the page."""

from __future__ import annotations

import json
import subprocess

import pytest
from gate.history_factory import write_run
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.gate import history as hist
from dflashbench.gate.history_read import INDEX_NAME, read_runs

N_SIMS = 2000


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _build(paths, **kw):
    return hist.build(read_runs(paths), n_perms=N_SIMS, **kw)


def test_every_gated_figure_has_a_series(tmp_path):
    for night in range(1, 6):
        write_run(tmp_path, night)
    h = _build([tmp_path])
    # per method and load: per-user rate, throughput, tau, TTFT p99 (3 x 2 x 4); per pair and load: a speedup (3 x 2)
    assert len(h.series) == 30
    assert {s.figure for s in h.series} == {"speedup", "per_user_tok_per_s_pooled", "throughput_tok_per_s", "tau",
                                            "ttft_s_p99"}  # fmt: skip
    assert all(len(s.values) == 5 for s in h.series)


def test_a_dflash_slowdown_is_found_at_its_run(tmp_path):
    for night in range(1, 15):
        write_run(tmp_path, night, factor={"dflash": 0.8 if night >= 8 else 1.0})
    h = _build([tmp_path])
    found = {(s.figure, s.subject, s.load): f for s, f in h.findings}
    level = {(s.figure, s.subject, s.load): s.fit.level for s in h.series}
    for load in ("1", "2"):
        for key in (("speedup", "dflash/ar", load), ("speedup", "dflash/eagle3", load),
                    ("per_user_tok_per_s_pooled", "dflash", load)):  # fmt: skip
            f = found[key]
            assert f.kind == hist.REGRESSION and f.change.lo <= 7 <= f.change.hi and f.change.hi - f.change.lo <= 2
            assert f.change.p <= level[key] < 0.05  # within the level its series passed the family's rule at
    assert not any(s.subject in ("ar", "eagle3", "eagle3/ar") for s, _ in h.findings)
    assert h.exit_code == hist.EXIT_OK  # run 8 is not among the newest 3 of 14
    assert hist.build(read_runs([tmp_path]), recent=8, n_perms=N_SIMS).exit_code == hist.EXIT_REGRESSION


def test_single_runs_without_their_requests_are_weighed_by_the_series_alone(tmp_path):
    """Runs of one round whose requests are not stored: no own interval, so every run weighs the same and the
    run-to-run noise is read from the series; the step is still found."""
    for night in range(1, 15):
        write_run(tmp_path, night, rounds=1, noise=0.02, loads=(1,), factor={"dflash": 0.8 if night >= 8 else 1.0})
    h = _build([tmp_path])
    sp = next(s for s in h.series if s.subject == "dflash/ar")
    assert sp.own_sd == [None] * 14 and sp.fit.tau > 0
    assert [f.change.index for f in sp.findings] == [7]


def test_one_noisy_night_is_not_a_change(tmp_path):
    for night in range(1, 15):
        write_run(tmp_path, night, factor={"dflash": 0.6} if night == 6 else None)
    h = _build([tmp_path])
    assert h.findings == [] and h.trends == []
    assert any(5 in s.fit.wild for s in h.series if s.subject == "dflash/ar")


def test_a_regression_in_the_newest_runs_exits_1_and_leads_the_summary(tmp_path):
    """A step in the newest 3 of 18 runs: in random orders of 18 runs the same 3 land at an end in 2 / C(18, 3) =
    0.25 % of them, within the family's level (10 runs: 1.7 %, never within it; see the next test)."""
    for night in range(1, 19):
        write_run(tmp_path, night, factor={"dflash": 0.75 if night >= 16 else 1.0})
    result = invoke("history", tmp_path, "--format", "md", "--summary", tmp_path / "summary.md")
    assert result.exit_code == 1, result.output
    first = result.output.split("**Regressions**", 1)
    assert first[0].count("\n") <= 3 and "DFlash vs AR speedup at c=1 fell" in first[1]
    assert "from run 16" in first[1] and "(recent)" in first[1]
    assert (tmp_path / "summary.md").read_text().startswith("### dflashbench history: REGRESSION")


def test_a_step_in_the_newest_runs_of_a_short_history_is_found_by_the_t_test(tmp_path):
    """10 runs, DFlash 25 % slower in the newest 3: in random orders of 10 runs those 3 land at an end in 1.7 % of
    them, above the level a change must reach in this family, so the orders alone cannot judge it (the first
    method of #57); the runs sit at that floor, three a side, and the t-test finds it (#64): exit 1, from run 8."""
    for night in range(1, 11):
        write_run(tmp_path, night, factor={"dflash": 0.75 if night >= 8 else 1.0}, loads=(1,))
    result = invoke("history", tmp_path)
    assert result.exit_code == 1, result.output
    assert "speedup at c=1 fell 25%" in result.output and "from run 8" in result.output


def test_a_step_in_the_newest_two_runs_of_a_short_history_cannot_be_judged(tmp_path):
    """The newest 2 of 10 runs: too few for random orders (2/45 at best) and for the t-test (three a side):
    exit 3, saying to keep more runs."""
    for night in range(1, 11):
        write_run(tmp_path, night, factor={"dflash": 0.75 if night >= 9 else 1.0}, loads=(1,))
    result = invoke("history", tmp_path, "--recent", "2")
    assert result.exit_code == 3, result.output
    assert "reaches p = 0.044 at best" in result.output and "keep more runs" in result.output


def test_the_machine_explains_a_slower_machine(tmp_path):
    """Every method 25 % slower from night 8 and the probe 25 % slower too: the absolute figures' changes are the
    machine's (exit 3 where recent), the speedups do not move."""
    for night in range(1, 19):
        slow = night >= 16
        write_run(tmp_path, night, factor=dict.fromkeys(("ar", "dflash", "eagle3"), 0.75 if slow else 1.0),
                  probe_s=0.04 / (0.75 if slow else 1.0))  # fmt: skip
    h = _build([tmp_path])
    kinds = {f.kind for _, f in h.findings}
    assert kinds == {hist.MACHINE} and not any(s.figure == "speedup" for s, _ in h.findings)
    assert h.exit_code == hist.EXIT_CANNOT_JUDGE


def test_a_faster_machine_explains_a_rise_too(tmp_path):
    for night in range(1, 13):
        fast = night >= 7
        write_run(tmp_path, night, factor=dict.fromkeys(("ar", "dflash", "eagle3"), 1.6 if fast else 1.0),
                  probe_s=0.04 / (1.6 if fast else 1.0), loads=(1,))  # fmt: skip
    h = _build([tmp_path])
    assert h.findings and {f.kind for _, f in h.findings} == {hist.MACHINE}
    assert not any(s.figure == "speedup" for s, _ in h.findings)


def test_a_rise_smaller_than_the_probes_is_the_machines(tmp_path):
    """The machine went quiet from night 9 (the probe 2x faster) and every method ran 1.3x faster: a served figure
    moves less than the probe's pure compute, so the rises are the machine's, not improvements (the measured
    unchanged history: AR's throughput rose 39 % while the probe rose 111 %, and was called an improvement)."""
    for night in range(1, 17):
        fast = night >= 9
        write_run(tmp_path, night, factor=dict.fromkeys(("ar", "dflash", "eagle3"), 1.3 if fast else 1.0),
                  probe_s=0.04 / (2.0 if fast else 1.0), loads=(1,))  # fmt: skip
    h = _build([tmp_path])
    assert h.findings and {f.kind for _, f in h.findings} == {hist.MACHINE}


def test_a_machine_slowing_night_after_night_explains_the_absolute_figures_drift(tmp_path):
    """Every method and the probe 4 % slower each night: the rates' trends are the machine's, the speedups flat."""
    for night in range(1, 13):
        f = 0.96 ** night
        write_run(tmp_path, night, factor=dict.fromkeys(("ar", "dflash", "eagle3"), f), probe_s=0.04 / f, loads=(1,))
    h = _build([tmp_path])
    drifting = list(h.trends)
    assert drifting and all(s.trend_machine and s.figure != "speedup" for s in drifting)
    assert not any(s.figure == "speedup" and (s.findings or s.fit.trend) for s in h.series)
    assert "the machine's speed explains it" in invoke("history", tmp_path).output


def test_settings_are_separate_series_and_marks_show_a_new_engine(tmp_path):
    for night in range(1, 7):
        versions = {"torch": "2.13.0" if night < 4 else "2.14.0", "transformers": "5.24"}
        write_run(tmp_path / "cpu", night, versions=versions)
        write_run(tmp_path / "gpu", night, gpu={"gpu": "NVIDIA H100", "gpu_count": 1})
    h = _build([tmp_path / "cpu", tmp_path / "gpu"])
    assert len(h.series) == 60 and len({s.setting for s in h.series}) == 2
    cpu = next(s for s in h.series if "no NVIDIA GPU" in s.setting)
    assert cpu.marks == [(3, "engine torch 2.13.0 transformers 5.24 -> torch 2.14.0 transformers 5.24")]


def test_too_few_runs_cannot_be_judged_and_nothing_is_unusable(tmp_path):
    write_run(tmp_path, 1)
    write_run(tmp_path, 2)
    assert invoke("history", tmp_path).exit_code == 3
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke("history", empty)
    assert result.exit_code == 2 and "no run to read" in result.output


def test_a_profile_history_cannot_write_loses_no_summary(tmp_path):
    """One run holds no run-to-run term: --noise-profile-out is refused (exit 2, named), after the page and the
    summary a CI job reads are written."""
    write_run(tmp_path / "runs", 1)
    summary, page = tmp_path / "history.md", tmp_path / "history.html"
    result = invoke("history", tmp_path / "runs", "-o", page, "--summary", summary, "--noise-profile-out",
                    tmp_path / "noise.json")  # fmt: skip
    assert result.exit_code == 2 and "--noise-profile-out: no series" in result.output
    assert summary.read_text().startswith("### dflashbench history") and page.is_file()
    assert not (tmp_path / "noise.json").exists()


def test_a_run_still_running_is_left_out_and_named(tmp_path):
    for night in range(1, 6):
        write_run(tmp_path, night)
    write_run(tmp_path, 6, status="running", rounds=1)
    reading = read_runs([tmp_path])
    assert len(reading.runs) == 5 and "still running" in reading.skipped[0]
    assert "skipped" in invoke("history", tmp_path).output


def test_the_index_is_a_cache(tmp_path):
    for night in range(1, 6):
        write_run(tmp_path, night)
    first = read_runs([tmp_path])
    assert first.from_index == 0 and (tmp_path / INDEX_NAME).is_file()
    again = read_runs([tmp_path])
    assert again.from_index == 5
    assert [r.figures for r in again.runs] == [r.figures for r in first.runs]
    write_run(tmp_path, 6)  # a run added: read, the rest from the index
    assert read_runs([tmp_path]).from_index == 5
    (tmp_path / INDEX_NAME).unlink()  # deleting it loses nothing
    assert [r.figures for r in read_runs([tmp_path]).runs][:5] == [r.figures for r in first.runs]
    (tmp_path / INDEX_NAME).write_text("{not json")
    assert len(read_runs([tmp_path]).runs) == 6


def test_by_commit_orders_runs_by_the_repository_history(tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    shas = []
    for i in range(5):
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                        "--allow-empty", "-m", f"c{i}"], check=True)  # fmt: skip
        shas.append(subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                                   check=True).stdout.strip())  # fmt: skip
    # started in the reverse order of their commits
    for night, sha in zip(range(5, 0, -1), shas, strict=True):
        write_run(tmp_path / "runs", night, ci={"sha": sha, "ref": "refs/heads/main"})
    h = _build([tmp_path / "runs"], order="commit", repo=repo)
    assert [r.commit for r in h.runs] == shas
    write_run(tmp_path / "runs", 9)  # no commit recorded
    result = invoke("history", tmp_path / "runs", "--by", "commit", "--repo", repo)
    assert result.exit_code == 2 and "record no commit" in result.output
    assert invoke("history", tmp_path / "runs", "--repo", repo).exit_code == 2


def test_html_page_escapes_and_links_every_run(tmp_path):
    for night in range(1, 13):
        write_run(tmp_path / "runs", night, factor={"dflash": 0.8 if night >= 7 else 1.0}, loads=(1,),
                  labels={"note": "<script>alert(1)</script>"})  # fmt: skip
    page = tmp_path / "h.html"
    result = invoke("history", tmp_path / "runs", "-o", page)
    html = page.read_text()
    assert result.exit_code in (0, 1), result.output
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert html.count('<img src="data:image/png;base64,') == 15
    assert 'href="runs/n07/run-07"' in html and 'class="changed"' in html
    # a page kept apart from its runs (a measurement under docs/) links to what is kept beside it instead
    from dflashbench.gate.history_output import write_html

    kept = write_html(_build([tmp_path / "runs"]), tmp_path / "kept.html", link=lambda r: f"runs/{r.run_id}.json")
    assert 'href="runs/run-07.json"' in kept.read_text() and "runs/n07/run-07" not in kept.read_text()


def test_sweep_label_and_ci_variables_reach_the_manifest(tmp_path, monkeypatch):
    from dflashbench.cli.sweep_command import parse_labels
    from dflashbench.errors import UserError
    from dflashbench.run.manifest import ci_info, environment

    assert parse_labels(["commit=abc", "night=3", "commit=def"]) == (("commit", "def"), ("night", "3"))
    with pytest.raises(UserError, match="KEY=VALUE"):
        parse_labels(["nokey"])
    monkeypatch.setenv("GITHUB_SHA", "f" * 40)
    monkeypatch.setenv("GITHUB_REF", "refs/pull/7/merge")
    assert environment()["ci"]["sha"] == "f" * 40 and ci_info({}) is None
    json.dumps(environment())


# -- what a maintainer reads: the summary's trend regressions, the page's axes and its marked run ---------------------
def _drifting(root, nights: int = 10, **manifest_over):
    """DFlash 3 % slower each night (the others steady): its speedups and rates trend past their 5 % gates over
    the newest 5 runs."""
    import math

    for night in range(1, nights + 1):
        write_run(root, night, factor={"dflash": math.exp(-0.03 * (night - 1))}, loads=(1,), **manifest_over)
    return root


def test_a_trend_past_its_gate_is_named_a_regression_in_the_summary(tmp_path):
    from dflashbench.gate.history_output import format_markdown, format_text

    h = _build([_drifting(tmp_path)], recent=5)
    assert h.exit_code == hist.EXIT_REGRESSION and not h.regressions  # no step: the trends are the regressions
    speedup = next(s for s in h.trend_regressions if s.figure == "speedup" and s.subject == "dflash/ar")
    assert speedup.trend_regression.startswith("over its newest 5 runs the trend moves it -")
    text = format_text(h)
    n = len(h.trend_regressions)
    assert f"; {n} regression(s) ({n} of them a trend past its gate), {n} among the newest 5 runs" in text
    head, rest = text.split("\nregressions:\n", 1)
    listed = rest.split("\n\n", 1)[0]
    assert "DFlash vs AR speedup at c=1 drifts -" in listed and ": a regression, over its newest 5 runs" in listed
    assert "\ntrends:\n" not in text  # each trend said once, as the regression it is
    assert "no change point" not in text
    md = format_markdown(h)
    assert "**Regressions**" in md and "a regression, over its newest 5 runs" in md and "**(recent)**" in md
    result = invoke("history", tmp_path, "--recent", 5)
    assert result.exit_code == 1 and "a regression, over its newest 5 runs" in result.output


def test_the_plots_axes_say_when_and_in_what_unit(tmp_path):
    from dflashbench.gate.history_output import AXES, MAX_TICKS, figure_of, run_labels

    h = _build([_drifting(tmp_path)], recent=5)
    for s in h.series:
        ax = figure_of(s, h.order).axes[0]
        assert ax.get_ylabel() == AXES[s.figure][0] and "(" in ax.get_ylabel()  # every axis its unit
        assert ax.get_xlabel() == "run start, UTC (month-day)"
        assert [t.get_text() for t in ax.get_xticklabels()] == [f"11-{n:02d}" for n in range(1, 11)]
        assert list(ax.get_xticks()) == list(range(1, 11))  # one tick a run, never between runs
    ttft = next(s for s in h.series if s.figure == "ttft_s_p99")
    ax = figure_of(ttft, h.order).axes[0]
    assert ax.get_ylabel() == "TTFT p99 (ms)" and ax.lines[0].get_ydata()[0] == ttft.values[0] * 1000
    # two runs on one day: the time too; by commit: the commit; many runs: at most MAX_TICKS labels
    runs = h.series[0].runs
    same_day = [type(r)(**{**r.__dict__, "started_at": f"2026-11-01T0{i}:30:00+00:00"}) for i, r in enumerate(runs[:2])]
    assert run_labels(same_day, "time") == (["11-01 00:30", "11-01 01:30"], "run start, UTC (month-day hour:minute)")
    many = tmp_path / "many"
    for night in range(1, 26):
        write_run(many, night, loads=(1,), labels={"commit": f"{night:07x}" + "0" * 33})
    h = _build([many], recent=5)
    assert run_labels(h.runs[:2], "commit") == (["0000001", "0000002"], "commit (in the repository's order)")
    ax = figure_of(h.series[0], "time").axes[0]
    assert 1 < len(ax.get_xticklabels()) <= MAX_TICKS
    assert sorted({*ax.get_xticks(), *ax.get_xticks(minor=True)}) == list(range(1, 26))  # a tick a run


def test_a_marked_run_is_ringed_on_every_plot_and_named(tmp_path):
    from dflashbench.gate.history_output import figure_of

    _drifting(tmp_path / "runs")
    page = tmp_path / "history.html"
    result = invoke("history", tmp_path / "runs", "--recent", 5, "-o", page, "--mark",
                    tmp_path / "runs" / "n10" / "run-10", "--mark", "run-03", "--mark", tmp_path / "nowhere",
                    "--mark-label", "pull request #7")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert f"--mark {tmp_path / 'nowhere'}: not among the runs read" in result.output  # a note, not an error
    html = page.read_text()
    assert html.count('class="marked"') >= 2 and "the pull request #7 ringed" in html
    assert html.count("; pull request #7: run 10") == 15  # every plot's alt text names it
    h = _build([tmp_path / "runs"], recent=5)
    h.mark(["run-10"])
    ax = figure_of(h.series[0], h.order, h.marked, "pull request #7").axes[0]
    ring = ax.get_legend().get_texts()[0].get_text()
    assert ring == "pull request #7" and list(ax.lines[-1].get_xdata()) == [10]
