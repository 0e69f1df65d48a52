import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.cli.common import parse_band
from dflashbench.errors import UserError
from dflashbench.report import default_output, write_report
from dflashbench.report.render import md_escape

from . import mdtables
from .conftest import HOSTILE_CATEGORY, PIPE_MODEL, PROMPT_ERROR, SCRIPT, sample_points, sample_requests
from .factory import write_run


class Elements(HTMLParser):
    """Every start tag with its attributes, as the browser's parser would see them."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def parse(html: str) -> list[tuple[str, dict]]:
    p = Elements()
    p.feed(html)
    return p.tags


def test_html_report_is_self_contained(sample_html):
    html = sample_html
    tags = parse(html)
    names = [t for t, _ in tags]
    assert "script" not in names and "link" not in names and "iframe" not in names and "object" not in names
    for tag, attrs in tags:
        for attr in ("src", "href", "srcset", "poster", "data", "action"):
            value = attrs.get(attr)
            assert value is None or value.startswith(("data:image/png;base64,", "#")), (tag, attr, value)
    assert "url(" not in html and "@import" not in html  # nothing fetched from the stylesheet either
    csp = [a["content"] for t, a in tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0] and "script-src" not in csp[0]


def test_html_report_has_the_figures(sample_run, tmp_path):
    html = write_report([sample_run], tmp_path / "r.html", band=(60, 80)).read_text()
    alts = [a["alt"] for t, a in parse(html) if t == "img"]
    # Pareto, speedup bars, acceptance over step cost, tau, latency distributions, telemetry.
    assert len(alts) == 6
    assert any(a.startswith("Tau and step-cost ratio against concurrency") for a in alts)
    assert any(a.startswith("Pareto plot") for a in alts)
    assert any("tau per category" in a for a in alts)
    assert any("time to first token" in a for a in alts)
    assert any("power and utilisation" in a for a in alts)
    assert "60–80 tok/s/user" in html  # the band is named


def test_dataset_strings_are_escaped_in_html(sample_html):
    html = sample_html
    assert SCRIPT not in html and "<img src=x" not in html
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html  # the error message and the manifest
    assert HOSTILE_CATEGORY not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # the category
    assert PROMPT_ERROR.replace("<", "&lt;").replace(">", "&gt;") in html


def test_report_shows_the_three_labelled_speedups_and_manifest(sample_html):
    html = sample_html
    for title in ("Single-stream speedup", "Speedup at matched concurrency", "Speedup at matched interactivity",
                  "Acceptance length τ per category", "manifest.json"):  # fmt: skip
        assert title in html
    # single stream: TPOT(AR) 25 ms vs DFlash 8.3 ms at c=1 -> 3.00x; the answer first, the setting folded away
    # with its 95% interval from the requests (all alike here: a zero-width interval) widened by another launch's own
    # speed (the reference backend's default run-to-run term, 0.072: x e^(±1.96 x 0.072), issue #62)
    # and what the interval covers (this run has no speed probe: drift not measured)
    assert re.search(r"<td>all</td><td>DFlash</td><td>3\.00×</td><td>\[2\.61×, 3\.45×\]</td><td>clearly faster</td>"
                     r"<td>6 of 6</td><td>requests only: drift not measured</td><td>25\.0</td><td>8\.3</td></tr>",
                     html)  # fmt: skip
    assert "Every row: statistic: mean; backend: reference; model: tiny; workload: synthetic." in html


def test_default_output_path_is_reports_run_id(sample_run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert write_report([sample_run], fmt="md") == Path("reports/run-a.md")
    assert (tmp_path / "reports" / "run-a.md").is_file()
    assert default_output(["run-a"]) == Path("reports/run-a.html")
    assert default_output(["a", "b"], "md") == Path("reports/a-vs-b.md")


def test_two_runs_combined_one_per_engine(tmp_path):
    a = write_run(tmp_path, sample_points("va", backend="vllm"), run_id="va")
    b = write_run(tmp_path, sample_points("sg", backend="sglang", speed=2.0), run_id="sg")
    html = write_report([a, b], tmp_path / "both.html").read_text()
    assert "dflashbench report — va, sg" in html
    assert html.count("<summary>manifest.json</summary>") == 2
    # Speedups stay within one engine: vLLM's DFlash against vLLM's AR (3x), SGLang's against SGLang's (2x).
    # Two backends: the backend column stays (after the answer), the constant model and workload fold away.
    # No requests stored: each speedup says it has no interval, and why, in its own row (the records are missing,
    # not the prompts: issue #65)
    none = r"<td>—</td><td>no interval: requests.jsonl holds none of either point&#39;s requests</td><td>—</td>"
    assert re.search(r"<td>all</td><td>DFlash</td><td>1</td><td>3\.00×</td>" + none + r"<td>40\.0</td><td>120\.0</td>"
                     r"<td>vllm</td>", html)  # fmt: skip
    assert re.search(r"<td>all</td><td>DFlash</td><td>1</td><td>2\.00×</td>" + none + r"<td>40\.0</td><td>80\.0</td>"
                     r"<td>sglang</td>", html)  # fmt: skip


def test_markdown_summary(sample_run, tmp_path):
    text = write_report([sample_run], tmp_path / "r.md", fmt="md").read_text()
    assert text.startswith("## dflashbench report — run-a")
    assert "### Single-stream speedup" in text
    table = [ln for ln in text.splitlines() if ln.startswith("| all | DFlash | 3.00× |")]
    assert table  # the single-stream row, answer in the third column
    assert "<script" not in text and "<img" not in text
    assert "&lt;img src=x onerror=alert(1)&gt; costs \\$x^\\$" in text
    assert "org/model\\|v2" in text and PIPE_MODEL not in text  # a pipe would split the table cell
    assert "data:image" not in text


def test_markdown_table_rows_have_header_width(sample_run, tmp_path):
    text = write_report([sample_run], tmp_path / "r.md", fmt="md").read_text()
    blocks = re.findall(r"((?:^\|.*\n)+)", text, flags=re.M)
    assert len(blocks) >= 5
    for block in blocks:
        widths = {len(re.split(r"(?<!\\)\|", line.strip())) for line in block.splitlines()}
        assert len(widths) == 1, block


def test_md_escape():
    assert md_escape("a|b") == "a\\|b"
    assert md_escape("<script>") == "&lt;script&gt;"
    assert md_escape("x\ny") == "x y"
    assert md_escape("**bold** [l](u)") == "\\*\\*bold\\*\\* \\[l\\](u)"
    assert md_escape("$x^2$") == "\\$x^2\\$"  # GitHub would typeset it as math


def test_failed_requests_and_points_are_listed(tmp_path):
    from .factory import point

    points = [
        *sample_points("f"),
        point("dflash", 16, status="failed", failure_reason="server died", run_id="f"),
    ]
    run = write_run(tmp_path, points, sample_requests("f"), run_id="f")
    html = write_report([run], tmp_path / "f.html").read_text()
    assert "server died" in html
    assert "(1 failed)" in html


@pytest.mark.parametrize(
    ("text", "band"), [("500-600", (500.0, 600.0)), ("1.5:2.5", (1.5, 2.5)), (None, None)]
)
def test_parse_band(text, band):
    assert parse_band(text) == band


@pytest.mark.parametrize("text", ["600-500", "500", "a-b", "0-5"])
def test_parse_band_rejects(text):
    with pytest.raises(UserError):
        parse_band(text)


def test_report_command(sample_run, tmp_path):
    runner = CliRunner()
    out = tmp_path / "cli.md"
    result = runner.invoke(
        app, ["report", str(sample_run), "-o", str(out), "--format", "md", "--band", "60-80"]
    )
    assert result.exit_code == 0, result.output
    assert f"report written to {out}" in result.output
    assert "### Speedup at matched interactivity" in out.read_text()
    bad = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert bad.exit_code == 2 and "error:" in bad.output
    assert runner.invoke(app, ["report", str(sample_run), "--band", "9-1"]).exit_code == 2
    assert runner.invoke(app, ["report", str(sample_run), "--format", "pdf"]).exit_code == 2


def test_report_output_suffix_picks_or_refuses_the_format(sample_run, tmp_path):
    runner = CliRunner()
    pdf = runner.invoke(app, ["report", str(sample_run), "-o", str(tmp_path / "x.pdf")])
    assert pdf.exit_code == 2 and "reports are HTML (.html) or Markdown (.md)" in pdf.output
    assert not (tmp_path / "x.pdf").exists()  # nothing written into a file of another type
    clash = runner.invoke(app, ["report", str(sample_run), "-o", str(tmp_path / "x.md"), "--format", "html"])
    assert clash.exit_code == 2 and "make them agree" in clash.output
    md = runner.invoke(app, ["report", str(sample_run), "-o", str(tmp_path / "x.md")])
    assert md.exit_code == 0, md.output
    assert (tmp_path / "x.md").read_text().startswith("## dflashbench report — run-a")


def test_band_reads_matched_interactivity_at_band(sample_run, tmp_path):
    text = write_report([sample_run], tmp_path / "r.md", fmt="md", band=(60, 80)).read_text()
    rows = [ln for ln in text.splitlines() if "| all | DFlash |" in ln and ("| 60.0 |" in ln or "| 70.0 |" in ln
            or "| 80.0 |" in ln)]  # fmt: skip
    assert len(rows) == 3


def test_measured_beside_published_from_the_suites_figures(tmp_path):
    from .factory import point

    pts = [point("ar", 1, 40, 40, workload="gsm8k", tpot_s_mean=0.025, run_id="p"),
           point("dflash", 1, 160, 160, workload="gsm8k", tpot_s_mean=0.00625, tau=6.0, run_id="p")]  # fmt: skip
    run = write_run(tmp_path, pts, run_id="p", manifest={"suite_config": {"published": ["dflash-paper"]}})
    text = write_report([run], tmp_path / "p.md", fmt="md").read_text()
    paper = [r for r in mdtables.tables(text)["Measured beside published"] if r["source"].startswith("DFlash paper")]
    gsm8k = [r for r in paper if (r["task"], r["method"], r["metric"]) == ("GSM8K", "DFlash", "speedup\\_single\\_stream")]
    assert len(gsm8k) == 1, paper
    assert (gsm8k[0]["published"], gsm8k[0]["measured"], gsm8k[0]["measured / published"]) == ("5.15", "4.00", "0.78")
    # measured on a tiny model on a CPU beside Qwen3-8B on a GPU: the note says so
    assert "different model: measured tiny, published Qwen/Qwen3-8B" in gsm8k[0]["note"], gsm8k[0]
    assert "different engine: measured reference, published transformers" in gsm8k[0]["note"]
    assert "hardware" not in gsm8k[0]["note"]  # the paper does not state its hardware: nothing to contradict
    tau = [r for r in paper if (r["task"], r["metric"]) == ("GSM8K", "tau")]
    assert len(tau) == 1 and (tau[0]["published"], tau[0]["measured"], tau[0]["measured / published"]) == ("6.54", "6.00", "0.92")
    assert not any(r["task"] == "MATH-500" for r in paper)  # the summary keeps to what was measured
    # The full report lists the rest apart, shorter.
    from dflashbench.report.model import build
    from dflashbench.run.store import load_run

    section = next(s for s in build([load_run(run)], with_figures=False).sections if s.id == "published")
    assert [t.title for t in section.tables] == [
        "Measured beside published",
        "Published figures not measured here",
    ]
    rest = section.tables[1]
    assert rest.columns == ["source", "task", "method", "metric", "published", "note"]  # baseline AR: in the caption
    assert "Every row: baseline: AR." in rest.caption
    assert ["DFlash paper (arXiv 2602.06036), single-stream table", "MATH-500", "DFlash",
            "speedup_single_stream", "6.08", "not measured in these runs"] in rest.rows  # fmt: skip


def test_unknown_published_figures_do_not_stop_the_report(tmp_path):
    from .factory import point

    run = write_run(tmp_path, [point("ar", 1, 40, 40, run_id="q")], run_id="q",
                    manifest={"suite_config": {"published": ["no-such-figures"]}})  # fmt: skip
    text = write_report([run], tmp_path / "q.md", fmt="md").read_text()
    assert "The published figures no-such-figures could not be read" in text


def test_slo_reading_names_the_percentile_and_the_ratio_to_ar(tmp_path):
    """40 requests a point: p75 is the highest percentile they support (10 beyond it, compare's rule), so an SLO on
    p75 is read as asked; one on p90 is read as asked or not at all (issue #53: it was read at p75 under its p90
    name, and passed points the asked percentile had not been shown to meet)."""
    from .factory import point, request

    tpot = {"ar": 0.010, "dflash": 0.010 / 3}
    points = [point(m, c, 1 / (tpot[m] * c), c / tpot[m], run_id="s") for m in tpot for c in (1, 2, 4)]
    requests = [request(m, c, i, tpot_s=tpot[m] * c, run_id="s") for m in tpot for c in (1, 2, 4) for i in range(40)]
    run = write_run(tmp_path, points, requests, run_id="s")
    runner = CliRunner()
    out = tmp_path / "slo.md"
    result = runner.invoke(app, ["report", str(run), "-o", str(out), "--slo", "tpot_p75=25ms"])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    rows = {r["method"]: r for r in mdtables.tables(text)["Best throughput within the SLO: TPOT p75 ≤ 25 ms"]}
    # per-request TPOT: AR 10 ms x c, DFlash 10/3 ms x c -> AR meets it up to c=2, DFlash up to c=4
    assert (rows["AR"]["at conc."], rows["DFlash"]["at conc."]) == ("2", "4")
    assert rows["DFlash"]["vs AR"] == f"{(4 / tpot['dflash']) / (2 / tpot['ar']):.2f}×"
    assert rows["DFlash"]["measured there"] == "TPOT p75 13.3 ms"
    out90 = tmp_path / "slo90.md"
    assert runner.invoke(app, ["report", str(run), "-o", str(out90), "--slo", "tpot_p90=25ms"]).exit_code == 0
    text = out90.read_text()
    table = text.split("### Best throughput within the SLO: TPOT p90 ≤ 25 ms")[1].split("\n### ")[0]
    assert "No point was read at the percentiles asked: TPOT p90 needs at least 100 requests; this point has 40" in table
    assert "p75" not in text and "AR's best throughput" not in text
    bad = runner.invoke(app, ["report", str(run), "-o", str(tmp_path / "b.md"), "--slo", "tpot=25"])
    assert bad.exit_code == 2 and "bad --slo term 'tpot=25'" in bad.output
