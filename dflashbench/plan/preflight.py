"""The preflight: a registry model's memory plan for a suite on the GPUs planned for, the tensor-parallel size it
chooses, and the refusal, naming its fix, when the suite's top concurrency cannot be held.

:mod:`dflashbench.plan.memory` does the arithmetic; this module gathers its inputs from the model registry (weights,
KV geometry, the drafts' sizes and layers, each with its source) and the suite (methods, the longest workload's
prompt + max_tokens, the top concurrency, the engine's memory share and the flags its budget depends on), so the dry
run and a launched sweep plan the same way, offline. tp is the smallest power of two at which every method's server
holds :data:`~dflashbench.plan.memory.HEADROOM` times the top concurrency, at most one node's GPUs (and the ``--gpu``
count or the GPUs NVML sees); where none does, the smallest that holds the top concurrency itself, said to be at
risk; where none holds even that, the plan is refused with its fix. No plan is wider than one node, since every
method's server is one process on one machine.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from dflashbench.errors import UserError
from dflashbench.methods import record
from dflashbench.plan import budget_terms, memory
from dflashbench.plan.gpus import GPU_MODELS, GpuPlan, gpus_per_node
from dflashbench.plan.memory import MemoryPlan, ServerNeeds, Share
from dflashbench.plan.models import KvFacts, ModelEntry, weights_gib
from dflashbench.plan.suites import Suite
from dflashbench.types import Method, Request

# A prompt's tokens where its text was not read (a Hub dataset on a dry run): an assumption the plan says out loud.
ASSUMED_PROMPT_TOKENS = 2048
# Characters per token when the prompts were read: OpenAI's rule of thumb is about 4 characters of English per token;
# 3 leaves room for code and other languages, so the plan errs toward more tokens.
CHARS_PER_TOKEN = 3
# SPEED-Bench throughput configs pad every prompt to their nominal length (dflashbench.workloads.speed_bench)
THROUGHPUT_TOKENS = {"throughput_1k": 1024, "throughput_2k": 2048, "throughput_8k": 8192, "throughput_16k": 16384,
                     "throughput_32k": 32768}  # fmt: skip
ENGINES = ("vllm", "sglang", "trtllm")


# --- what a request holds -----------------------------------------------------------------------------------------


def request_tokens(suite: Suite, plan: dict[int, list[Request] | str] | None = None) -> tuple[int, str]:
    """The most tokens one request of the suite holds (prompt + every turn's max_tokens), and how that was found:
    from the prompts read, or an assumed prompt length for a workload not read (a Hub dataset on a dry run)."""
    best, why = 0, ""
    for i, spec in enumerate(suite.workloads):
        requests = (plan or {}).get(i)
        if isinstance(requests, list) and requests:
            longest = max(requests, key=lambda r: sum(len(m.get("content", "")) for m in r.messages)
                          + sum(len(t) for t in r.followup_turns))  # fmt: skip
            chars = sum(len(m.get("content", "")) for m in longest.messages) + sum(map(len, longest.followup_turns))
            turns = 1 + max(len(r.followup_turns) for r in requests)
            tokens = math.ceil(chars / CHARS_PER_TOKEN) + turns * spec.max_tokens
            said = (f"{spec.label}: its longest prompt, {chars:,} characters at {CHARS_PER_TOKEN} per token, + "
                    f"{turns} x max_tokens {spec.max_tokens}")  # fmt: skip
        else:
            prompt = THROUGHPUT_TOKENS.get(spec.config or "", ASSUMED_PROMPT_TOKENS)
            tokens = prompt + spec.max_tokens
            said = (f"{spec.label}: max_tokens {spec.max_tokens} + a prompt of "
                    + (f"{prompt} tokens (the config's length)" if spec.config in THROUGHPUT_TOKENS else
                       f"{prompt} tokens assumed (not read on a dry run)"))  # fmt: skip
        if tokens > best:
            best, why = tokens, said
    return best, why


# --- what each method's server loads ------------------------------------------------------------------------------


def _draft_kv(target: KvFacts, layers: int, source: str) -> KvFacts:
    """A draft's KV counted as ``layers`` of the target's full-attention layers (what SGLang assumes of EAGLE heads,
    and the plan of a drafter the registry does not describe)."""
    return KvFacts(full_layers=layers, kv_heads=target.kv_heads, head_dim=target.head_dim,
                   latent_dim=target.latent_dim, source=source)  # fmt: skip


def server_needs(entry: ModelEntry, suite: Suite, drafts: dict[Method, str], engine: str,
                 block_size: int | None, recipe_args=lambda m: [], recipe_config: dict | None = None,
                 release: str | None = None) -> dict[Method, ServerNeeds]:  # fmt: skip
    """Each method's :class:`~dflashbench.plan.memory.ServerNeeds` from the registry (what the registry lacks is
    assumed, and the plan says so), with the engine settings its flags give (``recipe_args(method)``, then the
    suite's own)."""
    assert entry.kv is not None
    target_gib = weights_gib(entry)
    mxfp4 = budget_terms.Mxfp4Moe(**entry.mxfp4.model_dump(exclude={"source"})) if entry.mxfp4 else None
    experts = entry.moe_experts
    moe_shape = budget_terms.MoeShape(experts.experts_per_token, experts.intermediate_size, experts.hidden_size) \
        if experts is not None else None  # fmt: skip
    config = {**(recipe_config or {}), **suite.engine_config}
    top = top_load(suite)

    def common(method: Method) -> dict:
        args = (*recipe_args(method), *suite.args_for(method))
        return dict(mxfp4=mxfp4, vocab_size=entry.vocab_size, moe=entry.active_params_b is not None, moe_shape=moe_shape,
                    settings=budget_terms.settings(engine, args, config, {}, top, release))  # fmt: skip

    out: dict[Method, ServerNeeds] = {}
    for arm in suite.methods:  # an arm (dflash-k3) is its method with its own draft length: sized as its method
        method = arm.base
        if method is Method.AR:
            out[arm] = ServerNeeds(arm, entry.kv, target_gib, **common(method))
            continue
        assumed: list[str] = []
        schedule = suite.draft_schedule(arm)  # the most it verifies: its schedule's longest K
        explicit = schedule.max_k if schedule is not None else suite.draft_tokens(arm)
        if not record(method).needs_draft:
            # MTP drafts with layers already in the target's checkpoint (loaded with its weights), the draft-free
            # methods with no network at all: the target's weights and KV, k + 1 tokens verified per step.
            k = explicit if explicit is not None else (
                (entry.mtp.num_speculative_tokens if method is Method.MTP and entry.mtp else None)
                or record(method).on(engine).defaults.get("num_speculative_tokens", 1) if record(method).runs_on(engine)
                else 1)  # fmt: skip
            if method is Method.MTP:
                assumed.append("the MTP layers' weights and KV within the target's (not counted apart)")
            out[arm] = ServerNeeds(arm, entry.kv, target_gib, None, k + 1, k, tuple(assumed))
            continue
        if method in (Method.DFLASH, Method.DFLASH2):
            registered = entry.block_drafter(method)
            own = registered is not None and drafts.get(method) == registered.id
            draft = registered if own else None
            k = explicit if explicit is not None else (block_size - 1 if block_size else 15)
            if explicit is None and not block_size:
                assumed.append("DFlash block size 16 (not in the registry; the engine reads the drafter's own)")
            verify = k + 1
        else:
            head = entry.eagle3_for(engine)
            own = head is not None and drafts.get(method) == head.id
            draft = head if own else None  # type: ignore[assignment]
            k = explicit if explicit is not None else ((head.num_speculative_tokens if own and head else None) or 3)
            verify = k + 1
        draft_gib = draft.weights_gib if draft is not None else None
        if draft_gib is None:
            assumed.append(f"the {method.value} draft's weights as 0 GiB (not in the model registry)")
        draft_kv = draft.kv if draft is not None else None
        if draft_kv is None:
            layers = 1 if method is Method.EAGLE3 else memory.ASSUMED_DRAFT_LAYERS
            why = ("one layer of the target's KV geometry, as SGLang sizes an EAGLE head's pool "
                   "(pool_configurator.py DefaultPoolConfigurator)" if method is Method.EAGLE3 else
                   f"{layers} layers of the target's KV geometry (the paper's drafters; not in the registry)")  # fmt: skip
            draft_kv = _draft_kv(entry.kv, layers, why)
            assumed.append(f"the {method.value} draft's KV as {why}")
        out[arm] = ServerNeeds(arm, entry.kv, target_gib + (draft_gib or 0.0), draft_kv, verify, k,
                               tuple(assumed), draft_gib=draft_gib or 0.0, **common(method))  # fmt: skip
    return out


def top_load(suite: Suite) -> int:
    """The most requests a method's server must hold at once: the top concurrency, or the in-flight cap of the
    rate and trace points (``max_concurrency``); 0 where neither bounds it (a trace alone without a cap: how many
    of its requests overlap is known only once it runs, so the plan checks the weights alone)."""
    return max(suite.concurrency, default=suite.max_concurrency or 0)


def shares(engine: str, suite: Suite, recipe_args, recipe_config: dict, gpu_gib: float, tp: int) -> dict[Method, Share]:
    """Each method's memory share: the recipe's and the suite's flags, else the engine's default."""
    top = top_load(suite)
    return {m: memory.engine_share(engine, (*recipe_args(m), *suite.args_for(m)),
                                   {**recipe_config, **suite.engine_config}, gpu_gib, tp, top)
            for m in suite.methods}  # fmt: skip


# --- the plan at one tp, and the tp that fits ----------------------------------------------------------------------


def plan_at(entry: ModelEntry, suite: Suite, engine: str, drafts: dict[Method, str], block_size: int | None,
            gpu_label: str, gpu_gib: float, tp: int, recipe_args, recipe_config: dict,
            tokens: tuple[int, str], release: str | None = None, dcp: int = 1, pp: int = 1,
            nodes: int = 1) -> MemoryPlan:  # fmt: skip
    needs = server_needs(entry, suite, drafts, engine, block_size, recipe_args, recipe_config, release)
    needs = {m: memory.pipeline_stage(n, pp) for m, n in needs.items()}
    plan = memory.plan_servers(engine, needs, shares(engine, suite, recipe_args, recipe_config, gpu_gib, tp),
                               gpu_label, gpu_gib, tp, tokens[0], tokens[1], top_load(suite), release, dcp)  # fmt: skip
    return dataclasses.replace(plan, pp=pp, nodes=nodes) if pp > 1 or nodes > 1 else plan


# How each engine lays a server across nodes (issue #67): vLLM tp over one node's GPUs and a pipeline stage per node,
# its own advice (backends/vllm.py nodes_args); SGLang tp over every GPU of every node, its multi-node example
# (backends/sglang.py nodes_args). TensorRT-LLM runs across nodes under MPI, which dflashbench does not launch.
ACROSS_NODES = {"vllm": "pp", "sglang": "tp"}


def layouts_across(engine: str, per_node: int, nodes: int) -> list[tuple[int, int, int]]:
    """(tp, pp, nodes) of a server on 2, 4, ... of ``nodes`` machines of ``per_node`` GPUs, as ``engine`` lays it."""
    how = ACROSS_NODES.get(engine)
    if how is None:
        return []
    out = []
    for n in powers_of_two(nodes)[1:]:
        out.append((per_node, n, n) if how == "pp" else (per_node * n, 1, n))
    return out


def dcp_sizes(entry: ModelEntry, engine: str, tp: int) -> list[int]:
    """vLLM's decode context parallel sizes the plan tries for an MLA target at ``tp``: none, then the recipes' own,
    the largest it can take, tp / its KV heads (one latent: tp; "TP8+DCP8", "Max DCP = tensor-parallel-size ÷
    num_kv_heads": :data:`dflashbench.plan.memory.DCP_SOURCE`); [1] for anything else."""
    if engine != "vllm" or entry.kv is None or entry.kv.latent_dim is None:
        return [1]
    largest = tp // max(entry.kv.kv_heads, 1)
    return [1, largest] if largest > 1 and tp % largest == 0 else [1]


def powers_of_two(limit: int) -> list[int]:
    return [1 << i for i in range(int(math.log2(max(limit, 1))) + 1)]


def choose(entry: ModelEntry, suite: Suite, engine: str, drafts: dict[Method, str], block_size: int | None,
           gpus: GpuPlan, recipe_args, recipe_config: dict,
           plan: dict[int, list[Request] | str] | None = None, release: str | None = None) -> tuple[int, MemoryPlan]:  # fmt: skip
    """tp and the memory plan at it: the suite's tp, or the smallest power of two within one node (and the GPUs
    there are) where every method holds HEADROOM x the top concurrency, else the smallest where it holds the top
    concurrency (at risk); a plan that holds it nowhere carries its refusal."""
    tokens = request_tokens(suite, plan)
    gpu_gib = gpus.memory_gib or GPU_MODELS["h100"].memory_gib
    node = gpus_per_node(gpus.label)
    limit = min(node, gpus.count) if gpus.count else node

    def at(tp: int, label: str = gpus.label, gib: float = gpu_gib, dcp: int = 1, pp: int = 1,
           nodes: int = 1) -> MemoryPlan:  # fmt: skip
        return plan_at(entry, suite, engine, drafts, block_size, label, gib, tp, recipe_args, recipe_config, tokens,
                       release, dcp, pp, nodes)  # fmt: skip

    top = top_load(suite)
    # each tp without decode context parallelism first, then (vLLM, MLA) with it, smallest first: the recipes' own
    # order (TP8, then TP8+DCP8 where the KV cache is short); then, on a cluster's nodes (--gpu 2x8xh100), a server
    # across 2, 4, ... of them, laid as the engine lays it (ACROSS_NODES)
    across = layouts_across(engine, limit, gpus.nodes)
    if suite.tp is not None:
        tps, across = [suite.tp], [la for la in across if la[0] * la[1] == suite.tp][:1] if suite.tp > limit else []
        tps = [] if across else tps
    else:
        tps = powers_of_two(limit)
    candidates = [at(tp, dcp=d) for tp in tps for d in dcp_sizes(entry, engine, tp)]
    candidates += [at(tp, dcp=d, pp=pp, nodes=n) for tp, pp, n in across for d in dcp_sizes(entry, engine, tp)]
    roomy = [p for p in candidates if p.capacity >= memory.HEADROOM * top]
    holds = [p for p in candidates if p.capacity >= top]
    plain = [p for p in candidates if p.dcp == 1]
    best = (roomy or holds or plain[-1:])[0]
    chosen = best.tp
    problems = list(refusals(best, entry, suite, engine, gpus, node, limit, lambda label, gib, tp: at(tp, label, gib)))
    notes = list(best.notes)
    risk = best.risk
    if risk and suite.tp is not None:
        risk += f"; --tp {suite.tp} is the suite's"
    elif risk:
        risk += f"; no tp up to {limit} on {gpus.label} gives {memory.HEADROOM}x"
    if gpus.origin == "assumed":
        notes.append(f"no GPU visible here: planned for {gpus.label} GPUs; pass --gpu NAME (e.g. 8xh200) to plan "
                     "for others")  # fmt: skip
    if best.dcp > 1:
        notes.append(f"vLLM's decode context parallelism {best.dcp} (--decode-context-parallel-size {best.dcp}, every "
                     f"method): the MLA KV cache sharded over {best.dcp} of the tp ranks holds {best.dcp}x the tokens "
                     f"({memory.DCP_SOURCE})")  # fmt: skip
    if best.nodes > 1:
        notes.append(f"across {best.nodes} nodes: {engine} lays tp {best.tp}" + (f" x pp {best.pp}" if best.pp > 1
                     else "") + f" over {best.nodes} x {limit} {gpus.label}, no single node holding "
                     f"{memory.HEADROOM}x c={top}; each node runs its own command (leader and followers), launched "
                     "by the cluster's scheduler (--cluster slurm or k8s, docs/cluster.md)")  # fmt: skip
    return chosen, MemoryPlan(best.engine, best.gpu_label, best.gpu_gib, best.tp, best.tokens, best.tokens_why,
                              best.concurrency, best.servers, tuple(problems), tuple(notes), best.caps,
                              risk if not problems else "", best.dcp, smaller_tp(candidates, best, top),
                              best.pp, best.nodes)  # fmt: skip


def smaller_tp(candidates: list[MemoryPlan], best: MemoryPlan, top: int) -> str:
    """Why the next smaller tp was passed over, where its tightest server was bound by more than KV bytes (SGLang's
    state slots, one per draft token in a hybrid model): the plan says so, or tp 8 against a recipe's 2 reads as
    a mistake."""
    below = [p for p in candidates if p.tp < best.tp and p.dcp == 1]
    if not below:
        return ""
    prev = below[-1]
    tight = prev.tightest()
    server = prev.servers.get(tight) if tight else None
    if server is None or not server.limit:
        return ""
    return (f"tp {prev.tp} would hold {prev.capacity} ({tight.value}'s server bound by SGLang's "
            f"{server.limit.split(';')[0]}), under {memory.HEADROOM}x c={top}")


def refusals(plan: MemoryPlan, entry: ModelEntry, suite: Suite, engine: str, gpus: GpuPlan, node: int, limit: int,
             replan) -> list[str]:  # fmt: skip
    """Why ``plan`` cannot run, each with its fix: wider than a node or than the GPUs there are, weights that do not
    fit, the top concurrency not held, a vLLM max_model_len no KV cache holds one request of."""
    out = []
    top = top_load(suite)
    if plan.nodes == 1 and plan.tp > node:
        out.append(f"tp {plan.tp} is wider than one node ({node} x {gpus.label}): a server across nodes needs a "
                   f"cluster's nodes (--gpu {max(2, -(-plan.tp // node))}x{node}x{gpus.label.lower()} with --cluster "
                   f"slurm or k8s); {fits_elsewhere(replan, plan.tp, top)}")  # fmt: skip
    elif gpus.count and plan.gpus > gpus.count * plan.nodes:
        out.append(f"tp {plan.tp} needs {plan.tp} GPUs, but {gpus.count} {gpus.label} are planned for: pass --tp "
                   f"{powers_of_two(gpus.count)[-1]} or fewer, or --gpu {plan.tp}x{gpus.label.lower()}")  # fmt: skip
    if plan.capacity >= top or out:
        return out + vllm_context_problems(plan, entry, engine)
    if any(s.kv_gib <= 0 for s in plan.servers.values()):
        what = (f"the weights ({max(s.weights_gib for s in plan.servers.values()):.1f} GiB per GPU at tp {plan.tp}) "
                f"and what the engine takes besides leave no room for a KV cache under the {engine} share")  # fmt: skip
    else:
        tight = min(plan.servers.values(), key=lambda s: s.requests)
        bound = f" (bound by SGLang's {tight.limit})" if tight.limit and engine == "sglang" else ""
        what = (f"the {tight.method.value} server holds {tight.requests} requests of {plan.tokens:,} tokens at once"
                f"{bound}, the suite runs up to c={top}")  # fmt: skip
    if plan.tp >= node and gpus.nodes == 1:
        what += f"; a larger tp would be wider than one node ({node} x {gpus.label})"
    # the fixes that keep the user's model and GPUs first (a lower load, a larger share, shorter requests), then
    # the ones that change the hardware (more GPUs, other GPUs)
    keep, change = [], []
    if plan.capacity >= 1:
        keep.append(f"--concurrency up to {plan.capacity} (the top load these GPUs hold)")
    share, worst = share_needed(plan, top)
    if share is not None:
        keep.append(share)
    elif worst is not None and math.isfinite(worst):
        short_gib = missing_gib(plan, top)
        what += (f"; no memory share up to {HIGHEST_SHARE} holds it ({short_gib:.1f} GiB per GPU short even at "
                 f"{HIGHEST_SHARE}, the weights and the engine's other terms included)")  # fmt: skip
    shorter = shortest_fit(plan, top)
    if shorter:
        keep.append(f"shorter requests (max_tokens in the suite so a request holds at most {shorter:,} tokens)")
    if suite.tp is None and limit < node:
        change.append(f"more GPUs (--gpu {node}x{gpus.label.lower()}: tp up to {node})")
    elif suite.tp is not None and suite.tp < limit:
        change.append(f"a larger --tp (up to {limit})")
    change.append(fits_elsewhere(replan, plan.tp, top))
    if gpus.nodes == 1 and engine in ACROSS_NODES and plan.tp >= node:
        change.append(f"a cluster's nodes, a server across them (--gpu 2x{node}x{gpus.label.lower()} --cluster "
                      "slurm or k8s: docs/cluster.md)")  # fmt: skip
    out.append(f"{what}: the {engine} plan on {plan.tp} x {gpus.label} cannot hold the top concurrency. Fix, keeping "
               f"the model and GPUs: " + ("; or ".join(keep) if keep else "none") + ". Or change the GPUs: "
               + "; or ".join(change))  # fmt: skip
    return out  # a --max-model-len would not make it hold the top concurrency: that fix would mislead


# The highest memory share the refusal suggests: above it, what the engine does not count (the CUDA context, 0.51 GiB
# at start on an H100, and NCCL's buffers from tp 2: "non_torch_memory=0.51GiB" / "1.99GiB" in the init snapshots of
# the vLLM 0.19.0 logs, dflashbench.plan.budget_terms.LLMD_LOGS) has under 4 GiB left; gpt-oss-120b on one H100 did
# not start at 0.95 (vllm-project/vllm#27508).
HIGHEST_SHARE = 0.95


def share_needed(plan: MemoryPlan, top: int) -> tuple[str | None, float | None]:
    """The memory share at which every server would hold ``top``: as a fix where it is at most HIGHEST_SHARE, else
    the share itself (no fix); ``(None, None)`` where the share does not decide it (SGLang's hybrid states)."""
    worst = 0.0
    for s in plan.servers.values():
        if s.budget is None or s.limit:
            return None, None
        need_gib = top * s.request_mib / 1024
        total, taken = s.budget.total.gib, sum(t.gib for t in s.budget.terms)
        if plan.engine == "trtllm":
            share = need_gib / max(total - taken, 1e-9) if total > taken else math.inf
        elif plan.engine == "sglang":
            outside = sum(t.gib for t in s.budget.terms if t.name == "outside PyTorch")
            share = (need_gib + taken - outside) / (total - outside)
        else:
            share = (need_gib + taken) / total
        worst = max(worst, share)
    flag = {"vllm": "--gpu-memory-utilization", "sglang": "--mem-fraction-static"}.get(
        plan.engine, "kv_cache_config.free_gpu_memory_fraction")
    if worst <= HIGHEST_SHARE:
        return f"a larger memory share for every method ({flag} {math.ceil(worst * 100) / 100:.2f})", worst
    return None, worst


def missing_gib(plan: MemoryPlan, top: int) -> float:
    """GiB per GPU the tightest server lacks to hold ``top`` requests at the highest share the refusal suggests."""
    worst = 0.0
    for s in plan.servers.values():
        if s.budget is None:
            continue
        need_gib = top * s.request_mib / 1024
        have_gib = s.kv_gib + (HIGHEST_SHARE - s.share.value) * s.budget.total.gib  # negative: weights overflow
        worst = max(worst, need_gib - have_gib)
    return worst


def shortest_fit(plan: MemoryPlan, top: int) -> int | None:
    """The request length (tokens) at which every server would hold ``top`` requests, by the KV each request costs
    in proportion to its length; ``None`` when no length does (the weights leave nothing, or states bind)."""
    ratio = min((s.requests / top for s in plan.servers.values()), default=0)
    if ratio <= 0:
        return None
    tokens = int(plan.tokens * ratio)
    return tokens if tokens >= 256 else None


def fits_elsewhere(replan, tp: int, top: int) -> str:
    """The GPUs, one node each, on which the plan would hold ``top``: the smallest count of each model."""
    found = []
    for model in GPU_MODELS.values():
        node = gpus_per_node(model.label)
        for count in powers_of_two(node):
            if replan(model.label, model.memory_gib, count).capacity >= top:
                found.append(f"{count} x {model.label}")
                break
    if not found:
        return f"no single node of {', '.join(m.label for m in GPU_MODELS.values())} holds c={top}"
    return "it fits on " + ", ".join(found) + " (--gpu NxNAME)"


def vllm_context_problems(plan: MemoryPlan, entry: ModelEntry, engine: str) -> list[str]:
    """vLLM refuses to start when its KV cache cannot hold one request of max_model_len, which defaults to the
    model's max_position_embeddings (vllm/v1/core/kv_cache_planning.py _check_enough_kv_cache_memory: "To serve at
    least one request with the model's max seq len ..."). The fix is --max-model-len, given to every method."""
    if engine != "vllm" or entry.context_tokens is None or entry.kv is None:
        return []
    out = []
    for method, s in plan.servers.items():
        per_token = s.request_mib * memory.MIB / max(plan.tokens, 1)
        if s.kv_gib > 0 and entry.context_tokens * per_token > s.kv_gib * memory.GIB:
            fit = int(s.kv_gib * memory.GIB // per_token)
            out.append(f"vLLM's {method.value} server would not start: one request of the model's context "
                       f"({entry.context_tokens:,} tokens) needs more KV cache than its {s.kv_gib:.1f} GiB; add "
                       f"--max-model-len {max(plan.tokens, min(fit, entry.context_tokens))} for every method "
                       '(extra_args = { all = ["--max-model-len", "N"] } in a suite file)')  # fmt: skip
    return out


def preflight(plan: MemoryPlan | None) -> None:
    """Before the first server starts (and at the end of a dry run): a plan that cannot run stops here."""
    if plan is not None and plan.problems:
        raise UserError("memory plan refused: " + " | ".join(plan.problems))


def describe(plan: MemoryPlan | None) -> Sequence[str]:
    return plan.lines() if plan is not None else []
