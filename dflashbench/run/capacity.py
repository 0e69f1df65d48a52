"""The truth at launch: each launched server's own KV report, read from its log once it is ready and before its first
point, recorded beside the memory plan's figures, and the rule that keeps every method's KV capacity equal.

The rule (docs/memory.md, "At launch"):

1. The servers start tightest-first: the method whose server the plan says holds the fewest requests
   (:func:`launch_order`); one method at a time or interleaved alike.
2. Each server's real capacity, in requests of the suite's longest request, is read from what the engine says
   (:func:`real_capacity`) and recorded in the manifest (``servers.<method>.kv``) beside the plan's figures.
3. The first server's real capacity is the run's common capacity. Every later server starts capped to it in the
   engine's unit of KV size (vLLM ``--kv-cache-memory-bytes``, SGLang ``--max-total-tokens``, TensorRT-LLM
   ``kv_cache_config.max_tokens``; :func:`dflashbench.plan.memory.cap_for`), not to the plan's figure.
4. A server that holds fewer requests than the suite's top concurrency is refused before its first point: the sweep
   stops, says so with the fix, and the manifest keeps both figures (a resume after the fix runs what is left).
5. A later server whose real capacity is more than 5 % below the common one (the plan thought it roomier than it is)
   still holds the top concurrency, or rule 4 stops it; it runs, and the manifest and the report say the capacities
   differ (``capacity.unequal``), since the servers before it have already run.

A model without a memory plan (one the registry does not know, the embedded pair) has no tightest server to start
first: rules 2 and 4 apply, its servers' capacities are recorded and none is capped to another's.
"""

from __future__ import annotations

import dataclasses
import math

from dflashbench.backends import get_backend
from dflashbench.backends.kv_report import KvReport, loaded_problem, parse
from dflashbench.errors import UserError
from dflashbench.plan.grid import MethodLaunch, SweepContext, relaunch
from dflashbench.plan.memory import (
    CAP_FLAGS,
    GIB,
    MIB,
    MemoryPlan,
    ServerMemory,
    cap_args,
    cap_for,
    round_to_block,
)
from dflashbench.plan.preflight import request_tokens, top_load
from dflashbench.types import Method

EQUAL_WITHIN = 0.05  # two methods' real capacities may differ by this share of the common one


class CapacityRefused(UserError):
    """A launched server holds fewer requests than the suite's top concurrency: stop before its first point."""


def launch_order(ctx: SweepContext) -> list[Method]:
    """The suite's methods, the plan's tightest server first (ties keep the suite's order)."""
    plan = ctx.pair.memory
    methods = list(ctx.suite.methods)
    if plan is None or not ctx.launches:
        return methods
    return sorted(methods, key=lambda m: plan.servers[m].requests if m in plan.servers else math.inf)


def tokens_per_request(ctx: SweepContext, method: Method) -> int:
    """The suite's longest request in the engine's pool: prompt + max_tokens + verify slots, in whole KV blocks."""
    plan = ctx.pair.memory
    if plan is not None and method in plan.servers:
        return plan.servers[method].request_tokens
    tokens, _ = request_tokens(ctx.suite, ctx.plan)
    launch = ctx.launches.get(method)
    k = launch.spec.num_speculative_tokens if launch is not None else None
    return round_to_block(ctx.backend_name, tokens + ((k or 0) + 1 if method is not Method.AR else 0))


def real_capacity(report: KvReport, server: ServerMemory | None, tokens: int) -> tuple[int | None, str]:
    """Requests of ``tokens`` the engine's reported KV holds at once, and how that was counted. vLLM: its KV memory
    over the plan's bytes a request (target and draft, whole blocks, sliding windows and states), since its token
    figure is defined differently by release (num_blocks // groups x block in 0.20.0, max concurrency x max_model_len
    in 0.33.0) and, for sliding windows, counts the worst case; without a plan, its tokens over the request's.
    SGLang and TensorRT-LLM: the pool's tokens over the request's (their draft pools are sized alike), SGLang's also
    no more than its own max_running_requests."""
    if report.engine == "vllm" and report.kv_gib is not None and server is not None and server.request_mib > 0:
        held = int(report.kv_gib * GIB // (server.request_mib * MIB))
        return held, f"{report.kv_gib:.2f} GiB reported / the plan's {server.request_mib:,.1f} MiB a request"
    if report.kv_tokens is None or tokens <= 0:
        return None, "the engine reported no KV size"
    held = report.kv_tokens // tokens
    how = f"{report.kv_tokens:,} tokens reported / {tokens:,} tokens a request"
    if report.max_running_requests is not None and report.max_running_requests < held:
        held, how = report.max_running_requests, how + f", bound by max_running_requests {report.max_running_requests}"
    return held, how


def plan_figures(plan: MemoryPlan | None, method: Method) -> dict:
    if plan is None or method not in plan.servers:
        return {}
    s = plan.servers[method]
    return {"kv_gib": round(s.kv_gib, 3), "requests": s.requests, "request_mib": round(s.request_mib, 2),
            "request_tokens": s.request_tokens, **({"cap": plan.caps[method]} if method in plan.caps else {})}  # fmt: skip


def capped_launch(ctx: SweepContext, method: Method, launch: MethodLaunch) -> tuple[MethodLaunch, str | None]:
    """``launch`` capped to the run's common capacity (rule 3), once a first server has set it; as planned before
    that, for the first server, and where the plan has no figures for the method."""
    common = ctx.capacity.get("common")
    plan = ctx.pair.memory
    if common is None or ctx.capacity.get("first") == method.value or plan is None or method not in plan.servers:
        return launch, None
    cap = cap_for(ctx.backend_name, common, plan.servers[method])
    spec = launch.spec
    flag = CAP_FLAGS.get(ctx.backend_name)
    args = list(spec.extra_args)
    if flag is not None and flag in args:  # the plan's cap out, the real one in
        i = args.index(flag)
        del args[i:i + 2]
    first, last, config = cap_args(ctx.backend_name, cap)
    engine_config = {k: v for k, v in spec.engine_config.items() if k != "kv_cache_config"}
    kv_config = {**spec.engine_config.get("kv_cache_config", {}), **config.get("kv_cache_config", {})}
    spec = dataclasses.replace(spec, extra_args=(*first, *args, *last),
                               engine_config={**engine_config, **({"kv_cache_config": kv_config} if kv_config else {})})  # fmt: skip
    ctx.capacity.setdefault("caps", {})[method.value] = cap
    note = (f"{method.value}: capped to the {ctx.capacity['first']} server's real capacity, {common} requests "
            f"({'--kv-cache-memory-bytes' if ctx.backend_name == 'vllm' else 'tokens'} {cap:,}), not the plan's "
            f"{plan.capacity}")  # fmt: skip
    return relaunch(spec, get_backend(ctx.backend_name)), note


def after_ready(ctx: SweepContext, method: Method, log_text: str) -> tuple[dict, list[str], str | None]:
    """Read a ready server's KV report (rule 2), set or check the common capacity (rules 3-5): the record the
    manifest keeps for it, lines to print, and the refusal (rule 4) the caller raises once the record is kept."""
    report = parse(ctx.backend_name, log_text)
    if report is None:
        return {}, [], None
    cap = ctx.capacity.get("caps", {}).get(method.value)
    if ctx.backend_name == "vllm" and cap is not None and report.kv_gib is not None and \
            abs(report.kv_gib - cap / GIB) <= 0.005:  # fmt: skip
        report = dataclasses.replace(report, kv_gib=cap / GIB)  # the bytes it was given, not its 2-decimal print
    plan = ctx.pair.memory
    server = plan.servers.get(method) if plan is not None else None
    tokens = tokens_per_request(ctx, method)
    held, how = real_capacity(report, server, tokens)
    record = {"engine": report.record(), "plan": plan_figures(plan, method), "capacity_requests": held,
              "counted": how, "tokens_per_request": tokens}  # fmt: skip
    lines = []
    if report.runner:
        lines.append(f"{method.value}: vLLM model runner {report.runner} ({report.runner_line})")
    problem = loaded_problem(method.value, report)
    if problem:  # what ran is not what was asked: said and kept beside the engine's figures
        record["loaded_problem"] = problem
        lines.append(f"warning: {problem}")
    if held is None:
        lines.append(f"note: {method.value}: {how}; its capacity is not checked")
        return record, lines, None
    planned = f", the plan {server.requests}" if server is not None else ""
    lines.append(f"{method.value}: the engine holds {held} requests of {tokens:,} tokens ({how}){planned}")
    top = top_load(ctx.suite)
    common = ctx.capacity.get("common")
    if common is None:
        ctx.capacity.update(common=held, first=method.value)
        if server is None:  # no plan (a model the registry does not know): no tightest server to start first
            lines.append("note: no memory plan for this model: each server's capacity is recorded, none is capped "
                         "to another's")  # fmt: skip
    elif server is not None and held < (1 - EQUAL_WITHIN) * common:
        ctx.capacity.setdefault("unequal", {})[method.value] = held
        lines.append(f"warning: {method.value} holds {held} requests, more than {EQUAL_WITHIN:.0%} below the "
                     f"{ctx.capacity['first']} server's {common}: the capacities differ (recorded; the servers before "
                     "it have run)")  # fmt: skip
    refusal = None
    if top and held < top:
        refusal = (f"the {ctx.backend_name} {method.value} server holds {held} requests of {tokens:,} tokens ({how}), "
                   f"fewer than the top concurrency {top}{planned}: no point of it was measured. Fix: --concurrency up "
                   f"to {held}, or more GPUs (--tp, --gpu), or shorter requests")  # fmt: skip
    return record, lines, refusal


def summary(ctx: SweepContext) -> dict:
    """What the manifest keeps of the run's capacities (``capacity``): the common one, which server set it, the caps
    the later servers got (engine units), any server more than :data:`EQUAL_WITHIN` below the common one."""
    return {k: v for k, v in ctx.capacity.items() if k in ("common", "first", "unequal", "caps")}
