"""The ``dflashbench`` command line. Commands stay thin: build a config, call one function.

Heavy imports (torch, transformers, matplotlib, engines) happen inside the commands so that
``dflashbench --help`` is instant. Errors a user can fix (:class:`UserError`) print one line, no traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from dflashbench import __version__
from dflashbench.errors import UserError

CONTEXT = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(
    name="dflashbench",
    help="Benchmark DFlash speculative decoding against AR and EAGLE-3 on real serving engines.",
    context_settings=CONTEXT,
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)
train_app = typer.Typer(help="Train the embedded target or a drafter for any target.", context_settings=CONTEXT)
suites_app = typer.Typer(help="List, show and validate suite files.", context_settings=CONTEXT)
workloads_app = typer.Typer(help="List workloads and show exactly which requests they send.", context_settings=CONTEXT)
bench_app = typer.Typer(help="Micro-benchmarks of dflashbench's own parts (decoder, load generator).", context_settings=CONTEXT)
app.add_typer(train_app, name="train")
app.add_typer(suites_app, name="suites")
app.add_typer(workloads_app, name="workloads")
app.add_typer(bench_app, name="bench")
models_app = typer.Typer(help="The model registry: targets with published DFlash drafters, their drafts and engine "
                         "recipes.", context_settings=CONTEXT)  # fmt: skip
app.add_typer(models_app, name="models")

F = TypeVar("F", bound=Callable)


def user_errors(fn: F) -> F:
    """Turn a :class:`UserError` into one line on stderr and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            from dflashbench.redact import redact_text

            typer.echo(redact_text(f"error: {exc}"), err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dflashbench {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Benchmark DFlash speculative decoding against AR and EAGLE-3 on real serving engines."""


def run() -> None:  # pragma: no cover - console entry point helper
    sys.exit(app())


# --- commands are added below, one section per area; each body builds a config and calls one function ---


# --- suites and workloads ---


def _validate_suite_file(path: str) -> str:
    """Load one suite file and check what the schema cannot: backend, workloads, published ids."""
    from dflashbench.suites import load_suite

    suite = load_suite(path)
    _check_suite(suite, path)
    return f"{suite.name}: {len(suite.methods)} methods x {len(suite.concurrency)} concurrencies x " \
           f"{len(suite.workloads)} workload(s)"


def _check_suite(suite, path: str, *, overridden: frozenset[str] = frozenset()) -> None:
    """What the schema cannot check, each error naming the file and key: the backend, the workloads, the published
    ids; keys in ``overridden`` (set on the command line, which names them itself) are left to the sweep."""
    from dflashbench.backends import BACKENDS
    from dflashbench.suites import published_ids
    from dflashbench.workloads import check_spec

    if "backend" not in overridden and suite.backend not in BACKENDS:
        raise UserError(f"{path}: key 'backend': unknown backend {suite.backend!r}; known: {', '.join(BACKENDS)}")
    for i, spec in enumerate(suite.workloads):
        try:
            check_spec(spec)
        except UserError as exc:
            raise UserError(f"{path}: key 'workloads[{i}]': {exc}") from None
    unknown = sorted(set(suite.published) - set(published_ids()))
    if unknown:
        raise UserError(f"{path}: key 'published': no suites/published file for {', '.join(unknown)}")


@models_app.command("list")
@user_errors
def models_list() -> None:
    """Every registered target: its HF id, size, DFlash drafter (block size) and EAGLE-3 head."""
    from dflashbench.models import list_text

    typer.echo(list_text())


@models_app.command("show")
@user_errors
def models_show(name: Annotated[str, typer.Argument(help="A registry name, alias or HF id, e.g. gpt-oss-120b.")]) -> None:
    """One entry with the source of every fact: drafts, chat settings, engine recipes, what is unverified."""
    from dflashbench.models import require, show_text

    typer.echo(show_text(require(name)))


@suites_app.command("list")
@user_errors
def suites_list() -> None:
    """Every suite found by name: backend, methods, workloads, what it is for."""
    from dflashbench.suites import load_suite, suite_files

    for name, path in suite_files().items():
        try:
            s = load_suite(str(path))
        except UserError as exc:
            typer.echo(f"{name:<34} (invalid: {exc})")
            continue
        methods = ",".join(m.value for m in s.methods)
        typer.echo(f"{s.name:<34} {s.backend:<9} {methods:<16} {s.description}")


@suites_app.command("show")
@user_errors
def suites_show(
    name: Annotated[str, typer.Argument(help="Suite name (e.g. demo) or path of a .toml file.")] = "demo",
) -> None:
    """The resolved suite (includes merged, defaults filled in)."""
    from dflashbench.suites import describe_suite, load_suite

    typer.echo(describe_suite(load_suite(name)), nl=False)


@suites_app.command("validate")
@user_errors
def suites_validate(
    paths: Annotated[list[str] | None, typer.Argument(help="Suite files or names. Default: every suite.")] = None,
) -> None:
    """Check suite files: schema, includes, backend, workload names/configs/categories, published ids."""
    from dflashbench.suites import suite_files

    targets = paths or [str(p) for p in suite_files().values()]
    failed = 0
    for target in targets:
        try:
            typer.echo(f"ok    {target}: {_validate_suite_file(target)}")
        except UserError as exc:
            failed += 1
            typer.echo(f"FAIL  {exc}", err=True)
    typer.echo(f"{len(targets) - failed} valid, {failed} invalid")
    if failed:
        raise typer.Exit(1)


@workloads_app.command("list")
@user_errors
def workloads_list() -> None:
    """Every workload: dataset id, configs, split, categories."""
    from dflashbench.workloads import WORKLOADS

    for w in WORKLOADS.values():
        configs = f" configs: {', '.join(w.configs)};" if w.configs else ""
        cats = ", ".join(w.categories(w.configs[0] if w.configs else None))
        typer.echo(f"{w.name:<14} {w.hf_id or '(built in)'}\n    {w.description}\n   {configs} split: {w.split};"
                   f" categories: {cats}")  # fmt: skip


@workloads_app.command("show")
@user_errors
def workloads_show(
    name: Annotated[str, typer.Argument(help="Workload name (see `dflashbench workloads list`).")],
    data: Annotated[str | None, typer.Option("--data", help="Local copy of the dataset (file or folder).")] = None,
    num_prompts: Annotated[int | None, typer.Option("--num-prompts", min=1, help="Draw this many (seeded).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed.")] = 0,
    config: Annotated[str | None, typer.Option("--config", help="Dataset config, e.g. throughput_8k.")] = None,
    category: Annotated[
        list[str] | None, typer.Option("--category", help="Keep only this category (repeatable).")
    ] = None,
    split: Annotated[str | None, typer.Option("--split", help="Dataset split.")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", min=1, help="Max output tokens.")] = None,
    thinking: Annotated[bool, typer.Option("--thinking", help="chat_template_kwargs.enable_thinking = true.")] = False,
    skip_placeholders: Annotated[
        bool, typer.Option("--skip-placeholders", help="SPEED-Bench: leave out rows not rebuilt from sources.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per request.")] = False,
) -> None:
    """Exactly the requests a workload would send: id, category, max_tokens, chat messages, later turns."""
    from dflashbench.suites import WorkloadSpec
    from dflashbench.workloads import format_requests, load_requests

    spec = WorkloadSpec(
        name=name, config=config, split=split, categories=category or None, max_tokens=max_tokens,
        thinking=thinking, on_placeholder="skip" if skip_placeholders else "error",
    )  # fmt: skip
    typer.echo(format_requests(load_requests(spec, num_prompts=num_prompts, seed=seed, data=data), as_json=as_json),
               nl=False)  # fmt: skip


# --- report and compare ---


@app.command()
@user_errors
def report(
    runs: Annotated[list[Path], typer.Argument(help="Run directories (results/<run-id>), e.g. one per engine.")],
    out: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Output file, .html or .md (the suffix picks the format). "
                     "Default: reports/<run-id>.html."),
    ] = None,
    fmt: Annotated[
        str | None, typer.Option("--format", help="html: one self-contained file; md: a summary. Default: from -o.")
    ] = None,
    band: Annotated[
        str | None, typer.Option("--band", help="Interactivity band LO-HI in tok/s/user to shade and read at.")
    ] = None,
    slo: Annotated[
        str | None,
        typer.Option("--slo", help="Latency SLO for the best-throughput-within-SLO table, e.g. "
                     "tpot_p90=20ms,ttft_p99=2s (metrics ttft, tpot, e2e). Default: ttft_p99=2s,tpot_p90=50ms."),
    ] = None,
) -> None:
    """Figures, speedup tables and manifests of one or more runs, as one self-contained HTML file."""
    from dflashbench.report import parse_band, write_report

    path = write_report(list(runs), out=out, fmt=fmt, band=parse_band(band), slo=slo)
    typer.echo(f"report written to {path}")


@app.command()
@user_errors
def compare(
    base: Annotated[Path, typer.Argument(help="The baseline run directory.")],
    new: Annotated[Path, typer.Argument(help="The run to judge.")],
    max_drop: Annotated[
        list[str] | None,
        typer.Option("--max-drop", help="METRIC=AMOUNT, e.g. throughput=5% or tau=0.2 (repeatable); replaces "
                     "the default gate of that metric."),
    ] = None,
    max_rise: Annotated[
        list[str] | None, typer.Option("--max-rise", help="METRIC=AMOUNT, e.g. ttft_s_p99=10% (repeatable).")
    ] = None,
    no_default_gates: Annotated[
        bool, typer.Option("--no-default-gates", help="Gate only the metrics named by --max-drop/--max-rise "
                           "(defaults: throughput=5%, tau=0.2 drop; ttft_s_p99=20% rise).")
    ] = False,
    fmt: Annotated[str, typer.Option("--format", help="text or md (Markdown, e.g. for a CI summary).")] = "text",
    summary: Annotated[
        Path | None, typer.Option("--summary", help="Also append the Markdown table to this file.")
    ] = None,
    report_link: Annotated[
        str | None, typer.Option("--report-link", help="Link the Markdown output to this HTML report (path or URL). "
                                 "Default: NEW's report where the sweep wrote one.")
    ] = None,
) -> None:
    """Regression gate: align points, print a table; exit 0 ok, 1 regression (or a missing or failed point), 2
    unusable input."""
    from dflashbench import compare as cmp

    if fmt not in ("text", "md"):
        raise UserError(f"unknown --format {fmt!r}; choose text or md")
    thresholds = [cmp.parse_threshold(t, "drop") for t in max_drop or ()]
    thresholds += [cmp.parse_threshold(t, "rise") for t in max_rise or ()]
    result = cmp.compare_runs(base, new, cmp.effective_thresholds(thresholds, use_defaults=not no_default_gates))
    if report_link is None:
        from dflashbench.sweep import report_path

        found = report_path(Path(new))
        report_link = str(found) if found.is_file() else None
    typer.echo(cmp.format_markdown(result, report_link) if fmt == "md" else cmp.format_text(result))
    if summary is not None:
        try:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(cmp.format_markdown(result, report_link))
        except OSError as exc:
            raise UserError(f"cannot write --summary {summary}: {exc.strerror or exc}") from None
    raise typer.Exit(result.exit_code)


# --- serve ---


def _serve_pair(model: str | None, draft: str | None, method: str) -> tuple[str, str | None]:
    """The model and draft directories ``serve`` uses: given ones, else the embedded pair when installed."""
    from pathlib import Path

    if model is None:
        try:
            from dflashbench.embedded import default_paths
        except ImportError:
            raise UserError("--model DIR is required: the embedded model pair is not installed") from None
        embedded = default_paths()
        model = str(embedded.target)
        if draft is None and method != "ar":
            draft = getattr(embedded, method, None)
            if draft is None:
                raise UserError(f"the embedded pair has no {method} drafter; pass --draft DIR")
            draft = str(draft)
    if method == "ar":
        draft = None
    elif draft is None:
        what = "a DFlash drafter" if method == "dflash" else "an EAGLE-3 head"
        raise UserError(f"--method {method} needs --draft DIR ({what} for this model)")
    from dflashbench.reference.random_pair import is_random, shape_of

    for label, path in (("model", model), ("draft", draft)):
        if is_random(path):
            shape_of(path)  # a bad shape fails here, before the slow imports
        elif path is not None and not Path(path).is_dir():
            raise UserError(f"--{label} {path}: no such directory (or random:SHAPE for random weights)")
    if is_random(draft) != is_random(model) and draft is not None:
        raise UserError("random:SHAPE drafts pair only with a random:SHAPE target of the same shape")
    return model, draft


@app.command()
@user_errors
def serve(
    model: Annotated[
        str | None,
        typer.Option(help="Target model directory (Hugging Face format), or random:SHAPE (random weights in a "
                     "released model's shape, e.g. random:qwen3-8b). Default: the embedded target."),
    ] = None,
    draft: Annotated[
        str | None,
        typer.Option(help="Drafter directory (DFlash drafter or EAGLE-3 head), or random:SHAPE with a random "
                     "target. Default: the embedded one for --method."),
    ] = None,
    method: Annotated[str, typer.Option(help="Decoding method: ar, dflash or eagle3.")] = "dflash",
    host: Annotated[str, typer.Option(help="Address to bind; loopback by default.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:1, ...")] = "cpu",
    dtype: Annotated[str | None, typer.Option(help="float32, bfloat16, float16 (default: as stored).")] = None,
    max_batch_size: Annotated[int, typer.Option(help="Requests decoded together; more wait in a queue.")] = 8,
    max_kv_tokens: Annotated[
        int | None,
        typer.Option(help="KV budget: running requests' prompt + max_tokens + block stay within it; more wait."),
    ] = None,
    served_model_name: Annotated[
        str | None, typer.Option(help="Model name clients send (default: the model directory's name).")
    ] = None,
    threads: Annotated[
        int,
        typer.Option(
            help="torch CPU threads for decoding (default 1: on a CPU shared with the load generator, more "
            "threads make torch's workers spin against it and slow small models down)."
        ),
    ] = 1,
    pin_cpu: Annotated[
        bool,
        typer.Option(
            help="Give the decode thread a CPU core of its own, the HTTP loop the others (CPU, --threads 1, "
            "2+ cores), so a load generator on the same machine cannot preempt it mid-step."
        ),
    ] = True,
    test_fault: Annotated[
        str | None,
        typer.Option(hidden=True, help="Tests only: plant a decoding bug (accept-extra-draft), so the output is "
                     "deliberately not lossless."),
    ] = None,
) -> None:
    """OpenAI-compatible server over the reference decoder (/v1/completions, /v1/chat/completions, /metrics)."""
    method = method.strip().lower()
    if method not in ("ar", "dflash", "eagle3"):
        raise UserError(f"unknown method {method!r} for serve; choose ar, dflash or eagle3")
    if not 0 < port < 65536:
        raise UserError(f"--port must be 1..65535, got {port}")
    if max_batch_size < 1:
        raise UserError(f"--max-batch-size must be >= 1, got {max_batch_size}")
    if max_kv_tokens is not None and max_kv_tokens < 1:
        raise UserError(f"--max-kv-tokens must be >= 1, got {max_kv_tokens}")
    if threads < 1:
        raise UserError(f"--threads must be >= 1, got {threads}")
    if test_fault is not None:
        from dflashbench.reference.decode import FAULTS

        if test_fault not in FAULTS:
            raise UserError(f"unknown --test-fault {test_fault!r}; choose one of: {', '.join(FAULTS)}")
    model, draft = _serve_pair(model, draft, method)
    import torch

    from dflashbench.reference.serving.launch import serve as run_server

    torch.set_num_threads(threads)

    run_server(
        model, draft, method, host=host, port=port, device=device, dtype=dtype,
        max_batch_size=max_batch_size, max_kv_tokens=max_kv_tokens, served_model_name=served_model_name,
        pin_decode_cpu=pin_cpu, fault=test_fault,
    )  # fmt: skip


# --- doctor ---


@app.command()
@user_errors
def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON rows.")] = False,
) -> None:
    """What is installed (engines, torch + CUDA, GPUs and driver) and what each backend still needs."""
    from dflashbench.doctor import doctor_text

    typer.echo(doctor_text(as_json), nl=False)


# --- sweep ---


@app.command()
@user_errors
def sweep(
    suite: Annotated[
        str | None,
        typer.Option(help="Suite name (suites/*.toml) or path. Default: demo on the reference backend, default "
                     "(real workloads, c=1..128) on vllm, sglang and trtllm."),
    ] = None,
    backend: Annotated[
        str | None, typer.Option(help="reference, vllm, sglang, trtllm (with --endpoint: how to read its counters).")
    ] = None,
    method: Annotated[str | None, typer.Option(help="Methods, comma-separated: ar,eagle3,dflash.")] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Target model: a registry name (dflashbench models list, e.g. gpt-oss-120b), an HF id "
                     "or a local directory. Its published drafts come with it from the registry."),
    ] = None,
    draft: Annotated[
        str | None,
        typer.Option(help="Draft model (DFlash drafter / EAGLE-3 head), or dflash=P,eagle3=P. Default: the "
                     "registry's for --model."),
    ] = None,
    concurrency: Annotated[str | None, typer.Option(help="Concurrency levels, comma-separated: 1,2,4.")] = None,
    num_prompts: Annotated[int | None, typer.Option(help="Prompts per workload.")] = None,
    requests_per_stream: Annotated[
        int | None,
        typer.Option(min=1, help="A point sends at least concurrency x this many requests, reusing prompts when "
                     "the workload has fewer (suite default 4)."),
    ] = None,
    repeats: Annotated[
        int | None,
        typer.Option(min=1, max=100, help="Measure every point N times (suite key repeats, default 1), in rounds: "
                     "round r runs every method before round r+1, so drift hits all alike. Launched servers are "
                     "relaunched each round (a server per method per round, which also captures launch-to-launch "
                     "variance); an --endpoint server is not. Each point then carries its mean, sd and 95% t-interval; "
                     "speedups a paired interval over the rounds."),
    ] = None,
    data: Annotated[str | None, typer.Option(help="Local dataset file or folder, in the dataset's own format.")] = None,
    endpoint: Annotated[
        list[str] | None,
        typer.Option(help="Benchmark an already-running OpenAI-compatible server at this URL. Give it more than "
                     "once for data-parallel replicas behind no router: requests go round-robin, results are "
                     "tagged with their endpoint, acceptance counters are summed."),
    ] = None,
    client_processes: Annotated[
        str | None,
        typer.Option(help="Client processes a point's streams are split over: a number, or auto (one per 128 "
                     "streams, at most one per CPU; measured with bench loadgen --overhead). Default: the suite's "
                     "client_processes, else auto."),
    ] = None,
    request_rate: Annotated[
        str | None,
        typer.Option(help="Open-loop points beside the concurrency points: arrival rates in requests per second, "
                     "comma-separated, e.g. 1,2,4 (point ids end in :r1.0)."),
    ] = None,
    arrivals: Annotated[
        str | None, typer.Option(help="Open-loop arrivals: poisson (default) or constant, seeded with --seed.")
    ] = None,
    burstiness: Annotated[
        float | None,
        typer.Option(help="Poisson arrivals: gamma shape as in vllm bench serve (1 = Poisson, < 1 burstier, > 1 "
                     "smoother; the mean rate is kept)."),
    ] = None,
    max_concurrency: Annotated[
        int | None, typer.Option(min=1, help="Open loop: at most this many requests in flight (later arrivals wait).")
    ] = None,
    goodput: Annotated[
        str | None,
        typer.Option(help="SLO for goodput, seconds: e.g. ttft_s=2,tpot_s=0.05 (also e2e_s). Goodput = requests "
                     "meeting every target per second, per point."),
    ] = None,
    tp: Annotated[
        int | None,
        typer.Option(help="Tensor parallel size passed to the engine. Default: from the registry's weight size "
                     "and the GPUs NVML sees."),
    ] = None,
    dp: Annotated[int | None, typer.Option(help="Data parallel size passed to the engine.")] = None,
    ep: Annotated[int | None, typer.Option(help="Expert parallel size passed to the engine.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for prompt sampling.")] = None,
    resume: Annotated[
        Path | None, typer.Option(help="Continue a broken run: runs only its unfinished points.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the server command(s) and request plan; launch nothing.")
    ] = False,
    output: Annotated[Path, typer.Option("-o", "--output", help="Folder for run directories.")] = Path("results"),
    api_key_env: Annotated[
        str | None,
        typer.Option(help="Environment variable holding the API key (default DFLASHBENCH_API_KEY, OPENAI_API_KEY)."),
    ] = None,
    report: Annotated[bool, typer.Option(help="Write the HTML report at the end.")] = True,
    max_error_rate: Annotated[
        float | None,
        typer.Option(min=0.0, max=1.0, help="A point with a larger share of failed requests is marked degraded "
                     "and the sweep exits 1. Default: the suite's max_error_rate, else 0.1."),
    ] = None,
    store_text: Annotated[
        bool,
        typer.Option(help="Keep each request's output text (first 32,768 characters, with its length and hash) "
                     "and token ids in requests.jsonl, for agreement with AR. --no-store-text keeps none (privacy): "
                     "accuracy is still graded, agreement is not measured."),
    ] = True,
    request_timeout: Annotated[
        float | None,
        typer.Option(help="Seconds one request (one turn, whole stream) may take before it fails. Default: the "
                     "suite's timeout_s, else 600."),
    ] = None,
    ready_timeout: Annotated[
        float | None,
        typer.Option(help="Seconds a launched server may take to load and answer its health check. Default: the "
                     "suite's ready_timeout_s, else 1800."),
    ] = None,
) -> None:
    """The main job: sweep concurrency x method on a backend and record everything (no arguments: the demo).

    Exit status: 0 every point ok; 1 the run finished but some point failed or is degraded (finish or redo them
    with --resume); 2 nothing to run or it could not go on (bad input, the run directory in use by another
    sweep, a run file that cannot be written, e.g. disk full: what was written is kept); 130 on Ctrl-C, 143 on
    SIGTERM.
    """
    from dflashbench.sweep import SweepConfig, run_sweep

    overrides = dict(backend=backend, methods=method, model=model, draft=draft, concurrency=concurrency,
                     num_prompts=num_prompts, data=data, tp=tp, dp=dp, ep=ep, seed=seed,
                     requests_per_stream=requests_per_stream, repeats=repeats, max_error_rate=max_error_rate,
                     timeout_s=request_timeout, ready_timeout_s=ready_timeout, client_processes=client_processes,
                     request_rate=request_rate, arrivals=arrivals, burstiness=burstiness, max_concurrency=max_concurrency,
                     goodput=goodput)  # fmt: skip
    endpoints = list(endpoint or [])
    if resume is not None:
        given = [f"--{k.replace('_', '-')}" for k, v in overrides.items() if v is not None]
        if given or endpoint or suite is not None:
            raise UserError(f"--resume continues a run with its own configuration; drop {', '.join(given) or '--suite/--endpoint'}")
        config = SweepConfig(suite=None, out_dir=output, resume=resume, dry_run=dry_run, api_key_env=api_key_env,
                             report=report, store_text=store_text)  # fmt: skip
    else:
        from dflashbench.suites import apply_overrides, load_suite

        if suite is None:  # the embedded demo on the reference backend; real workloads on an engine
            suite = "demo" if backend in (None, "reference", "endpoint") else "default"
        loaded = load_suite(suite)
        if suite not in ("demo", "default"):  # a suite the user named: its errors name its file and key
            _check_suite(loaded, loaded.source_file, overridden=frozenset(k for k, v in overrides.items() if v is not None))
        resolved = apply_overrides(loaded, **overrides)
        config = SweepConfig(suite=resolved, out_dir=output, endpoint=endpoints[0] if endpoints else None,
                             endpoints=tuple(endpoints), dry_run=dry_run, api_key_env=api_key_env, report=report,
                             methods_given=method is not None, store_text=store_text)  # fmt: skip
    outcome = run_sweep(config, echo=typer.echo)
    failed = [p for p in outcome.failed if p.status == "failed"]
    if failed:
        typer.echo(f"{len(failed)} point(s) failed; finish them with: dflashbench sweep --resume {outcome.run_dir}",
                   err=True)  # fmt: skip
    if outcome.degraded:
        typer.echo(f"{len(outcome.degraded)} point(s) degraded (more failed requests than max_error_rate allows; "
                   f"their figures are kept, marked degraded): "
                   f"{', '.join(p.point_id for p in outcome.degraded)}; run them again with: dflashbench sweep "
                   f"--resume {outcome.run_dir}", err=True)  # fmt: skip
    if outcome.failed:
        raise typer.Exit(1)


@bench_app.command("loadgen")
@user_errors
def bench_loadgen(
    pace_ms: Annotated[
        float | None, typer.Option(help="Stand-in server: time between two chunks of a stream (10; --overhead 100).")
    ] = None,
    tokens_per_chunk: Annotated[int, typer.Option(help="Tokens per chunk (a speculative step's worth).")] = 1,
    max_tokens: Annotated[int | None, typer.Option(help="Tokens per request (100; --overhead 20).")] = None,
    rounds: Annotated[int, typer.Option(help="Requests per stream in each trial.")] = 2,
    concurrency: Annotated[
        str | None, typer.Option(help="Concurrency levels to try, in order (16,...,1024; --overhead 64,256,1024).")
    ] = None,
    processes: Annotated[
        str | None, typer.Option(help="Client process counts to try, e.g. 1,4 (--overhead: 1,2,4).")
    ] = None,
    server_workers: Annotated[int, typer.Option(help="Stand-in server processes (SO_REUSEPORT).")] = 1,
    tolerance: Annotated[float, typer.Option(help="Allowed |measured ITL - true pace| / pace.")] = 0.05,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the results as JSON here.")] = None,
    overhead: Annotated[
        bool,
        typer.Option("--overhead", help="Instead: the client's TTFT overhead against the pace-exact stand-in, per "
                     "streams x client processes, through the sweep's own sharding."),
    ] = False,
    repeats: Annotated[int, typer.Option(min=1, help="--overhead: run the table this many times (median, range).")] = 1,
) -> None:
    """How many streams and tok/s one client process sustains with ITL within 5% of a paced server's truth;
    with --overhead, the client's TTFT overhead at chosen streams x client processes."""
    import json

    from dflashbench.bench_loadgen import format_trial, run_bench

    def ints(text: str, flag: str) -> list[int]:
        try:
            return [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise UserError(f"{flag} {text}: expected integers like 1,2,4") from None

    if overhead:
        from dflashbench.bench_overhead import format_cell, format_table, run_overhead

        result = run_overhead(
            concurrencies=ints(concurrency or "64,256,1024", "--concurrency"),
            processes=ints(processes or "1,2,4", "--processes"), repeats=repeats,
            pace_ms=100.0 if pace_ms is None else pace_ms, max_tokens=20 if max_tokens is None else max_tokens,
            rounds=rounds, server_workers=server_workers, on_cell=lambda c: typer.echo(format_cell(c)),
        )  # fmt: skip
        typer.echo(f"client TTFT overhead (the stand-in sends the first chunk at once: every ms is overhead); "
                   f"median [min-max] over {repeats} repeat(s):")  # fmt: skip
        typer.echo(format_table(result["table"]))
    else:
        result = run_bench(
            pace_ms=10.0 if pace_ms is None else pace_ms, tokens_per_chunk=tokens_per_chunk,
            max_tokens=100 if max_tokens is None else max_tokens, rounds=rounds,
            concurrencies=ints(concurrency or "16,32,64,128,256,512,1024", "--concurrency"),
            processes=ints(processes, "--processes") if processes else None, server_workers=server_workers,
            tolerance=tolerance, on_trial=lambda t: typer.echo(format_trial(t)),
        )  # fmt: skip
        for procs, best in result["best"].items():
            typer.echo(f"best with {procs} client process(es): {best['concurrency']} streams, {best['tok_per_s']:.0f} tok/s")
    if json_out is not None:
        json_out.write_text(json.dumps(result, indent=2))
        typer.echo(f"results written to {json_out}")


# --- training and the embedded pair ---


@train_app.command("target")
@user_errors
def train_target_cmd(
    out: Annotated[str, typer.Option("--out", "-o", help="Output model directory (HF format, with tokenizer).")] = "runs/target",
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 2400,
    seed: Annotated[int, typer.Option(help="Seed of the corpus stream and the initial weights.")] = 0,
    batch_size: Annotated[int, typer.Option(help="Conversations per step.")] = 16,
    lr: Annotated[float, typer.Option(help="Peak learning rate (warm-up, then cosine).")] = 3e-3,
    max_minutes: Annotated[float | None, typer.Option(help="Stop (checkpointed) after this many minutes.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run checkpointed in --out.")] = False,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's choice).")] = None,
    checkpoint_every: Annotated[int, typer.Option(help="Checkpoint every N steps.")] = 200,
) -> None:
    """Train the tiny Qwen3-architecture target (and its tokenizer) on the synthetic corpus, on the CPU."""
    from pathlib import Path

    from dflashbench.reference.training.target import TargetTrainConfig, train_target

    cfg = TargetTrainConfig(
        out_dir=Path(out), steps=steps, seed=seed, batch_size=batch_size, lr=lr, max_minutes=max_minutes,
        resume=resume, threads=threads, checkpoint_every=checkpoint_every,
    )  # fmt: skip
    record = train_target(cfg)
    typer.echo(
        f"target: {record['steps_done']} steps, {record['minutes']} min, train loss {record['final_train_loss']}, "
        + ", ".join(f"{c} loss {v['loss']} acc {v['accuracy']}" for c, v in record["heldout"].items())
        + f" -> {out}"
    )


@train_app.command("draft")
@user_errors
def train_draft_cmd(
    target: Annotated[str, typer.Option(help="Target model directory (transformers causal LM with its tokenizer).")],
    out: Annotated[str, typer.Option("--out", "-o", help="Output drafter directory (released DFlash format).")] = "runs/dflash",
    block_size: Annotated[int, typer.Option(help="Block size B: anchor + B-1 mask slots.")] = 16,
    num_layers: Annotated[int, typer.Option(help="Draft decoder layers.")] = 2,
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 2000,
    seed: Annotated[int, typer.Option(help="Seed of the corpus stream, the anchors and the initial weights.")] = 0,
    batch_size: Annotated[int, typer.Option(help="Conversations per step.")] = 8,
    anchors: Annotated[int, typer.Option(help="Random anchors (blocks) per conversation.")] = 24,
    gamma: Annotated[float, typer.Option(help="Loss decay: slot k weighs exp(-(k-1)/gamma).")] = 7.0,
    distill: Annotated[float, typer.Option(help="Weight of the target-distribution (self-distillation) term.")] = 0.5,
    lr: Annotated[float, typer.Option(help="Peak learning rate (warm-up, then cosine).")] = 1e-3,
    target_layer_ids: Annotated[
        str | None, typer.Option(help="Target layers to fuse, comma-separated (default: the released rule).")
    ] = None,
    mask_token_id: Annotated[
        int | None, typer.Option(help="Mask token id (default: the tokenizer's <|MASK|>, else the first unused row).")
    ] = None,
    max_minutes: Annotated[float | None, typer.Option(help="Stop (checkpointed) after this many minutes.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run checkpointed in --out.")] = False,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's choice).")] = None,
    checkpoint_every: Annotated[int, typer.Option(help="Checkpoint every N steps.")] = 200,
) -> None:
    """Train a DFlash drafter for any transformers target (anchors, block masks, position-decayed loss)."""
    from pathlib import Path

    from dflashbench.reference.training.dflash import DraftTrainConfig, train_draft

    if not Path(target, "config.json").is_file():
        raise UserError(f"--target {target}: no config.json there; pass a transformers model directory")
    try:
        layer_ids = [int(x) for x in target_layer_ids.split(",")] if target_layer_ids else None
    except ValueError:
        raise UserError(f"--target-layer-ids {target_layer_ids!r}: expected comma-separated integers") from None
    cfg = DraftTrainConfig(
        target_dir=Path(target), out_dir=Path(out), block_size=block_size, num_layers=num_layers, steps=steps,
        seed=seed, batch_size=batch_size, anchors=anchors, gamma=gamma, distill=distill, lr=lr,
        target_layer_ids=layer_ids, mask_token_id=mask_token_id, max_minutes=max_minutes, resume=resume,
        threads=threads, checkpoint_every=checkpoint_every,
    )  # fmt: skip
    record = train_draft(cfg)
    typer.echo(
        f"draft: {record['steps_done']} steps, {record['minutes']} min, train loss {record['final_train_loss']}, "
        "held-out tau estimate: " + ", ".join(f"{c} {v['tau_est']}" for c, v in record["heldout"].items())
        + f" -> {out}"
    )


@bench_app.command("pair")
@user_errors
def bench_pair_cmd(
    model: Annotated[str | None, typer.Option(help="Target directory (default: the embedded target).")] = None,
    draft: Annotated[str | None, typer.Option(help="DFlash drafter directory (default: the embedded one).")] = None,
    num_prompts: Annotated[int, typer.Option(help="Built-in demo prompts (round-robin over categories).")] = 24,
    block_size: Annotated[int | None, typer.Option(help="Block size (default: the drafter's, 16).")] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens generated per prompt at most.")] = 128,
    repeats: Annotated[int, typer.Option(help="Timed runs per prompt and method (the median is kept).")] = 1,
    seed: Annotated[int, typer.Option(help="Demo prompt seed.")] = 0,
    threads: Annotated[int, typer.Option(help="torch CPU threads (1 is fastest for the tiny pair on a busy CPU).")] = 1,
    json_out: Annotated[str | None, typer.Option("--json", help="Also write the results to this JSON file.")] = None,
) -> None:
    """AR vs DFlash side by side on the built-in demo prompts: tau per category, ms per token, lossless check."""
    from dflashbench.bench.pair import PairBenchConfig, format_report, run_pair_bench, to_json

    model, draft = _pair_or_embedded(model, draft)
    if block_size is not None and block_size < 2:
        raise UserError(f"--block-size must be at least 2 (got {block_size})")
    cfg = PairBenchConfig(model=model, draft=draft, num_prompts=num_prompts, block_size=block_size,
                          max_new_tokens=max_new_tokens, repeats=repeats, seed=seed, threads=threads)

    def progress(i: int, n: int, p) -> None:
        typer.echo(f"[{i}/{n}] {p.category:<8} tau {p.dflash.tau:5.2f}  AR {p.ar.decode_s:6.3f}s  "
                   f"DFlash {p.dflash.decode_s:6.3f}s  {'ok' if p.lossless else 'MISMATCH'}", err=True)

    result = run_pair_bench(cfg, progress)
    _bench_report(format_report(result), to_json(result), json_out, lossless=result.all_lossless)


@bench_app.command("batching")
@user_errors
def bench_batching_cmd(
    model: Annotated[str | None, typer.Option(help="Target directory (default: the embedded target).")] = None,
    draft: Annotated[str | None, typer.Option(help="DFlash drafter directory (default: the embedded one).")] = None,
    method: Annotated[str, typer.Option(help="Methods, comma-separated: ar,dflash.")] = "ar,dflash",
    concurrency: Annotated[str, typer.Option(help="Concurrency levels, comma-separated; 1 is always run.")] = "1,2,4",
    num_prompts: Annotated[int, typer.Option(help="Built-in demo prompts (round-robin over categories).")] = 32,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens generated per prompt at most.")] = 96,
    rounds: Annotated[int, typer.Option(help="Rounds; each runs every level once, ratios are paired per round.")] = 3,
    seed: Annotated[int, typer.Option(help="Demo prompt seed.")] = 0,
    threads: Annotated[int, typer.Option(help="torch CPU threads (1 is fastest for the tiny pair on a busy CPU).")] = 1,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:1, ...")] = "cpu",
    dtype: Annotated[str | None, typer.Option(help="float32 (default), bfloat16, float16.")] = None,
    json_out: Annotated[str | None, typer.Option("--json", help="Also write the results to this JSON file.")] = None,
) -> None:
    """Throughput vs concurrency of the reference decoder in process (no HTTP), as paired ratios to c=1."""
    from dflashbench.bench.batching import (
        METHODS,
        BatchingBenchConfig,
        format_report,
        run_batching_bench,
        to_json,
    )

    methods = tuple(dict.fromkeys(m.strip().lower() for m in method.split(",") if m.strip()))
    if not methods or any(m not in METHODS for m in methods):
        raise UserError(f"--method {method}: choose from {', '.join(METHODS)}")
    try:
        levels = sorted({1, *(int(c) for c in concurrency.split(",") if c.strip())})
    except ValueError:
        raise UserError(f"--concurrency {concurrency}: expected integers like 1,2,4") from None
    if levels[0] < 1 or num_prompts < 1 or max_new_tokens < 1 or rounds < 1:
        raise UserError("--concurrency, --num-prompts, --max-new-tokens and --rounds must be at least 1")
    model, draft = _pair_or_embedded(model, draft)
    cfg = BatchingBenchConfig(model=model, draft=draft, methods=methods, concurrency=tuple(levels),
                              num_prompts=num_prompts, max_new_tokens=max_new_tokens, rounds=rounds, seed=seed,
                              threads=threads, device=device, dtype=dtype)  # fmt: skip

    def progress(run) -> None:
        typer.echo(f"round {run.round + 1}/{rounds} {run.method:<6} c={run.concurrency:<3} {run.tok_per_s:8.1f} tok/s "
                   f"({run.elapsed_s:.2f} s)", err=True)

    result = run_batching_bench(cfg, progress)
    _bench_report(format_report(result), to_json(result), json_out, lossless=all(result.lossless(m) for m in methods))


def _pair_or_embedded(model: str | None, draft: str | None) -> tuple[str, str]:
    """The target and DFlash drafter given, the embedded ones standing in for what is not."""
    if model is None or draft is None:
        from dflashbench.embedded import default_paths

        embedded = default_paths()
        model, draft = model or str(embedded.target), draft or str(embedded.dflash)
    return model, draft


def _bench_report(text: str, data: dict, json_out: str | None, *, lossless: bool) -> None:
    """Print a decoder benchmark's report, write its JSON, and exit 1 if an output was not lossless."""
    import json
    from pathlib import Path

    typer.echo(text)
    if json_out is not None:
        Path(json_out).write_text(json.dumps(data, indent=2))
        typer.echo(f"results written to {json_out}")
    if not lossless:
        raise typer.Exit(1)


# --- eagle3 ---


@train_app.command("eagle3")
@user_errors
def train_eagle3_cmd(
    target: Annotated[str, typer.Option(help="Target model directory (Hugging Face format, with tokenizer).")],
    out: Annotated[str, typer.Option("--out", "-o", help="Output head directory (EAGLE-3 checkpoint layout).")] = "runs/eagle3",
    k: Annotated[int, typer.Option("--k", help="Tokens the head drafts per step by default (a chain).")] = 5,
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 1000,
    ttt_steps: Annotated[int, typer.Option(help="Unrolled steps of the training-time test.")] = 7,
    seed: Annotated[int, typer.Option(help="Seed of the corpus stream, the anchors and the initial weights.")] = 0,
    batch_size: Annotated[int, typer.Option(help="Conversations per step.")] = 16,
    lr: Annotated[float, typer.Option(help="Peak learning rate (warm-up, then cosine).")] = 5e-3,
    draft_vocab_size: Annotated[
        int | None, typer.Option(help="Keep only the N most frequent answer tokens (default: the whole vocabulary).")
    ] = None,
    max_minutes: Annotated[float | None, typer.Option(help="Stop (checkpointed) after this many minutes.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run checkpointed in --out.")] = False,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's choice).")] = None,
) -> None:
    """Train an EAGLE-3 head (one layer, fused low/middle/high target features) with the training-time test."""
    from dflashbench.reference.training.eagle3 import Eagle3TrainConfig, train_eagle3

    if not Path(target, "config.json").is_file():
        raise UserError(f"--target {target}: no config.json there; pass a transformers model directory")
    cfg = Eagle3TrainConfig(
        target_dir=Path(target), out_dir=Path(out), k=k, ttt_steps=ttt_steps, steps=steps, seed=seed,
        batch_size=batch_size, lr=lr, draft_vocab_size=draft_vocab_size, max_minutes=max_minutes, resume=resume,
        threads=threads,
    )  # fmt: skip
    record = train_eagle3(cfg)
    accs = record["heldout_step_accuracy"]
    typer.echo(
        f"eagle3: {record['steps_done']} steps, {record['minutes']} min, train loss {record['final_train_loss']}, "
        "held-out top-1 agreement at steps 1..: "
        + "; ".join(f"{c} {' '.join(f'{a:.2f}' for a in v)}" for c, v in accs.items())
        + f" -> {out}"
    )


@bench_app.command("drafting")
@user_errors
def bench_drafting_cmd(
    model: Annotated[str | None, typer.Option(help="Target directory (default: the embedded target).")] = None,
    dflash: Annotated[str | None, typer.Option(help="DFlash drafter directory (default: the embedded one).")] = None,
    eagle3: Annotated[str | None, typer.Option(help="EAGLE-3 head directory (default: the embedded one).")] = None,
    ks: Annotated[str, typer.Option("--k", help="EAGLE-3 chain lengths, comma-separated.")] = "3,5,8",
    num_prompts: Annotated[int, typer.Option(help="Built-in demo prompts (balanced over categories).")] = 12,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens generated per prompt.")] = 128,
    repeats: Annotated[int, typer.Option(help="Timed repetitions per point of the drafting-cost curve.")] = 30,
    threads: Annotated[int, typer.Option(help="torch CPU threads (1 is fastest for the tiny pair).")] = 1,
    json_out: Annotated[str | None, typer.Option("--json", help="Also write the results to this JSON file.")] = None,
) -> None:
    """EAGLE-3 (k = 3, 5, 8) beside DFlash on the embedded pair: tau, speedup, and the drafting-cost curve."""
    import json

    from dflashbench.bench.drafting import DraftingBenchConfig, format_report, run_bench

    try:
        k_list = [int(x) for x in ks.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--k {ks!r}: expected comma-separated integers, e.g. 3,5,8") from None
    if not k_list or min(k_list) < 1:
        raise UserError("--k needs chain lengths >= 1")
    if model is None or dflash is None or eagle3 is None:
        try:
            from dflashbench.embedded import default_paths
        except ImportError:
            raise UserError("--model, --dflash and --eagle3 are required: the embedded pair is not installed") from None
        embedded = default_paths()
        model = model or str(embedded.target)
        dflash = dflash or str(embedded.dflash)
        eagle3 = eagle3 or (str(embedded.eagle3) if getattr(embedded, "eagle3", None) else None)
        if eagle3 is None:
            raise UserError("no EAGLE-3 head is embedded: pass --eagle3 DIR (train one with dflashbench train eagle3)")
    cfg = DraftingBenchConfig(model=model, dflash=dflash, eagle3=eagle3, ks=k_list, num_prompts=num_prompts,
                              max_new_tokens=max_new_tokens, repeats=repeats, threads=threads)
    result = run_bench(cfg)
    typer.echo(format_report(result))
    if json_out is not None:
        Path(json_out).write_text(json.dumps(result, indent=2))
        typer.echo(f"results written to {json_out}")


# --- reference decoder ---


def _decoder_pair(model: str | None, draft: str | None, method: str) -> tuple[str, str | None]:
    """``--model``/``--draft`` as given, else the embedded pair (when installed); checks they exist."""
    from pathlib import Path

    if model is None or (draft is None and method == "dflash"):
        try:
            from dflashbench.embedded import default_paths
        except ImportError:
            raise UserError("--model DIR (and --draft DIR for dflash) are required: the embedded pair is not "
                            "installed") from None
        embedded = default_paths()
        model = model or str(embedded.target)
        draft = draft or str(embedded.dflash)
    for label, path in (("model", model), ("draft", draft if method == "dflash" else None)):
        if path is not None and not Path(path).is_dir():
            raise UserError(f"--{label} {path}: no such directory")
    return model, draft if method == "dflash" else None


@app.command()
@user_errors
def generate(
    prompt: Annotated[str, typer.Option(help="The user message (the model's chat template is applied if it has one).")],
    model: Annotated[str | None, typer.Option(help="Target model directory. Default: the embedded target.")] = None,
    draft: Annotated[str | None, typer.Option(help="DFlash drafter directory. Default: the embedded drafter.")] = None,
    method: Annotated[str, typer.Option(help="ar or dflash.")] = "dflash",
    temperature: Annotated[float, typer.Option(help="0 = greedy; > 0 samples from the target.")] = 0.0,
    max_new_tokens: Annotated[int, typer.Option(help="Most tokens to generate.")] = 256,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:1, ...")] = "cpu",
    dtype: Annotated[str | None, typer.Option(help="float32, bfloat16, float16 (default: as stored).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for sampling.")] = None,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's choice).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON record instead of text.")] = False,
) -> None:
    """One generation on the reference decoder: the text, tau (tokens per target step) and tokens/s."""
    import json

    from dflashbench.reference.serving.oneshot import generate_once

    if threads is not None:
        if threads < 1:
            raise UserError("--threads must be at least 1")
        import torch

        torch.set_num_threads(threads)

    method = method.strip().lower()
    if method not in ("ar", "dflash"):
        raise UserError(f"--method must be ar or dflash, not {method!r}")
    model, draft = _decoder_pair(model, draft, method)
    rec = generate_once(model, draft, prompt, method=method, temperature=temperature, max_new_tokens=max_new_tokens,
                        device=device, dtype=dtype, seed=seed)
    if as_json:
        keys = ("text", "token_ids", "tau", "num_steps", "tok_per_s", "model", "draft", "method", "finish_reason")
        typer.echo(json.dumps({k: rec.to_dict()[k] for k in keys}))
        return
    typer.echo(rec.text)
    tau = f"{rec.tau:.2f}" if rec.tau is not None else "n/a"
    typer.echo(f"[{method}] {len(rec.token_ids)} tokens in {rec.seconds:.2f} s = {rec.tok_per_s:.1f} tok/s | "
               f"tau {tau} over {rec.num_steps} steps | stop: {rec.finish_reason}", err=True)


@bench_app.command("decoder")
@user_errors
def bench_decoder(
    shape: Annotated[str, typer.Option(help="Random target shape: tiny, small, qwen3-0.6b, qwen3-8b.")] = "small",
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    dtype: Annotated[str | None, typer.Option(help="Default: float32 on CPU, bfloat16 on CUDA.")] = None,
    block_size: Annotated[int, typer.Option(help="DFlash block size K.")] = 16,
    context: Annotated[int, typer.Option(help="Prompt/context length the passes run against.")] = 128,
    new_tokens: Annotated[int, typer.Option(help="Tokens generated in the tok/s runs.")] = 64,
    reps: Annotated[int, typer.Option(help="Timed repetitions per pass (median reported).")] = 10,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's choice).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON record.")] = False,
) -> None:
    """Cost of one AR step, one draft pass and one verify pass; AR vs oracle-DFlash tok/s (the ceiling)."""
    import json

    if block_size < 2:
        raise UserError("--block-size must be at least 2")
    if threads is not None and threads < 1:
        raise UserError("--threads must be at least 1")
    import torch

    from dflashbench.bench.decoder import format_table, run_decoder_bench

    if threads is not None:
        torch.set_num_threads(threads)
    result = run_decoder_bench(shape, device=device, dtype=dtype, block_size=block_size, context=context,
                               new_tokens=new_tokens, reps=reps)
    typer.echo(json.dumps(result.to_dict()) if as_json else format_table(result))
