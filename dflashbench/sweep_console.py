"""What a sweep prints: a progress bar while a point runs, one line when it ends, the summary table at the end,
the plan of a dry run, and the per-point intervals of a repeated run. Nothing here measures or writes a file."""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from dflashbench.backends import get_backend
from dflashbench.grid import SweepContext
from dflashbench.load_summary import console_suffix, plan_line
from dflashbench.pairing import capacity_warnings
from dflashbench.plan_lines import plan_lines
from dflashbench.redact import redact_text
from dflashbench.steady import ramp_problem
from dflashbench.types import PointSummary

Echo = Callable[[str], None]


def redacting(echo: Echo) -> Echo:
    """``echo`` with every line passed through the redaction function first."""
    return lambda text: echo(redact_text(str(text)))


@contextlib.contextmanager
def point_progress(enabled: bool, label: str, total: int):
    """A rich progress bar over one point's requests while it runs, where stderr is a terminal; yields the
    function that advances it (a no-op otherwise: each point ends with one plain line either way)."""
    if not (enabled and sys.stderr.isatty()):
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:  # fmt: skip
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def point_line(p: PointSummary) -> str:
    if p.status == "failed":
        return f"FAILED: {p.failure_reason}"
    degraded = f"DEGRADED ({p.failure_reason}): " if p.status == "degraded" else ""
    line = (f"{degraded}{p.num_requests} requests, {p.num_errors} errors, {_fmt(p.throughput_tok_per_s)} tok/s, "
            f"{_fmt(p.per_user_tok_per_s_p50)} tok/s/user p50, TPOT p50 {_fmt(p.tpot_s_p50, 1e3)} ms, "
            f"tau {_fmt(p.tau, digits=2)}")  # fmt: skip
    problem = None if (p.extra or {}).get("load") else ramp_problem(p.steady_share, p.concurrency)  # open loop: no ramp
    return line + console_suffix(p) + (f"; {problem}: send more requests per stream" if problem else "")


def summary_table(points: list[PointSummary]):
    """A rich table of the "all" rows, narrow enough for an 80-column terminal: the error column only when
    there were errors, the per-GPU column only when more than one GPU served."""
    from rich import box
    from rich.table import Table

    show_err = any(p.num_errors or p.status != "ok" for p in points)
    show_gpu = any(p.num_gpus > 1 for p in points)
    show_repeat = any(p.repeat for p in points)  # sweep --repeats: "1 r2" = concurrency 1, round 2
    backends = ", ".join(sorted({p.backend for p in points}))
    table = Table(title=f"dflashbench sweep ({backends})", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                  collapse_padding=True)  # fmt: skip
    cols = {"method": "method", "workload": "workload", "conc": "conc", "req": "req", "err": "err",
            "tok/s": "tok/s", "gpu": "tok/s\n/gpu", "user": "user\ntok/s", "ttft": "TTFT\np50 ms",
            "tpot": "TPOT\np50 ms", "itl": "ITL\np50 ms", "tau": "tau"}  # fmt: skip
    keys = [k for k in cols if (k != "err" or show_err) and (k != "gpu" or show_gpu)]
    for k in keys:
        if k in ("method", "workload"):
            table.add_column(cols[k], justify="left", overflow="fold")
        else:
            table.add_column(cols[k], justify="right", no_wrap=True)
    for p in points:
        rate = ((p.extra or {}).get("load") or {}).get("request_rate")
        conc = f"{rate:g}/s" if rate is not None else str(p.concurrency)  # a rate point: its arrival rate
        cells = {"method": p.method, "workload": p.workload, "req": str(p.num_requests),
                 "conc": f"{conc} r{p.repeat}" if show_repeat else conc,
                 "err": str(p.num_errors), "tok/s": _fmt(p.throughput_tok_per_s),
                 "gpu": _fmt(p.throughput_tok_per_s_per_gpu), "user": _fmt(p.per_user_tok_per_s_p50),
                 "ttft": _fmt(p.ttft_s_p50, 1e3), "tpot": _fmt(p.tpot_s_p50, 1e3, 2),
                 "itl": _fmt(p.itl_s_p50, 1e3, 2), "tau": _fmt(p.tau, digits=2)}  # fmt: skip
        if p.status == "degraded":
            cells["err"] = f"[red]{p.num_errors} degraded[/red]"
        elif p.status != "ok":
            cells = {k: (cells[k] if k in ("method", "workload", "conc", "req", "err") else "") for k in keys}
            cells["tok/s"] = "[red]failed[/red]"
        table.add_row(*(cells[k] for k in keys))
    return table


# -- a dry run's plan ---------------------------------------------------------------------------------------------
def print_dry_run(ctx: SweepContext, echo: Echo) -> None:
    """Print the exact server command(s) and the request plan; launch nothing."""
    suite = ctx.suite
    echo(f"suite {suite.name} (version {suite.version}, {suite.source_file or 'built in'})")
    for note in suite.notes:
        echo(f"note: {note}")
    for line in plan_lines(ctx):  # GPUs, architecture- and version-bound flags, environment, block size, access
        echo(f"plan: {line}")
    if ctx.endpoint:
        echo(f"server: the running server at {ctx.endpoint} (nothing is launched; counters read as {ctx.backend_name})")
    else:
        backend = get_backend(ctx.backend_name)
        for line in capacity_warnings(suite, ctx.pair, backend):
            echo(line)
        for method in suite.methods:
            plan = ctx.launches[method].plan
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in plan.env.items())
            echo(f"server for {method.value}: {(env + ' ') if env else ''}{shlex.join(plan.argv)}")
            for path, content in plan.files.items():
                echo(f"  writes {path} before launch:")
                echo("\n".join(f"    {line}" for line in content.splitlines()))
    if ctx.pair.extra_body():
        echo(f"every request also sends {json.dumps(ctx.pair.extra_body())} (the model registry's chat settings)")
    echo(f"methods: {', '.join(m.value for m in suite.methods)}; concurrency: {suite.concurrency}; "
         f"warm-up: {suite.warmup_requests} request(s) per point; temperature {suite.temperature}; "
         f"seed {suite.seed}; timeout {suite.timeout_s:g} s per request, {suite.ready_timeout_s:g} s for a launched server to be ready; at least {suite.requests_per_stream} "
         "requests per stream (a workload's prompts are reused where it has fewer)"
         + (f"; every point measured {suite.repeats} times, in rounds across methods (a server launched per "
            "method per round)" if suite.repeats > 1 else ""))  # fmt: skip
    echo(plan_line(suite))
    for i, spec in enumerate(suite.workloads):
        reqs = ctx.plan[i]
        if isinstance(reqs, str):  # not on disk: a dry run reads nothing from the network
            echo(f"workload {spec.label}: {reqs}")
            continue
        cats = Counter(r.category for r in reqs)
        turns = sum(1 + len(r.followup_turns) for r in reqs)
        echo(f"workload {spec.label}: {len(reqs)} requests ({turns} turns), max_tokens {spec.max_tokens}, "
             f"categories: {', '.join(f'{c} {n}' for c, n in sorted(cats.items()))}")  # fmt: skip
        for r in reqs:
            echo(f"  {r.id} [{r.category}] max_tokens={r.max_tokens}: {preview(r.prompt_text)}")
    echo(f"{len(ctx.grid)} points:")
    for p in ctx.grid:
        echo(f"  {p.point_id}")


def preview(text: str, width: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def print_repeats(run_dir: Path, echo: Echo) -> None:
    """Each point's mean and interval over its repeats (earlier sweeps of a resumed run included)."""
    from dflashbench.repeats import summary_lines
    from dflashbench.store import load_run

    run = load_run(run_dir)
    for line in summary_lines(run.repeat_points if run.repeat_points is not None else run.points):
        echo(line)
