"""A suite's trace replay, planned once: the trace window, its requests with content (one plan per
``trace_content``), and the grid's trace points (speed x content).

``suite.trace`` names a shipped trace or a file (:mod:`dflashbench.workloads.traces`); the content pool is every
prompt of the suite's workloads (:mod:`dflashbench.workloads.trace_content`), counted with the target's own
tokenizer. The model's context length (for clipping) is ``trace_context_tokens``, else the target's
``config.json`` ``max_position_embeddings``. Point ids extend the open loop's scheme: an open-loop point ends in
``:r4.0``, a trace point in ``:t<trace>x<speed>`` (``reference:dflash:workloads:tazure-codex2.0``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dflashbench.errors import UserError
from dflashbench.plan.plan_size import TraceSize
from dflashbench.plan.suites import EMBEDDED, Suite
from dflashbench.types import Request
from dflashbench.workloads.trace_content import (
    ContentSettings,
    EstimatedTokens,
    HfTokens,
    TracePlan,
    plan_content,
)
from dflashbench.workloads.traces import Trace, fmt_duration, load_trace, parse_duration

RANDOM_LABEL = "random tokens"
# The longest replay planned: 10 days at its slowest speed, the longest published trace (Azure's 2024 traces, collected
# May 10-19 2024: Azure/AzurePublicDataset AzureLLMInferenceDataset2024.md). A timestamp far out (10^30 ms in a
# Mooncake file) made a replay of 1e27 s that sent its first request, then waited for ever.
MAX_REPLAY_S = 10 * 86400.0


@dataclass(frozen=True)
class TracePoint:
    """What makes a grid point a trace replay: the trace, the speed its time runs at, and the content sent."""

    name: str
    speed: float
    content: str  # "workloads" or "random"
    workload_label: str  # what the point's rows name as their workload

    @property
    def label(self) -> str:
        """The point id's last part: ``tazure-codex2.0``."""
        return f"t{self.name}x{float(self.speed)!r}"

    def describe(self) -> str:
        """``trace azure-code at 2× (synthetic)``: the point on the console."""
        return f"trace {self.name} at {self.speed:g}× ({self.workload_label.split(': ', 1)[-1]})"


def workload_label(suite: Suite, content: str) -> str:
    """The trace points' workload: ``trace azure-code: synthetic`` (the pool's workloads), or ``: random tokens``."""
    name = trace_name(suite)
    pool = RANDOM_LABEL if content == "random" else "+".join(w.label for w in suite.workloads)
    return f"trace {name}: {pool}"


def trace_name(suite: Suite) -> str:
    """The trace's name in point ids: the shipped name, or the file's stem made safe."""
    from dflashbench.workloads.traces import SHIPPED, safe_name

    assert suite.trace is not None
    return suite.trace if suite.trace in SHIPPED else safe_name(Path(suite.trace).stem)


def trace_points(suite: Suite) -> list[TracePoint]:
    """The trace points of one method x repeat round, in run order: content, then speed (slowest first)."""
    if not suite.trace:
        return []
    return [TracePoint(trace_name(suite), speed, content, workload_label(suite, content))
            for content in suite.trace_content for speed in suite.trace_speed]  # fmt: skip


def settings_for(suite: Suite, content: str, context_tokens: int | None) -> ContentSettings:
    return ContentSettings(content=content, input_scale=suite.trace_input_scale, output_scale=suite.trace_output_scale,
                           context_tokens=context_tokens, over_context=suite.trace_over_context,
                           fill=suite.trace_fill, seed=suite.seed)  # fmt: skip


@dataclass(frozen=True)
class Served:
    """A run against a server someone else runs (``--endpoint``): what it said of itself. Its model's files are
    read from a local folder or the Hugging Face cache; the Hub is asked only for a model named by a Hub id
    (``org/name``), and for :data:`HUB_DEADLINE_S` at most: the run needs no Hub, and a Hub that does not answer
    (no network, no ``HF_HUB_OFFLINE``) held the first point back by minutes."""

    context_tokens: int | None = None  # the server's max_model_len for the model, where it says


HUB_DEADLINE_S = 5.0
HUB_SILENT = "the Hub did not answer"


def plan_traces(suite: Suite, target: str, plan: dict[int, list[Request] | str], dry_run: bool = False,
                served: Served | None = None) -> tuple[dict[str, TracePlan | str], list[str]]:  # fmt: skip
    """Each ``trace_content``'s plan (a dry run's line instead where a workload is not on disk), by content, and
    the notes on how the lengths were counted where the Hub was not asked or did not answer (``served``: a run
    against a running server, :class:`Served`)."""
    if not suite.trace:
        return {}, []
    trace = load_trace(suite.trace, window_s=parse_duration(suite.trace_window) if suite.trace_window else None)
    check_replay_length(trace, suite)
    missing = [suite.workloads[i].label for i, reqs in plan.items() if isinstance(reqs, str)]
    if missing:
        line = (f"a real run plans the content of {trace.name} ({len(trace.rows)} requests) from "
                f"{', '.join(missing)} once read")  # fmt: skip
        return {content: line for content in suite.trace_content}, []
    pool = [r for reqs in plan.values() for r in reqs]  # type: ignore[union-attr]
    labels = {suite.workloads[i].label: len(reqs) for i, reqs in plan.items()}  # type: ignore[arg-type]
    network, deadline = not dry_run, None
    if served is not None:
        from dflashbench.model_files import is_hub_id

        network, deadline = network and is_hub_id(target), HUB_DEADLINE_S
    notes: list[str] = []
    if served is not None and served.context_tokens and suite.trace_context_tokens is None:
        context = served.context_tokens  # what the server says, before any file
    else:
        context, where = context_tokens(suite, target, network=network, deadline_s=deadline, notes=notes)
        network = network and not where.startswith(HUB_SILENT)  # a Hub that did not answer is not asked again
    tokens = tokens_for(target, network=network, deadline_s=deadline, notes=notes)
    if served is not None and not network and isinstance(tokens, EstimatedTokens) and not dry_run:
        notes.append(f"the trace's lengths are counted by estimate: {target} is neither a local folder nor in the "
                     "Hugging Face cache, and a run against a running server asks the Hub only for a model named by "
                     "a Hub id (org/name; --model)")  # fmt: skip
    return {content: plan_content(trace, pool, tokens, settings_for(suite, content, context), labels)
            for content in suite.trace_content}, notes  # fmt: skip


def replay_length(span_s: float) -> str:
    """How long a replay lasts, as the dry run and a refusal say it: ``2 s``, ``1.5 h``, ``3.2e+19 years``."""
    from dflashbench.plan.plan_size import human_duration

    return f"{span_s / (365.25 * 86400):.2g} years" if span_s >= 1000 * 365.25 * 86400 else human_duration(span_s)


def check_replay_length(trace: Trace, suite: Suite) -> None:
    """A replay longer than :data:`MAX_REPLAY_S` at the suite's slowest speed is refused, naming its length, the row
    that makes it and the fix (a window, a faster speed), before anything is written."""
    slowest = min(suite.trace_speed)
    replay_s = trace.span_s / slowest
    if replay_s <= MAX_REPLAY_S:
        return
    last = trace.rows[-1]
    window = f" (--trace-window {fmt_duration(trace.window_s)})" if trace.window_s is not None else ""
    raise UserError(f"--trace {suite.trace}{window}: its replay would last {replay_length(replay_s)} at "
                    f"{slowest:g}×, its last request (row {last.index + 1} of the file) arriving {last.arrival_s:.4g} s "
                    f"after its first; a replay lasts {MAX_REPLAY_S / 86400:g} days at most: take its start with "
                    "--trace-window (e.g. --trace-window 10m), or a faster --trace-speed; a timestamp that far out "
                    "may be a mistake in the file")  # fmt: skip


def _within(deadline_s: float | None, what: str, notes: list[str] | None, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, given ``deadline_s`` at most where one is set (a daemon thread left to finish on its
    own: a Hub that takes the connection and never answers cannot be interrupted): its result, or
    :class:`TimeoutError` with a note in ``notes``."""
    if deadline_s is None:
        return fn(*args, **kwargs)
    import threading

    box: dict = {}

    def call() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=call, name="hub-read", daemon=True)
    worker.start()
    worker.join(deadline_s)
    if worker.is_alive():
        if notes is not None:
            notes.append(f"the Hugging Face Hub did not answer within {deadline_s:g} s for {what}: went on without it "
                         "(HF_HUB_OFFLINE=1 skips asking; a local folder or the cache is read at once)")  # fmt: skip
        raise TimeoutError(what)
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _target_dir(target: str) -> str:
    if target == EMBEDDED:
        from dflashbench.embedded import default_paths

        return str(default_paths().target)
    return target


def context_tokens(suite: Suite, target: str, network: bool, deadline_s: float | None = None,
                   notes: list[str] | None = None) -> tuple[int | None, str]:  # fmt: skip
    """The model's context length and where it came from: the suite's ``trace_context_tokens``, else the
    target's ``config.json`` ``max_position_embeddings``; ``(None, why)`` where neither says. ``deadline_s``: how
    long the Hub may take (:func:`_within`)."""
    if suite.trace_context_tokens is not None:
        return suite.trace_context_tokens, "trace_context_tokens"
    from dflashbench.model_files import read_json

    try:
        found = _within(deadline_s if network else None, f"{target}/config.json", notes, read_json,
                        _target_dir(target), network=network)  # fmt: skip
    except TimeoutError:
        return None, f"{HUB_SILENT} for config.json (set trace_context_tokens)"
    except UserError as exc:
        return None, f"config.json unreadable ({exc})"
    value = (found.data or {}).get("max_position_embeddings") if found is not None else None
    if isinstance(value, int) and value > 0:
        return value, f"{found.where} max_position_embeddings"
    return None, "the target's config.json does not say (set trace_context_tokens)"


def tokens_for(target: str, network: bool, deadline_s: float | None = None, notes: list[str] | None = None):
    """The target's tokenizer for counting (:class:`HfTokens`); an estimate where it cannot be read (a dry
    run of a model not downloaded, a random model, a Hub that did not answer within ``deadline_s``)."""
    where = _target_dir(target)
    if not network and not _local_or_cached(where):
        return EstimatedTokens()  # nothing to read without the Hub, and transformers would ask it all the same
    try:
        from transformers import AutoTokenizer  # imported here, so the deadline is the Hub's alone

        try:  # a local folder or the cache first: no network, whatever is allowed
            tok = AutoTokenizer.from_pretrained(where, local_files_only=True)
        except Exception:  # noqa: BLE001 - not there: the Hub, where allowed
            if not network:
                raise
            tok = _within(deadline_s, f"{target}'s tokenizer", notes, AutoTokenizer.from_pretrained, where)
    except Exception:  # noqa: BLE001 - not cached, gated, no tokenizer files, no answer: counted by estimate, said so
        return EstimatedTokens()
    return HfTokens(tok, "the embedded target" if target == EMBEDDED or Path(where) == Path(_target_dir(EMBEDDED))
                    else Path(target).name if Path(target).is_dir() else target)


def _local_or_cached(where: str) -> bool:
    """Whether ``where`` is a local folder, or a Hub id whose tokenizer is in the Hugging Face cache (read from the
    cache's files; nothing is asked of the Hub)."""
    if Path(where).expanduser().is_dir():
        return True
    from dflashbench.model_files import is_hub_id

    if not is_hub_id(where):
        return False
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(where, "tokenizer_config.json"), str)


def dry_run_lines(traces: dict[str, TracePlan | str], suite: Suite) -> list[str]:
    """What a dry run says about the trace replay: the window, speeds, content, lengths, clipping."""
    if not suite.trace:
        return []
    speeds = ", ".join(f"{s:g}×" for s in suite.trace_speed)
    lines = [f"trace: {suite.trace}" + (f", first {fmt_duration(parse_duration(suite.trace_window))}"
                                          if suite.trace_window else ", whole file") + f", at {speeds}; input × "
             f"{suite.trace_input_scale:g}, output × {suite.trace_output_scale:g}, fill {suite.trace_fill}, over the "
             f"context: {suite.trace_over_context}, ignore_eos {'on' if suite.trace_ignore_eos else 'off'}"]  # fmt: skip
    for content, plan in traces.items():
        if isinstance(plan, str):
            lines.append(f"  {content}: {plan}")
            continue
        f = plan.facts()
        span = plan.requests[-1].metadata["trace"]["arrival_s"] if plan.requests else 0.0
        lines.append(f"  {content}: {f['sent']} of {f['rows']} requests sent ({f['skipped']} skipped, "
                     f"{f['clipped_input']} inputs and {f['clipped_output']} outputs clipped to the context of "
                     f"{f['context_tokens'] or 'unknown'} tokens), {sum(r.max_tokens for r in plan.requests):,} output "
                     f"tokens a point, arrivals over {replay_length(span)} at 1×; lengths counted {f['counted']}; "
                     f"categories {json.dumps(f['categories'])}")  # fmt: skip
    return lines


def trace_sizes(traces: dict[str, TracePlan | str]) -> dict[str, TraceSize]:
    """What each content's trace point sends, for the dry run's size and duration (planned contents only)."""
    return {content: TraceSize(len(p.requests), sum(r.max_tokens for r in p.requests),
                               p.requests[-1].metadata["trace"]["arrival_s"], p.requests[-1].max_tokens)
            for content, p in traces.items() if not isinstance(p, str) and p.requests}  # fmt: skip


def parse_scale(text: str | float) -> dict[str, float]:
    """``--trace-scale``: ``0.02`` (input lengths) or ``input=0.02,output=0.5`` -> the suite's scale keys."""
    if isinstance(text, int | float):
        return {"trace_input_scale": float(text)}
    out: dict[str, float] = {}
    for part in (p.strip() for p in str(text).split(",") if p.strip()):
        key, sep, value = part.rpartition("=")
        key = key.strip() if sep else "input"
        if key not in ("input", "output"):
            raise UserError(f"--trace-scale {text}: write a factor for the input lengths (0.02), or input=X,output=Y")
        try:
            factor = float(value)
        except ValueError:
            raise UserError(f"--trace-scale {text}: {value!r} is not a number") from None
        if not 0 < factor <= 1000:
            raise UserError(f"--trace-scale {text}: a scale is above 0 (and at most 1000)")
        out[f"trace_{key}_scale"] = factor
    if not out:
        raise UserError(f"--trace-scale {text}: write a factor for the input lengths (0.02), or input=X,output=Y")
    return out
