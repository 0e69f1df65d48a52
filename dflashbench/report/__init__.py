"""Reports: one self-contained HTML file (or a Markdown summary) from one or more run directories.

``write_report([results/<run-id>], ...)`` loads the runs through :func:`dflashbench.run.store.load_run`, builds
the tables and figures (:mod:`.model`, :mod:`.figures`) and renders them (:mod:`.render`). Matplotlib is
imported only here, never by ``dflashbench --help``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dflashbench.errors import UserError
from dflashbench.redact import redact_text
from dflashbench.run.store import check_output, suffix_format, write_checked  # noqa: F401 - history writes with them

FORMATS = ("html", "md", "json")
REPORT_SUFFIXES = {"html": "html", "htm": "html", "md": "md", "markdown": "md", "json": "json"}
DEFAULT_DIR = Path("reports")
def default_output(run_ids: Sequence[str], fmt: str = "html") -> Path:
    """``reports/<run-id>.<ext>``; several runs: ``reports/<first>-vs-<second>...`` (at most three named)."""
    name = "-vs-".join(run_ids[:3]) + (f"-and-{len(run_ids) - 3}-more" if len(run_ids) > 3 else "")
    return DEFAULT_DIR / f"{name}.{fmt}"


def format_for(out: Path | None, fmt: str | None) -> str:
    """The report format: ``fmt`` when given, else from ``out``'s suffix (.html/.htm, .md), else html. An
    output suffix that contradicts the format, or names a format reports do not have (.pdf), is an error
    rather than HTML written into a file of another type."""
    by_suffix = suffix_format(out, REPORT_SUFFIXES, "reports are HTML (.html) or Markdown (.md), or the readings "
                              "as JSON (.json)") if out else None
    if fmt is not None and fmt not in FORMATS:
        raise UserError(f"unknown report format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    if fmt is not None and by_suffix is not None and fmt != by_suffix:
        raise UserError(f"--format {fmt} but the output {Path(out).name!r} is {Path(out).suffix}: make them agree")
    return fmt or by_suffix or "html"


def load_model(run_dirs: Sequence[Path | str], *, with_figures: bool = True,
               band: tuple[float, float] | None = None, slo: str | None = None,
               gpu_hour_cost: float | None = None, noise_profile: Path | None = None):  # fmt: skip
    """The :class:`~dflashbench.report.model.ReportModel` of ``run_dirs``: what the report says, which the
    terminal's closing lines (:mod:`.console`) read too. ``gpu_hour_cost``: the price of one GPU-hour, for the
    cost per million output tokens where NVML measured."""
    if not run_dirs:
        raise UserError("no run directories given; pass one or more results/<run-id> directories")
    if gpu_hour_cost is not None and not gpu_hour_cost > 0:
        raise UserError(f"bad --gpu-hour-cost {gpu_hour_cost!r}: give the price of one GPU-hour, a number above 0 "
                        "(e.g. --gpu-hour-cost 2.5)")  # fmt: skip
    from dflashbench.measure import noise_model
    from dflashbench.report import model
    from dflashbench.run.store import load_run

    profile = noise_model.read_profile(noise_profile) if noise_profile is not None else None
    runs = [load_run(Path(d)) for d in run_dirs]
    return model.build(runs, band=band, with_figures=with_figures, slo_text=slo, gpu_hour_cost=gpu_hour_cost,
                       noise_profile=profile)  # fmt: skip


def render_model(report, fmt: str = "html") -> str:
    """A built report model as HTML or Markdown text."""
    if fmt not in FORMATS:
        raise UserError(f"unknown report format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    if fmt == "json":  # the readings as data (docs/readings.md): what the tables and the verdict are made of
        return readings_json(report)
    from dflashbench.report import render

    return render.render_html(report) if fmt == "html" else render.render_markdown(report)


def readings_json(report) -> str:
    """A built report's readings as the versioned JSON document (:mod:`dflashbench.measure.readings_doc`)."""
    import json

    from dflashbench.measure import readings_doc

    doc = readings_doc.document(report.readings, [r.run_id for r in report.runs])
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def render_report(
    run_dirs: Sequence[Path | str], fmt: str = "html", band: tuple[float, float] | None = None,
    slo: str | None = None,
) -> tuple[str, list[str]]:
    """The report text and the run ids it covers."""
    if fmt not in FORMATS:
        raise UserError(f"unknown report format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    report = load_model(run_dirs, with_figures=fmt == "html", band=band, slo=slo)
    return render_model(report, fmt), [r.run_id for r in report.runs]


def write_report(
    run_dirs: list[Path], out: Path | None = None, fmt: str | None = None,
    band: tuple[float, float] | None = None, slo: str | None = None, report=None,
) -> Path:
    """Write the report of ``run_dirs`` to ``out`` (default ``reports/<run-id>.html`` or ``.md``) and return
    the path written. The format is ``fmt``, else ``out``'s suffix (:func:`format_for`). ``report``: the runs'
    model, already built (with figures for HTML), so a caller that also prints its verdict builds it once."""
    fmt = format_for(out, fmt)
    if out is not None:
        check_output(Path(out))  # before the report is built: a refused path costs nothing
    if report is None:
        report = load_model(run_dirs, with_figures=fmt == "html", band=band, slo=slo)
    text = render_model(report, fmt)
    run_ids = [r.run_id for r in report.runs]
    # run files are redacted when written; runs written by older versions may not be. A key that is a word (none, auto)
    # is not taken out again: the report's own markup and the run's names say it too (dflashbench.redact)
    text = redact_text(text, words=False)
    path = Path(out) if out is not None else default_output(run_ids, fmt)
    return write_checked(path, text)  # the default path too (reports/<run-id>.html), checked just before the write
