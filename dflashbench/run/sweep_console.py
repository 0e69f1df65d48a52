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
from dflashbench.measure.client_load import client_problem
from dflashbench.measure.observability import FIX
from dflashbench.measure.steady import ramp_problem
from dflashbench.measure.trend import unread_words
from dflashbench.paths import portable
from dflashbench.plan.grid import SweepContext
from dflashbench.plan.pairing import capacity_warnings, draft_warnings
from dflashbench.plan.plan_lines import plan_lines
from dflashbench.plan.plan_size import (
    RunSize,
    WorkloadSize,
    human_count,
    human_duration_range,
    point_requests,
    run_size,
)
from dflashbench.plan.trace_plan import dry_run_lines, trace_sizes
from dflashbench.redact import redact_text
from dflashbench.run.load_summary import console_suffix, plan_line
from dflashbench.types import PointSummary
from dflashbench.workloads import hub_prompts, hub_source

Echo = Callable[[str], None]


def redacting(echo: Echo, words: bool = True) -> Echo:
    """``echo`` with every line passed through the redaction function first (``words``: :func:`redact_text`'s)."""
    return lambda text: echo(redact_text(str(text), words=words))


@contextlib.contextmanager
def point_progress(enabled: bool, label: str, total: int, console=None):
    """A rich progress bar over one point's requests while it runs, where stderr is a terminal (or on ``console``,
    a rich ``Console`` given: the benchmarks draw it as a terminal would show it); yields the function that advances
    it, ``advance(steps=1, note=None)`` (a no-op otherwise: each point ends with one plain line either way). It is advanced from the thread that
    collects the point's results and redrawn by rich's own thread, both in the sweep's process: never in a
    client's event loop (:mod:`dflashbench.load.loadgen_procs`)."""
    if not enabled or (console is None and not sys.stderr.isatty()):
        yield lambda steps=1, note=None: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console or Console(stderr=True), transient=True) as bar:  # fmt: skip
        task = bar.add_task(label, total=total)

        def advance(steps: int = 1, note: str | None = None) -> None:
            """``steps`` more requests done; ``note``: words after the label (a point sized by precision: the
            widest interval so far)."""
            bar.update(task, advance=steps, **({"description": f"{label} {note}"} if note else {}))

        yield advance


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


NOT_MEASURED = "n/m"  # a figure the point could not measure (None), or could not time; never shown as 0.00


def _measured(value: float | None, scale: float = 1.0, digits: int = 1, unit: str = "") -> str:
    if value is None or value != value:  # None, or NaN read back from a file
        return NOT_MEASURED
    return f"{value * scale:.{digits}f}{unit}"


# One word each on a point's line for what the end of the sweep explains once (the report's warnings and notes:
# dflashbench.report.load_shape.client_findings, dflashbench.measure.steady.ramp_warnings; the summary table's footnote).
TAG_CLIENT = "client overhead"  # the client may have set the pace itself
TAG_NOISE = "timing noise"  # the client's loop lagged on a shared CPU: scheduling noise in the timestamps
TAG_RAMP = "short steady window"  # throughput is mostly ramp: send more requests per stream
TAG_UNTIMED = "per-token timing not observable"  # tokens arrived in bursts (dflashbench.measure.observability)
TAG_SLOWING = "server slowed down"  # its last third decoded slower than its first (dflashbench.measure.trend)


def _timed(p: PointSummary) -> str:
    """``"30/32 requests timed"`` where some requests' per-token timing was not observable, else ``""``."""
    if p.timing_requests is None or p.timing_observed_requests == p.timing_requests:
        return ""
    return f"{p.timing_observed_requests}/{p.timing_requests} requests timed"


def point_tags(p: PointSummary) -> list[str]:
    """The short tags that apply to ``p``: :data:`TAG_UNTIMED` (or how many requests were timed),
    :data:`TAG_CLIENT` or :data:`TAG_NOISE`, :data:`TAG_RAMP`, :data:`TAG_SLOWING` (or why the trend was not read)."""
    extra = p.extra or {}
    tags = [TAG_UNTIMED] if p.latency_not_measured_reason else [t for t in (_timed(p),) if t]
    problem = client_problem(extra.get("client"), p.icl_s_p50 or p.itl_s_p50)  # the gap the client times
    if problem:
        tags.append(TAG_CLIENT if problem[0] else TAG_NOISE)
    waves = (extra.get("pairing") or {}).get("mode") == "turns"  # sent in waves: each drains by design
    if not extra.get("load") and not waves and ramp_problem(p.steady_share, p.concurrency):  # nor an open loop
        tags.append(TAG_RAMP)
    if (extra.get("trend") or {}).get("slowed"):
        tags.append(TAG_SLOWING)
    elif (unread := unread_words(extra.get("trend"))) is not None:  # a point too small: said, not read as steady
        tags.append(unread)
    return tags


def point_line(p: PointSummary) -> str:
    """The answer first: throughput, per-user rate, TTFT and TPOT p50, tau, errors; then what the load shape
    adds (arrival rate, goodput) and a tag per finding the end of the sweep explains."""
    if p.status == "failed":
        return f"FAILED: {p.failure_reason}"
    degraded = f"DEGRADED ({p.failure_reason}): " if p.status == "degraded" else ""
    blind = bool(p.latency_not_measured_reason)  # bursts: the per-token figures are not read (the table says why)
    per_user = NOT_MEASURED if blind else _measured(p.per_user_tok_per_s_p50)
    tpot = NOT_MEASURED if blind else _measured(p.tpot_s_p50, 1e3, 2, " ms")
    figures = [f"{_measured(p.throughput_tok_per_s)} tok/s", f"{per_user} tok/s/user",
               f"TTFT {_measured(p.ttft_s_p50, 1e3, 1, ' ms')}", f"TPOT {tpot}",
               f"tau {_measured(p.tau, digits=2)}", f"errors {p.num_errors}/{p.num_requests}",
               *console_suffix(p)]  # fmt: skip
    tags = point_tags(p)
    return degraded + " · ".join(figures) + (f"  [{', '.join(tags)}]" if tags else "")


def summary_table(points: list[PointSummary]):
    """A rich table of the "all" rows, narrow enough for an 80-column terminal: the error column only when
    there were errors, the per-GPU column only when more than one GPU served; below it, where a point's per-token
    latency was not measured ("n/m"), the reason and the fix, once."""
    from rich import box
    from rich.table import Table

    show_err = any(p.num_errors or p.status != "ok" for p in points)
    show_gpu = any(p.num_gpus > 1 for p in points)
    show_repeat = any(p.repeat for p in points)  # sweep --repeats: "1 r2" = concurrency 1, round 2
    backends = ", ".join(sorted({p.backend for p in points}))
    blind = next((p for p in points if p.latency_not_measured_reason and p.status != "failed"), None)
    caption = (f"{NOT_MEASURED} = not measured: {blind.latency_not_measured_reason}. Fix: {FIX}." if blind else None)
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
        if p.latency_not_measured_reason:
            cells.update(dict.fromkeys(("user", "tpot", "itl"), NOT_MEASURED))
        if p.status == "degraded":
            cells["err"] = f"[red]{p.num_errors} degraded[/red]"
        elif p.status != "ok":
            cells = {k: (cells[k] if k in ("method", "workload", "conc", "req", "err") else "") for k in keys}
            cells["tok/s"] = "[red]failed[/red]"
        table.add_row(*(cells[k] for k in keys))
    if caption is None:
        return table
    from rich.console import Group
    from rich.text import Text

    return Group(table, Text(caption))  # the reason once, as wide as the console, not the table


# -- a dry run's plan ---------------------------------------------------------------------------------------------
def print_dry_run(ctx: SweepContext, echo: Echo, *, verbose: bool = False,
                  assume_rate: tuple[float, float] | None = None) -> None:  # fmt: skip
    """Print the exact server command(s), the placement, the grid as a compact table, the size of the run and its
    wall time one method at a time and as placed; launch nothing. One screen by default; ``verbose``: the budget
    terms, flag sources and environments, every point id and every request too."""
    suite = ctx.suite
    echo(f"suite {suite.name} (version {suite.version}, {portable(suite.source_file or 'built in')})")
    for note in suite.notes:
        echo(f"note: {note}")
    for line in plan_lines(ctx, verbose):  # GPUs, tp, memory, block size, access (verbose: flags, sources, env)
        echo(f"plan: {line}")
    if ctx.placement is not None and ctx.placement.servers:
        for line in ctx.placement.table():
            echo(line)
    print_servers(ctx, echo)
    for line in verbose_lines(ctx) if verbose else ():
        echo(line)
    if suite.slo and not verbose:
        echo(f"slo {suite.slo}: at least {suite.slo_requests:,} requests per closed-loop point")
    sizes = workload_sizes(ctx)
    for line in grid_lines(ctx, sizes):
        echo(line)
    for line in dry_run_lines(ctx.traces, suite):  # a trace replay: window, speeds, content, lengths
        echo(line)
    per_stream = suite.requests_per_stream_at if suite.slo else suite.requests_per_stream  # sweep --slo raises it
    size = run_size(ctx.grid, sizes, per_stream, suite.warmup_requests, trace_sizes(ctx.traces),
                    precision=suite.precision)  # fmt: skip
    for line in precision_lines(ctx, size, sizes, verbose):
        echo(line)
    echo(size_line(size))
    for line in duration_lines(ctx, size, sizes, assume_rate, verbose):
        echo(line)
    if verbose:
        echo(f"{len(ctx.grid)} points:")
        for p in ctx.grid:
            echo(f"  {p.point_id}")
    elif ctx.grid:
        echo(f"point ids: {ctx.grid[0].point_id} … (--verbose: all {len(ctx.grid)}, requests, budgets, flag sources)")


def verbose_lines(ctx: SweepContext) -> list[str]:
    """What ``--verbose`` adds before the grid: the request settings, the load shape, where the data comes from,
    every request."""
    suite = ctx.suite
    out = []
    if ctx.pair.extra_body():
        out.append(f"every request also sends {json.dumps(ctx.pair.extra_body())} (the model registry's chat settings)")
    slo = (f"; slo {suite.slo}: at least {suite.slo_requests:,} requests per closed-loop point, what its highest "
           "percentile needs (10 beyond it)" if suite.slo else "")  # fmt: skip
    out.append(f"each point: {suite.warmup_requests} warm-up request(s); at least {suite.requests_per_stream_sent} "
               f"requests per stream (a workload's prompts are reused where it has fewer); temperature "
               f"{suite.temperature}; seed {suite.seed}; timeout {suite.timeout_s:g} s per request, "
               f"{suite.ready_timeout_s:g} s for a launched server to be ready{slo}")  # fmt: skip
    out.append(plan_line(suite))
    hub = [hub_source(spec) for i, spec in enumerate(suite.workloads) if isinstance(ctx.plan[i], str)]
    if hub:  # not on disk: a dry run reads nothing from the network
        out.append(f"data: a real run loads {', '.join(map(str, hub))} from the Hugging Face Hub (or its cache; needs "
                   "the 'datasets' package); give --data PATH to see the requests")  # fmt: skip
    for i, spec in enumerate(suite.workloads):
        reqs = ctx.plan[i]
        if not isinstance(reqs, str):
            cats = Counter(r.category for r in reqs)
            turns = sum(1 + len(r.followup_turns) for r in reqs)
            out.append(f"workload {spec.label}: {len(reqs)} requests ({turns} turns), max_tokens {spec.max_tokens}, "
                       f"categories: {', '.join(f'{c} {n}' for c, n in sorted(cats.items()))}")  # fmt: skip
            out += [f"  {r.id} [{r.category}] max_tokens={r.max_tokens}: {preview(r.prompt_text)}" for r in reqs]
    return out


def print_servers(ctx: SweepContext, echo: Echo) -> None:
    """The exact command of each method's server (and the files it is given), or the running one's URL."""
    suite = ctx.suite
    if ctx.endpoint:
        echo(f"server: the running server at {ctx.endpoint} (nothing is launched; counters read as {ctx.backend_name})")
        return
    backend = get_backend(ctx.backend_name)
    for line in [*draft_warnings(suite), *capacity_warnings(suite, ctx.pair, backend)]:
        echo(line)
    for method in suite.methods:
        plan = ctx.launches[method].plan
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in plan.env.items())
        echo(f"server for {method.value}: {(env + ' ') if env else ''}{shlex.join(plan.argv)}")
        for path, content in plan.files.items():
            echo(f"  writes {path} before launch:")
            echo("\n".join(f"    {line}" for line in content.splitlines()))
    replicas = [name for name in ctx.server_launches if "#" in name]
    if replicas:  # its method's command on its own GPUs (the placement table) and port
        echo(f"servers {', '.join(replicas)}: their method's command, with their own CUDA_VISIBLE_DEVICES and --port")
    if ctx.cpus is not None and (ctx.cpus.split or ctx.cpus.setting != "auto"):  # auto on a GPU engine: nothing to say
        echo(f"cpus: {ctx.cpus.describe()}")


def workload_sizes(ctx: SweepContext) -> dict[str, WorkloadSize]:
    """Each workload's size by label: counted where its requests were read, else from its dataset card."""
    return workload_sizes_of(ctx.suite, ctx.plan)


def workload_sizes_of(suite, plan) -> dict[str, WorkloadSize]:
    """:func:`workload_sizes` of a suite and its requests (``plan``, :func:`dflashbench.plan.grid.load_plan`)."""
    sizes = {}
    for i, spec in enumerate(suite.workloads):
        reqs = plan[i]
        if isinstance(reqs, str):
            sizes[spec.label] = WorkloadSize(spec.label, *hub_prompts(spec), spec.max_tokens)
        else:
            turns = sum(1 + len(r.followup_turns) for r in reqs) / max(len(reqs), 1)
            sizes[spec.label] = WorkloadSize(spec.label, len(reqs), True, spec.max_tokens, turns)
    return sizes


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else words or word + 's'}"


def _requests_per_point(size: WorkloadSize, concurrency: list[int], per_stream) -> str:
    """``"164; 256 at c=64; 512 at c=128"``: a point's requests, and where filling the streams (``per_stream(c)``
    requests each, more where ``sweep --slo`` asks for a high percentile) raises them."""
    if size.prompts is None:
        return "every row (count not known until read)"
    parts, last = [], None
    for c in concurrency:
        n = point_requests(size.prompts, c, per_stream(c))
        if n != last:
            parts.append(f"{n:,}" if last is None else f"{n:,} at c={c}")
            last = n
    return "; ".join(parts)


def grid_lines(ctx: SweepContext, sizes: dict[str, WorkloadSize]) -> list[str]:
    """The grid as a compact table: methods x workloads x concurrencies (and rates, repeats), then per workload
    its prompts, output cap and requests per point."""
    suite = ctx.suite
    loads = _plural(len(suite.concurrency), "concurrency", "concurrencies")
    if suite.request_rate:
        loads = f"({loads} + {_plural(len(suite.request_rate), 'rate')})"
    if suite.trace:  # each speed x content: one trace point per method
        loads = f"({loads} + {_plural(len(suite.trace_speed) * len(suite.trace_content), 'trace point')})"
    repeats = f" × {suite.repeats} repeats" if suite.repeats > 1 else ""
    lines = [f"grid: {_plural(len(suite.methods), 'method')} × {_plural(len(suite.workloads), 'workload')} × {loads}"
             f"{repeats} = {_plural(len(ctx.grid), 'point')}"
             + (f" (every point measured {suite.repeats} times, in rounds across methods; a server launched per "
                "method per round)" if suite.repeats > 1 else ""),
             f"  methods {', '.join(m.value for m in suite.methods)}; concurrency "
             f"{', '.join(str(c) for c in suite.concurrency)}"]  # fmt: skip
    if suite.request_rate:
        lines.append(f"  rates        {', '.join(f'{r:g}' for r in suite.request_rate)} requests/s")
    rows = [("workload", "prompts", "max_tokens", "requests per point")]
    for spec in suite.workloads:
        size = sizes[spec.label]
        prompts = "?" if size.prompts is None else f"{'' if size.exact else '≤'}{size.prompts:,}"
        rows.append((spec.label, prompts, f"{spec.max_tokens:,}",
                     _requests_per_point(size, suite.concurrency, suite.requests_per_stream_at)))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines += [f"  {r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}" for r in rows]
    return lines


def size_line(size: RunSize) -> str:
    """Total requests and the output-token budget (every turn to its cap)."""
    bound = "" if size.exact else "at most "
    words = (f"size: {bound}{size.requests:,} requests (+{size.warmup_requests:,} warm-up), "
             f"{human_count(size.output_tokens_max)} output tokens at most")
    words += " (dataset-card counts)" if size.from_cards else ""
    if size.unknown:
        words += f"; not counted: {', '.join(size.unknown)} (size not known until read)"
    return words


def precision_lines(ctx: SweepContext, size: RunSize, sizes: dict[str, WorkloadSize], verbose: bool = False) -> list[str]:
    """A run sized by precision: what it aims for, each point's planned requests (by method and concurrency, the
    workloads that plan alike on one row), the points whose prompts run out first, and the whole run against every
    prompt's (none for a run that sends every prompt). ``verbose``: where the spreads come from."""
    from dflashbench.plan.precision_plan import request_spread

    suite, spread = ctx.suite, request_spread()
    if suite.precision is None:
        return []
    full = run_size(ctx.grid, sizes, suite.requests_per_stream_at if suite.slo else suite.requests_per_stream,
                    suite.warmup_requests, trace_sizes(ctx.traces))
    planned = dict(size.by_point)
    out = [f"precision: ±{suite.precision:.1%}: a point stops once its intervals are within it (docs/metrics.md)"]
    if verbose:
        out.append("  95% intervals of the per-user rate, throughput, tau and the ratio to AR ('Sizing a point')")
        out.append(f"  planned from each method's per-request spread ({', '.join(f'{m} {k:.2f}' for m, k in spread.kappa.items())}; "
                   f"measured on {len(spread.sources)} committed runs, dflashbench/data/request_spread.toml); each "
                   "point measures its own")  # fmt: skip
    loads = sorted({p.concurrency for p in ctx.grid if p.request_rate is None and p.trace is None})
    out.append("  planned requests " + " ".join(f"{'c=' + str(c):>6}" for c in loads))
    rows: dict[tuple[str, str], dict[int, int]] = {}
    for p in ctx.grid:
        if p.point_id in planned:
            rows.setdefault((p.workload_label, p.method.value), {})[p.concurrency] = planned[p.point_id]
    alike: dict[tuple[str, tuple], list[str]] = {}  # workloads whose plan is the same, per method
    for (workload, method), by_c in rows.items():
        alike.setdefault((method, tuple(by_c.get(c, 0) for c in loads)), []).append(workload)
    for (method, counts), workloads in alike.items():
        name = workloads[0] if len(workloads) == 1 else f"{len(workloads)} workloads"
        out.append(f"  {name[:24]:<24} {method:<7}" + " ".join(f"{n:>6}" for n in counts))
    if size.short:
        by_id = {p.point_id: p for p in ctx.grid}
        names = [f"{by_id[i].workload_label} {by_id[i].method.value} c={by_id[i].concurrency}" for i in size.short]
        out.append(f"  {len(names)} point(s) run out of prompts first and reach less than ±{suite.precision:.0%}: "
                   f"{', '.join(names[:4])}{' …' if len(names) > 4 else ''}")  # fmt: skip
    out.append(f"  against every prompt: {size.requests:,} requests instead of {full.requests:,}")
    return out


def duration_lines(ctx: SweepContext, size: RunSize, sizes: dict[str, WorkloadSize],
                   assume_rate: tuple[float, float] | None, verbose: bool = False) -> list[str]:  # fmt: skip
    """The wall time one method at a time and as placed, from one estimator at each method's own per-user rate and
    load (dflashbench.plan.pace, dflashbench.plan.wall_time); where no rate is known, says so and names the option."""
    from dflashbench.embedded import name_of
    from dflashbench.plan.pace import SERVER_START_WHY, method_rates
    from dflashbench.plan.placement import place_endpoint
    from dflashbench.plan.wall_time import estimate

    rates = method_rates(ctx.pair.target, list(ctx.suite.methods), assume_rate)
    if rates is None:
        return [f"duration: no published per-user rate for {name_of(ctx.pair.target)} in suites/published/; give "
                "--assume-user-tok-per-s N (tok/s per user, or LO-HI) for an estimate"]  # fmt: skip
    placement = ctx.placement or place_endpoint(ctx.suite.methods)
    wall = estimate(ctx.grid, sizes, ctx.suite, trace_sizes(ctx.traces), rates, placement, ctx.backend_name)
    serial, placed = human_duration_range(*wall.serial_s), human_duration_range(*wall.placed_s)
    how = {"side": "side by side", "turns": "in turn", "point": "point by point"}.get(wall.mode)
    out = [f"duration: one method at a time {serial}" + (f"; {how} {placed} ({wall.ratio:.2f}x)" if how else "")
           + f", with {wall.starts}"]  # fmt: skip
    out += [f"  {line}" for line in rates.lines()[:1]]
    if verbose:
        out += [f"  {line}" for line in rates.lines()[1:]]
        out.append(f"  server starts: {SERVER_START_WHY}")
    return out


def preview(text: str, width: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def print_repeats(run_dir: Path, echo: Echo) -> None:
    """Each point's mean and interval over its repeats (earlier sweeps of a resumed run included)."""
    from dflashbench.measure.repeats import summary_lines
    from dflashbench.run.store import load_run

    run = load_run(run_dir)
    for line in summary_lines(run.repeat_points if run.repeat_points is not None else run.points):
        echo(line)
