"""What there is to run: the model registry, the suites and the workloads (``models``, ``suites``,
``workloads``), and the checks of a suite file beyond its schema (also run by ``sweep`` on a named suite)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflashbench.cli.common import CONTEXT
from dflashbench.errors import UserError

models_app = typer.Typer(help="The model registry: targets with published DFlash drafters, their drafts and engine "
                         "recipes.", context_settings=CONTEXT)  # fmt: skip
suites_app = typer.Typer(help="List, show and validate suite files.", context_settings=CONTEXT)
workloads_app = typer.Typer(help="List workloads and show exactly which requests they send.", context_settings=CONTEXT)


def _validate_suite_file(path: str) -> str:
    """Load one suite file and check what the schema cannot: backend, workloads, published ids."""
    from dflashbench.plan.suite_overrides import check_suite
    from dflashbench.plan.suites import load_suite

    suite = load_suite(path)
    check_suite(suite, path)
    traces = f" + trace {suite.trace} at {', '.join(f'{s:g}x' for s in suite.trace_speed)}" if suite.trace else ""
    return f"{suite.name}: {len(suite.methods)} methods x {len(suite.concurrency)} concurrencies x " \
           f"{len(suite.workloads)} workload(s){traces}"


@models_app.command("list")
def models_list() -> None:
    """Every registered target: its HF id, size, DFlash drafter (block size) and EAGLE-3 head."""
    from dflashbench.plan.models import list_text

    typer.echo(list_text())


@models_app.command("show")
def models_show(name: Annotated[str, typer.Argument(help="A registry name, alias or HF id, e.g. gpt-oss-120b.")]) -> None:
    """One entry with the source of every fact: drafts, chat settings, engine recipes, what is unverified."""
    from dflashbench.plan.model_check import check_entry, confirmed_marks, fetcher
    from dflashbench.plan.models import require, show_text

    entry = require(name)
    typer.echo(show_text(entry, confirmed_marks(check_entry(entry, fetcher(None, network=False)))))


@models_app.command("check")
def models_check(
    name: Annotated[str | None, typer.Argument(help="A registry name, alias or HF id. Default: every entry.")] = None,
    local: Annotated[
        Path | None,
        typer.Option("--local", help="Read the files from DIR/<org>/<name>/ (Hugging Face layout) instead of the Hub."),
    ] = None,
) -> None:
    """Compare the registry with the models' own config.json files (target, DFlash drafter, EAGLE-3 head).

    Exit status: 0 nothing wrong; 1 a fact is wrong; 2 no file could be read (offline, gated).
    """
    from dflashbench.plan.model_check import check_entry, fetcher, hub_reachable
    from dflashbench.plan.models import registry, require

    entries = [require(name)] if name else registry().models
    network, said = (False, f"reading {local}") if local is not None else hub_reachable()
    typer.echo(said)
    fetch = fetcher(local, network=network, offline=None if network else said)
    findings = [f for e in entries for f in check_entry(e, fetch)]
    for finding in findings:
        typer.echo(finding.line())
    counts = {s: sum(f.status == s for f in findings) for s in ("ok", "wrong", "missing", "unchecked")}
    typer.echo(", ".join(f"{n} {s}" for s, n in counts.items()))
    if counts["wrong"]:
        raise typer.Exit(1)
    if counts["unchecked"] == len(findings):
        typer.echo("nothing could be checked: no file was readable (see the reasons above)", err=True)
        raise typer.Exit(2)


@suites_app.command("list")
def suites_list() -> None:
    """Every suite found by name: backend, methods, workloads, what it is for."""
    from dflashbench.plan.suites import load_suite, suite_files

    for name, path in suite_files().items():
        try:
            s = load_suite(str(path))
        except UserError as exc:
            typer.echo(f"{name:<34} (invalid: {exc})")
            continue
        methods = ",".join(m.value for m in s.methods)
        typer.echo(f"{s.name:<34} {s.backend:<9} {methods:<16} {s.description}")


@suites_app.command("show")
def suites_show(
    name: Annotated[str, typer.Argument(help="Suite name (e.g. demo) or path of a .toml file.")] = "demo",
) -> None:
    """The resolved suite (includes merged, defaults filled in)."""
    from dflashbench.plan.suites import describe_suite, load_suite
    from dflashbench.redact import redact_text

    typer.echo(redact_text(describe_suite(load_suite(name))), nl=False)  # extra_args may hold an --api-key


@suites_app.command("validate")
def suites_validate(
    paths: Annotated[list[str] | None, typer.Argument(help="Suite files or names. Default: every suite.")] = None,
) -> None:
    """Check suite files: schema, includes, backend, workload names/configs/categories, published ids."""
    from dflashbench.plan.suites import suite_files

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
def workloads_list() -> None:
    """Every workload: dataset id, configs, split, categories."""
    from dflashbench.workloads import WORKLOADS

    for w in WORKLOADS.values():
        configs = f" configs: {', '.join(w.configs)};" if w.configs else ""
        cats = ", ".join(w.categories(w.configs[0] if w.configs else None))
        typer.echo(f"{w.name:<14} {w.hf_id or '(built in)'}\n    {w.description}\n   {configs} split: {w.split};"
                   f" categories: {cats}")  # fmt: skip


@workloads_app.command("show")
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
    from dflashbench.workloads import format_requests, load_requests
    from dflashbench.workloads.spec import WorkloadSpec

    spec = WorkloadSpec(
        name=name, config=config, split=split, categories=category or None, max_tokens=max_tokens,
        thinking=thinking, on_placeholder="skip" if skip_placeholders else "error",
    )  # fmt: skip
    typer.echo(format_requests(load_requests(spec, num_prompts=num_prompts, seed=seed, data=data), as_json=as_json),
               nl=False)  # fmt: skip
