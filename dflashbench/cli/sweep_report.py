"""After a sweep: its report written and its verdict said (the command's work, not the sweep's: ``run/`` writes
the run's records and imports nothing of ``report/``, the layer order of ``tests/test_imports.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dflashbench.errors import UserError

Echo = Callable[[str], None]


def report_path(run_dir: Path) -> Path:
    """Where a sweep writes its report: the run's own ``-o`` folder decides. The repository's layout puts
    ``reports/`` beside ``results/`` (``results/<run-id>`` -> ``reports/<run-id>.html``); any other ``-o`` keeps
    its report inside (``-o out/base`` -> ``out/base/reports/<run-id>.html``), so a sweep writes nothing outside
    the folder it was given (``-o .`` or ``-o /data`` would otherwise reach ``../reports`` or ``/reports``)."""
    out = run_dir.parent
    if out.resolve().name == "results" and out.resolve() != Path.cwd().resolve():
        return out.parent / "reports" / f"{run_dir.name}.html"
    return out / "reports" / f"{run_dir.name}.html"


def report_and_verdict(run_dir: Path, write: bool, echo: Echo) -> Path | None:
    """The run's report model, built once: the HTML report at :func:`report_path` (unless ``--no-report``),
    then the report's verdict as the sweep's last lines (:mod:`dflashbench.report.console`)."""
    try:
        from dflashbench.report import load_model, write_report
        from dflashbench.report.console import print_closing
    except ImportError:
        echo("report: dflashbench.report is not available in this installation; skipped")
        return None
    path = None
    try:
        model = load_model([run_dir], with_figures=write)
        if write:
            path = write_report([run_dir], out=report_path(run_dir), report=model)
    except (UserError, OSError) as exc:
        echo(f"report not written: {exc}")
        return None
    if path is not None:
        echo(f"report written to {path}")
    print_closing(model, echo)
    return path
