"""What a plan was made for, in lines a dry run prints: the GPUs and their architecture, tp, why each
architecture-bound recipe flag is in or out, the version-bound flags and the environment each server gets, the
DFlash block size and where it came from, gated repositories and engine builds a target needs. Pure functions of a
resolved :class:`~dflashbench.plan.grid.SweepContext`; nothing here reads a file or the network."""

from __future__ import annotations

from dflashbench.methods import record
from dflashbench.plan import arch_flags
from dflashbench.plan.grid import SweepContext
from dflashbench.types import Method


def plan_lines(ctx: SweepContext, verbose: bool = True) -> list[str]:
    """Every line below, in the order a reader needs them; none for a server someone else runs. Without
    ``verbose``: the GPUs, tp, the memory plan in a line, the block size and what a real run checks first (the
    budget terms, flag sources and environments under ``--verbose``)."""
    if ctx.endpoint:
        return []
    if not verbose:
        block = [line.split(": ")[0] + " (--verbose: its address)" if ", from " in line and ": " in line else line
                 for line in block_size_lines(ctx)]  # fmt: skip
        # the backend's notes stay on the short screen: each changes what the run measures (a drafter's layers
        # run as full attention, a runner the method needs); the environments wait for --verbose
        return [*gpu_lines(ctx), *memory_summary(ctx), *launch_lines(ctx, environments=False), *block,
                *draft_lines(ctx), *access_lines(ctx)]
    return [*gpu_lines(ctx), *memory_lines(ctx), *arch_lines(ctx), *method_lines(ctx), *launch_lines(ctx),
            *block_size_lines(ctx), *draft_lines(ctx, verbose=True), *access_lines(ctx)]


def draft_lines(ctx: SweepContext, verbose: bool = False) -> list[str]:
    from dflashbench.plan.draft_lengths import plan_lines as lengths

    return lengths(ctx, verbose)


def memory_summary(ctx: SweepContext) -> list[str]:
    """The memory plan in a line (and its risk or refusal): what every server holds, the tightest, the caps."""
    m = ctx.pair.memory
    if m is None:
        return []
    tight = m.tightest()
    caps = f"; {', '.join(x.value for x in m.caps)} capped to {tight.value if tight else '-'}'s" if m.caps else ""
    dcp = f", decode context parallel {m.dcp}" if m.dcp > 1 else ""
    dcp += (f" x pp {m.pp}" if m.pp > 1 else "") + (f", each server across {m.nodes} nodes" if m.nodes > 1 else "")
    held = f"{m.margin:.2f}x c={m.concurrency}" if m.concurrency and m.margin is not None else "no closed-loop load"
    out = [f"memory ({m.engine}, tp {m.tp}{dcp}): {m.capacity:,} requests of {m.tokens:,} tokens, {held}{caps}"]
    if m.smaller:
        out.append(f"  {m.smaller}")
    if m.risk:
        out.append(f"  at risk: {m.risk}")
    return out + [f"  refused: {p}" for p in m.problems]


def method_lines(ctx: SweepContext) -> list[str]:
    """Each speculative method's engine name, first release and where both were read (its method record), the
    defaults it takes and theirs; the recipe flags' own sources are the registry's (dflashbench models show)."""
    out = []
    for method in ctx.launches:
        rec = record(method)
        if not rec.speculative or not rec.runs_on(ctx.backend_name):
            continue
        how = rec.on(ctx.backend_name)
        since = f"{ctx.backend_name} {how.since}+" if how.since else "no first release read"
        out.append(f"{method.value}: {ctx.backend_name} calls it {how.name} ({since}): {how.source}")
        if how.defaults and not ctx.suite.num_speculative_tokens.get(method):
            values = ", ".join(f"{k} {v}" for k, v in how.defaults.items())
            out.append(f"{method.value}: defaults {values}: {how.defaults_source}")
        if how.note:
            out.append(f"{method.value}: {how.note}")
    entry = ctx.pair.entry
    if entry is not None and entry.recipes.get(ctx.backend_name):  # type: ignore[call-overload]
        out.append(f"recipe flags ({ctx.backend_name}): {entry.recipes[ctx.backend_name].source}")  # type: ignore[index]
    return out


def memory_lines(ctx: SweepContext) -> list[str]:
    """Each method's server's weights, memory share, KV cache and capacity in requests (dflashbench.plan.memory)."""
    return ctx.pair.memory.lines() if ctx.pair.memory is not None else []


def gpu_lines(ctx: SweepContext) -> list[str]:
    gpu, why = ctx.pair.gpu, ctx.pair.tp_why
    if gpu is None:
        return []
    return [f"GPUs: {gpu.describe()}", f"tp {ctx.suite.tp or 1}" + (f": {why}" if why else "")]


def arch_lines(ctx: SweepContext) -> list[str]:
    arch = ctx.pair.gpu.arch if ctx.pair.gpu else None
    lines = arch_flags.plan_lines(ctx.pair.entry, ctx.backend_name, arch)
    return [f"{ctx.backend_name} architecture-bound flags: {line}" for line in lines]


def launch_lines(ctx: SweepContext, environments: bool = True) -> list[str]:
    """The environment each server gets (``environments``) and the backend's notes on version-bound flags, one line
    for the methods that share it."""
    said: dict[str, list[str]] = {}
    for method, launch in ctx.launches.items():
        env = " ".join(f"{k}={v}" for k, v in launch.plan.env.items())
        for line in ([f"environment {env}"] if env and environments else []) + list(launch.plan.notes):
            said.setdefault(line, []).append(method.value)
    return [f"{', '.join(methods)}: {line}" for line, methods in said.items()]


def block_size_lines(ctx: SweepContext) -> list[str]:
    method = next((m for m in (Method.DFLASH, Method.DFLASH2) if m in ctx.launches), None)
    if method is None:
        return []
    explicit = ctx.suite.num_speculative_tokens.get(method)
    if explicit is not None:
        return [f"DFlash block size {explicit + 1}: from num_speculative_tokens.{method.value} = {explicit} in the suite"]
    block, source = ctx.pair.dflash_block_size, ctx.pair.dflash_block_source
    if block is not None:
        source = source if source is None or len(source) <= 160 else source[:159] + "…"
        return [f"DFlash block {block} ({block - 1} draft tokens a step), from {source}"]
    unknown = {"vllm": "vLLM drafts 15 tokens (the released drafters' block of 16)",
               "sglang": "SGLang reads it from the drafter's config.json at start-up",
               "trtllm": "TensorRT-LLM reads it from the drafter's checkpoint (max_draft_len left out)"}  # fmt: skip
    how = unknown.get(ctx.backend_name, "")
    return ["DFlash block size unknown here (no registry value, no local or cached config.json); a real run reads "
            "the drafter's config.json first" + (f"; else {how}" if how else "")]  # fmt: skip


def access_lines(ctx: SweepContext) -> list[str]:
    """Gated repositories a real run checks first, and the engine build a target needs."""
    entry, out = ctx.pair.entry, []
    if entry is None:
        return out
    if entry.gated and ctx.pair.target == entry.hf_id:
        out.append(f"gated: {entry.hf_id} (the target); a real run checks your Hugging Face token can read it before any "
                   f"server starts (accept its terms at https://huggingface.co/{entry.hf_id})")  # fmt: skip
    heads = {Method.DFLASH: entry.dflash, Method.DFLASH2: entry.dflash2, Method.EAGLE3: entry.eagle3}
    for method, head in heads.items():
        if head is not None and head.gated and ctx.pair.drafts.get(method) == head.id:
            out.append(f"gated: {head.id}; a real run checks your Hugging Face token can read it before any server "
                       f"starts (accept its terms at https://huggingface.co/{head.id})")  # fmt: skip
    build = entry.engine_builds.get(ctx.backend_name)  # type: ignore[call-overload]
    if build and Method.DFLASH in ctx.launches:
        out.append(f"engine build: no {ctx.backend_name} release serves {entry.hf_id} with DFlash yet; needs {build}")
    return out
