"""After a sweep: its report written and its verdict said (the command's work, not the sweep's: ``run/`` writes
the run's records and imports nothing of ``report/``, the layer order of ``tests/test_imports.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dflashbench.errors import UserError
from dflashbench.paths import report_path  # noqa: F401 - where a sweep writes its report; re-exported

Echo = Callable[[str], None]


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
    _write_readings(run_dir, model, echo)
    print_closing(model, echo)
    return path


READINGS = "readings.json"  # the run's readings as data, in its folder (docs/readings.md)


def _write_readings(run_dir: Path, model, echo: Echo) -> None:
    from dflashbench.report import readings_json
    from dflashbench.run.store import write_text_atomic

    try:
        write_text_atomic(Path(run_dir) / READINGS, readings_json(model))
    except (UserError, OSError) as exc:
        echo(f"{READINGS} not written: {exc}")
