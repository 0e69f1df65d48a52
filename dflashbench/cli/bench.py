"""``bench``: micro-benchmarks of dflashbench's own parts (the load generator, the reference decoder). Each
builds its config (which checks itself) and prints what :mod:`dflashbench.bench` measured; ``--json`` writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflashbench.cli.common import (
    CONTEXT,
    INT,
    STR,
    IntList,
    MethodList,
    at_least,
    embedded_or,
    int_list,
    methods_of,
    process_counts,
)
from dflashbench.errors import UserError
from dflashbench.types import Method

app = typer.Typer(help="Micro-benchmarks of dflashbench's own parts (decoder, load generator).", context_settings=CONTEXT)


@app.command("loadgen")
def bench_loadgen(
    pace_ms: Annotated[
        float | None, typer.Option(help="Stand-in server: time between two chunks of a stream (10).")
    ] = None,
    ttft_ms: Annotated[float, typer.Option(help="--overhead: the stand-in's own wait before the first chunk.")] = 50.0,
    tokens_per_chunk: Annotated[int, typer.Option(help="Tokens per chunk (a speculative step's worth).")] = 1,
    max_tokens: Annotated[int | None, typer.Option(help="Tokens per request (100; --overhead 128).")] = None,
    rounds: Annotated[int, typer.Option(help="Requests per stream in each trial.")] = 2,
    concurrency: Annotated[
        IntList | None,
        typer.Option(parser=int_list("--concurrency", "1,2,4", minimum=1), metavar=STR,
                     help="Concurrency levels to try, in order (16,...,1024; --overhead 64,256,1024)."),
    ] = None,
    processes: Annotated[
        list | None,
        typer.Option(parser=process_counts("--processes"), metavar=STR,
                     help="Client process counts to try, e.g. 1,4; auto: as a sweep's --client-processes auto "
                     "(--overhead's default)."),
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
    from dflashbench.bench.client_capacity import format_trial, run_bench

    if overhead:
        from dflashbench.bench.overhead import format_cell, format_table, run_overhead

        result = run_overhead(
            concurrencies=list(concurrency or (64, 256, 1024)), processes=list(processes or ("auto",)), repeats=repeats,
            pace_ms=10.0 if pace_ms is None else pace_ms, max_tokens=128 if max_tokens is None else max_tokens,
            ttft_ms=ttft_ms, rounds=rounds, server_workers=server_workers,
            on_cell=lambda c: typer.echo(format_cell(c)),
        )  # fmt: skip
        typer.echo(f"client TTFT overhead = client TTFT mean - the stand-in's own TTFT mean ({ttft_ms:g} ms wait); "
                   f"median [min-max] over {repeats} repeat(s):")  # fmt: skip
        typer.echo(format_table(result["table"]))
    else:
        if processes and "auto" in processes:
            raise UserError("--processes auto: only with --overhead (this search tries fixed counts); give numbers, "
                            "e.g. --processes 1,2")  # fmt: skip
        result = run_bench(
            pace_ms=10.0 if pace_ms is None else pace_ms, tokens_per_chunk=tokens_per_chunk,
            max_tokens=100 if max_tokens is None else max_tokens, rounds=rounds,
            concurrencies=list(concurrency or (16, 32, 64, 128, 256, 512, 1024)),
            processes=list(processes) if processes else None, server_workers=server_workers,
            tolerance=tolerance, on_trial=lambda t: typer.echo(format_trial(t)),
        )  # fmt: skip
        for procs, best in result["best"].items():
            typer.echo(f"best with {procs} client process(es): {best['concurrency']} streams, {best['tok_per_s']:.0f} tok/s")
    _write_json(result, json_out)


@app.command("peers")
def bench_peers(
    concurrency: Annotated[
        IntList,
        typer.Option(parser=int_list("--concurrency", "64,256", minimum=1), metavar=STR,
                     help="Streams, comma-separated."),
    ] = "64,256",
    repeats: Annotated[int, typer.Option(min=1, help="Paired repeats (every tool at every streams count).")] = 3,
    aiperf: Annotated[str | None, typer.Option(help="AIPerf's executable (default: aiperf on PATH).")] = None,
    guidellm: Annotated[str | None, typer.Option(help="GuideLLM's executable (default: guidellm on PATH).")] = None,
    logs: Annotated[Path | None, typer.Option(help="Keep each peer's output and files here.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the results as JSON here.")] = None,
) -> None:
    """dflashbench's client beside AIPerf and GuideLLM on one pace-exact stand-in (50 ms TTFT, 10 ms per token, 128
    tokens): each tool's TTFT overhead (its client TTFT minus the server's own), ITL error and the server's lag under
    its load, with paired ratios. Beside them runs the floor, a raw-socket client that does nothing but find the
    first token's bytes: what any client pays on this machine, and each tool's overhead over it. A peer not
    installed is left out; `nox -s peers` installs both."""
    from dflashbench.bench.peers import format_run, format_table, run_peers

    result = run_peers(concurrencies=list(concurrency), repeats=repeats,
                       executables={"aiperf": aiperf, "guidellm": guidellm}, log_dir=logs,
                       on_run=lambda r: typer.echo(format_run(r)))  # fmt: skip
    versions = ", ".join(f"{k} {v}" for k, v in result["config"]["versions"].items())
    typer.echo(f"TTFT overhead = client TTFT mean - the stand-in's own TTFT mean (50 ms wait); {versions}; "
               f"median [min-max] over {repeats} repeat(s):")  # fmt: skip
    typer.echo(format_table(result["table"]))
    _write_json(result, json_out)


@app.command("pair")
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

    model, drafts = embedded_or(model, {Method.DFLASH: draft})
    cfg = PairBenchConfig(model=model, draft=drafts[Method.DFLASH], num_prompts=num_prompts, block_size=block_size,
                          max_new_tokens=max_new_tokens, repeats=repeats, seed=seed, threads=threads)

    def progress(i: int, n: int, p) -> None:
        typer.echo(f"[{i}/{n}] {p.category:<8} tau {p.dflash.tau:5.2f}  AR {p.ar.decode_s:6.3f}s  "
                   f"DFlash {p.dflash.decode_s:6.3f}s  {'ok' if p.lossless else 'MISMATCH'}", err=True)

    result = run_pair_bench(cfg, progress)
    _report(format_report(result), to_json(result), json_out, lossless=result.all_lossless)


@app.command("batching")
def bench_batching_cmd(
    model: Annotated[str | None, typer.Option(help="Target directory (default: the embedded target).")] = None,
    draft: Annotated[str | None, typer.Option(help="DFlash drafter directory (default: the embedded one).")] = None,
    method: Annotated[
        MethodList,
        typer.Option(parser=methods_of("--method", (Method.AR, Method.DFLASH)), metavar=STR,
                     help="Methods, comma-separated: ar,dflash."),
    ] = "ar,dflash",
    concurrency: Annotated[
        IntList,
        typer.Option(parser=int_list("--concurrency", "1,2,4"), metavar=STR,
                     help="Concurrency levels, comma-separated; 1 is always run."),
    ] = "1,2,4",
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
    from dflashbench.bench.batching import BatchingBenchConfig, format_report, run_batching_bench, to_json

    model, drafts = embedded_or(model, {Method.DFLASH: draft})
    cfg = BatchingBenchConfig(model=model, draft=drafts[Method.DFLASH], methods=method, concurrency=concurrency,
                              num_prompts=num_prompts, max_new_tokens=max_new_tokens, rounds=rounds, seed=seed,
                              threads=threads, device=device, dtype=dtype)  # fmt: skip

    def progress(run) -> None:
        typer.echo(f"round {run.round + 1}/{rounds} {run.method:<6} c={run.concurrency:<3} {run.tok_per_s:8.1f} tok/s "
                   f"({run.elapsed_s:.2f} s)", err=True)

    result = run_batching_bench(cfg, progress)
    _report(format_report(result), to_json(result), json_out, lossless=all(result.lossless(m) for m in cfg.methods))


@app.command("drafting")
def bench_drafting_cmd(
    model: Annotated[str | None, typer.Option(help="Target directory (default: the embedded target).")] = None,
    dflash: Annotated[str | None, typer.Option(help="DFlash drafter directory (default: the embedded one).")] = None,
    eagle3: Annotated[str | None, typer.Option(help="EAGLE-3 head directory (default: the embedded one).")] = None,
    ks: Annotated[
        IntList,
        typer.Option("--k", parser=int_list("--k", "3,5,8", minimum=1), metavar=STR,
                     help="EAGLE-3 chain lengths, comma-separated."),
    ] = "3,5,8",
    num_prompts: Annotated[int, typer.Option(help="Built-in demo prompts (balanced over categories).")] = 12,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens generated per prompt.")] = 128,
    repeats: Annotated[int, typer.Option(help="Timed repetitions per point of the drafting-cost curve.")] = 30,
    threads: Annotated[int, typer.Option(help="torch CPU threads (1 is fastest for the tiny pair).")] = 1,
    json_out: Annotated[str | None, typer.Option("--json", help="Also write the results to this JSON file.")] = None,
) -> None:
    """EAGLE-3 (k = 3, 5, 8) beside DFlash on the embedded pair: tau, speedup, and the drafting-cost curve."""
    from dflashbench.bench.drafting import DraftingBenchConfig, format_report, run_bench

    model, drafts = embedded_or(model, {Method.DFLASH: dflash, Method.EAGLE3: eagle3},
                                flags={Method.DFLASH: "--dflash", Method.EAGLE3: "--eagle3"})  # fmt: skip
    cfg = DraftingBenchConfig(model=model, dflash=drafts[Method.DFLASH], eagle3=drafts[Method.EAGLE3], ks=list(ks),
                              num_prompts=num_prompts, max_new_tokens=max_new_tokens, repeats=repeats,
                              threads=threads)  # fmt: skip
    result = run_bench(cfg)
    typer.echo(format_report(result))
    _write_json(result, json_out)


@app.command("decoder")
def bench_decoder(
    shape: Annotated[str, typer.Option(help="Random target shape: tiny, small, qwen3-0.6b, qwen3-8b.")] = "small",
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    dtype: Annotated[str | None, typer.Option(help="Default: float32 on CPU, bfloat16 on CUDA.")] = None,
    block_size: Annotated[
        int, typer.Option(parser=at_least("--block-size", 2), metavar=INT, help="DFlash block size K.")
    ] = 16,
    context: Annotated[int, typer.Option(help="Prompt/context length the passes run against.")] = 128,
    new_tokens: Annotated[int, typer.Option(help="Tokens generated in the tok/s runs.")] = 64,
    reps: Annotated[int, typer.Option(help="Timed repetitions per pass (median reported).")] = 10,
    threads: Annotated[
        int | None,
        typer.Option(parser=at_least("--threads", 1), metavar=INT, help="torch CPU threads (default: torch's choice)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON record.")] = False,
) -> None:
    """Cost of one AR step, one draft pass and one verify pass; AR vs oracle-DFlash tok/s (the ceiling)."""
    import json

    from dflashbench.bench.common import torch_threads
    from dflashbench.bench.decode_costs import format_table, run_decoder_bench

    with torch_threads(threads):
        result = run_decoder_bench(shape, device=device, dtype=dtype, block_size=block_size, context=context,
                                   new_tokens=new_tokens, reps=reps)  # fmt: skip
        typer.echo(json.dumps(result.to_dict()) if as_json else format_table(result))


def _write_json(data: dict, json_out: str | Path | None) -> None:
    """``--json FILE``: the results as JSON (:func:`dflashbench.bench.common.write_json`)."""
    if json_out is not None:
        from dflashbench.bench.common import write_json

        typer.echo(f"results written to {write_json(json_out, data)}")


def _report(text: str, data: dict, json_out: str | None, *, lossless: bool) -> None:
    """Print a decoder benchmark's report, write its JSON, and exit 1 if an output was not lossless."""
    typer.echo(text)
    _write_json(data, json_out)
    if not lossless:
        raise typer.Exit(1)
