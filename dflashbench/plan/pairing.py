"""Target and drafts as one unit: what a suite plus the command line mean for the servers a sweep launches.

One place decides, in this order:

- ``model = "embedded"``: the bundled tiny target, and (unless a draft is given) its bundled drafters;
  ``random:SHAPE``: random weights made by ``dflashbench serve``, drafts of the same shape.
- any other model: the model registry (:mod:`dflashbench.plan.models`) resolves an alias to its Hugging Face id;
  each speculative method's draft is the suite's or ``--draft``'s, else the registry's. A registered model
  with no public draft for a method (most have no EAGLE-3 head) drops that method with a note, unless the
  user asked for it by ``--method``; an unregistered model without ``--draft`` is an error naming ``--draft``.
- embedded drafters pair only with the embedded target.
- the GPUs planned for (:mod:`dflashbench.plan.gpus`): the ones NVML sees, ``sweep --gpu NAME`` on a dry run, else an
  assumed H100, said so; their architecture picks the recipe's architecture-bound flags;
- ``tp`` unset: from the registry's weight size and those GPUs (an error before anything launches when they
  cannot hold it); 1 for models the registry does not know.

The registry also gives the DFlash block size, the EAGLE-3 chain length its sources recommend, engine recipe
flags (before the suite's own ``extra_args``, which win) and chat settings (thinking, reasoning effort).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dflashbench.backends.base import ServerSpec
from dflashbench.errors import UserError
from dflashbench.methods import method_of_architecture, record
from dflashbench.model_files import draft_facts, is_hub_id, read_json, target_facts
from dflashbench.paths import portable
from dflashbench.plan import memory, models, preflight
from dflashbench.plan.gpus import GpuPlan, resolve_plan
from dflashbench.plan.memory import MemoryPlan, cap_args
from dflashbench.plan.models import ModelEntry
from dflashbench.plan.suites import EMBEDDED, RANDOM_PREFIX, Suite
from dflashbench.types import Method


@dataclass(frozen=True)
class ModelPair:
    """The target a server loads and the draft of each speculative method, with what the registry adds."""

    target: str
    drafts: dict[Method, str]
    entry: ModelEntry | None = None
    dflash_block_size: int | None = None  # the registry's for its own drafter, or the drafter's config.json
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # besides enable_thinking (per workload)
    reasoning_effort: str | None = None
    gpu: GpuPlan | None = None  # the GPUs planned for
    dflash_block_source: str | None = None  # where dflash_block_size came from, for the plan
    target_architecture: str | None = None  # config.json architectures[0]: registry, or the target's own file
    draft_layers: str | None = None  # the DFlash drafter's attention layers: full, sliding or mixed
    tp_why: str | None = None  # how tp was chosen, for the plan
    memory: MemoryPlan | None = None  # each method's server's memory and the capacity they all get (plan.memory)
    given_draft_lengths: dict[Method, int] = field(default_factory=dict)  # the suite's own num_speculative_tokens
    described: ModelEntry | None = None  # a target the registry lacks, as its own config.json describes it

    def recipe_args(self, backend: str, method: Method) -> list[str]:
        arch = self.gpu.arch if self.gpu else None
        return self.entry.recipe_args(backend, method, arch) if self.entry else []

    def recipe_config(self, backend: str) -> dict:
        return self.entry.recipe_config(backend) if self.entry else {}

    def extra_body(self) -> dict[str, Any]:
        """Request fields every request carries (the workload's own chat_template_kwargs are merged in)."""
        body: dict[str, Any] = {}
        if self.chat_template_kwargs:
            body["chat_template_kwargs"] = dict(self.chat_template_kwargs)
        if self.reasoning_effort:
            body["reasoning_effort"] = self.reasoning_effort
        return body


def resolve(suite: Suite, *, methods_given: bool = False, gpus: GpuPlan | None = None) -> tuple[Suite, ModelPair]:
    """The suite as it will run (registry id, drafts filled in, methods without a draft dropped, tp chosen,
    thinking defaults set, with notes saying what changed) and its :class:`ModelPair`."""
    if suite.model == EMBEDDED:
        return suite, _embedded(suite)
    if suite.model.startswith(RANDOM_PREFIX):
        drafts = {m.base: suite.drafts.get(m.base, suite.model) for m in suite.methods if record(m).needs_draft}
        return suite, ModelPair(suite.model, drafts)
    gpus = gpus if gpus is not None else resolve_plan(None, dry_run=True)
    embedded_drafts = sorted(m.value for m, d in suite.drafts.items() if d == EMBEDDED)
    if embedded_drafts:
        raise UserError(f"the embedded drafters ({', '.join(embedded_drafts)}) pair only with the embedded target, "
                        f"not {suite.model}: pass --draft for {embedded_drafts[0]}")  # fmt: skip
    entry = models.lookup(suite.model)
    if entry is not None and entry.fp8 is not None and suite.model.strip().lower() == entry.fp8.hf_id.lower():
        entry = entry.as_fp8()  # the FP8 copy, named
    target = entry.hf_id if entry else suite.model
    notes = list(suite.notes)
    drafts: dict[Method, str] = {}
    methods = []
    unregistered = suite.methods_without_draft()  # suites from files were checked at load; copies were not
    if entry is None and unregistered:
        raise UserError(f"{suite.model} is not in the model registry (dflashbench models list), so "
                        f"{' and '.join(unregistered)} {'have' if len(unregistered) > 1 else 'has'} no draft: pass "
                        f"--draft {','.join(f'{m}=<HF id or path>' for m in unregistered)}, or run --method ar")  # fmt: skip
    for method in suite.methods:  # drafts by method: an arm (dflash-k3) runs its method's draft
        draft = suite.drafts.get(method.base) or (entry.draft_for(method.base, suite.backend) if entry else None)
        missing = _missing(method.base, draft, entry, suite.backend)
        if missing is None:
            methods.append(method)
            if draft and record(method).needs_draft:
                drafts[method.base] = draft
            continue
        why, fix = missing
        if methods_given:
            raise UserError(f"{method.value} for {target}: {why}; {fix}")
        notes.append(f"{method.value} not planned for {target}: {why}" + (f"; {fix}" if record(method).needs_draft else ""))
    if not methods:
        raise UserError(f"nothing to run for {target}: pass --draft, or --method ar")
    given = dict(suite.num_speculative_tokens)  # the suite's own (and --num-draft-tokens'): they win
    spec_tokens = _draft_tokens(given, entry, suite.backend, methods, drafts)
    block_method = next((m for m in (Method.DFLASH, Method.DFLASH2) if m in drafts), Method.DFLASH)
    own = entry.block_drafter(block_method) if entry is not None else None
    own_drafter = own is not None and drafts.get(block_method) == own.id
    block = own.block_size if own_drafter and own else None
    block_source = (own.sources.get("block_size") or own.source) if own_drafter and own and block else None
    entry, described, (tp, tp_why, memory_plan) = _plan_target(suite, entry, target, methods, spec_tokens, drafts,
                                                               block, gpus, notes)  # fmt: skip
    target = entry.hf_id if entry else target
    chat = entry.chat if entry else None
    thinking = chat.chat_template_kwargs.get("enable_thinking") if chat else None
    if suite.thinking_slice and (chat is None or "enable_thinking" not in chat.chat_template_kwargs):
        raise UserError(f"thinking_slice: {target} has no thinking switch in the model registry (its chat settings set "
                        "no chat_template_kwargs.enable_thinking), so thinking on and off are not two settings of it; "
                        "drop thinking_slice, or pick a model with the switch (dflashbench models show MODEL)")  # fmt: skip
    workloads = [w if w.thinking is not None or thinking is None else w.model_copy(update={"thinking": bool(thinking)})
                 for w in suite.workloads]  # fmt: skip
    resolved = suite.model_copy(update={"model": target, "drafts": drafts, "methods": methods, "tp": tp,
                                        "num_speculative_tokens": spec_tokens, "workloads": workloads,
                                        "notes": notes})  # fmt: skip
    kwargs = {k: v for k, v in (chat.chat_template_kwargs if chat else {}).items() if k != "enable_thinking"}
    pair = ModelPair(target, drafts, entry, block, kwargs, chat.reasoning_effort if chat else None, gpu=gpus,
                     dflash_block_source=f"the model registry: {block_source}" if block_source else None,
                     target_architecture=entry.architecture if entry else None,
                     draft_layers=own.layers if own_drafter and own else None, tp_why=tp_why,
                     memory=memory_plan, given_draft_lengths=given, described=described)  # fmt: skip
    return resolved, pair


def read_own_files(pair: ModelPair, *, network: bool) -> tuple[ModelPair, list[str]]:
    """The pair with what the drafter's and the target's own config.json say (the files the engine loads): the
    DFlash block size, the drafter's attention layers, the target's architecture. From a local folder or the
    Hugging Face cache, and the Hub where ``network`` (a real run; a dry run reads nothing from the network).
    Returns warnings where a file disagrees with the model registry or could not be read."""
    notes: list[str] = []
    updates: dict[str, Any] = {}

    def read(model: str):
        try:
            return read_json(model, network=network)
        except UserError as exc:  # gated, offline, unreadable JSON
            notes.append(f"warning: {exc}; the model registry's facts are used instead")
            return None

    block_method = next((m for m in (Method.DFLASH, Method.DFLASH2) if m in pair.drafts), Method.DFLASH)
    draft = pair.drafts.get(block_method)
    found = read(draft) if draft else None
    if found is not None:
        check_draft_kind(block_method, draft, found.data.get("architectures") or [], found.where)  # type: ignore[arg-type]
    facts = draft_facts(found.data) if found else None
    if found and facts and facts.block_size:
        if pair.dflash_block_size not in (None, facts.block_size):
            notes.append(f"warning: {found.where} gives block_size {facts.block_size}, the model registry "
                         f"{pair.dflash_block_size}: using {facts.block_size}, the engine's own file (dflashbench models "
                         f"check {pair.entry.name if pair.entry else pair.target} lists every difference)")  # fmt: skip
        updates.update(dflash_block_size=facts.block_size, dflash_block_source=found.where)
    if facts and facts.layers:
        updates["draft_layers"] = facts.layers
    target = read(pair.target)
    arch = target_facts(target.data).architecture if target else None
    if arch:
        updates["target_architecture"] = arch
    return dataclasses.replace(pair, **updates), notes


def hub_repos(pair: ModelPair) -> list[str]:
    """The Hugging Face repositories a launch reads: the target and every draft that is not a local folder."""
    return [m for m in (pair.target, *pair.drafts.values()) if is_hub_id(m)]


def _draft_tokens(given: dict[Method, int], entry: ModelEntry | None, backend: str, methods: list[Method],
                  drafts: dict[Method, str]) -> dict[Method, int]:  # fmt: skip
    """Each chain method's draft length after the suite's own: the engine's recipe for this model, then the
    registry's head or MTP figure (:mod:`dflashbench.plan.draft_lengths` says which won)."""
    out = dict(given)
    if entry is None:
        return out
    head = entry.eagle3_for(backend)
    ours = {Method.MTP: True, Method.EAGLE3: head is not None and drafts.get(Method.EAGLE3) == head.id}
    for method in (Method.EAGLE3, Method.MTP):
        recipe = entry.draft_recipe(backend, method)
        if method in methods and ours[method] and recipe is not None and recipe.num_speculative_tokens:
            out.setdefault(method, recipe.num_speculative_tokens)
    if ours[Method.EAGLE3] and head is not None and head.num_speculative_tokens:
        out.setdefault(Method.EAGLE3, head.num_speculative_tokens)
    if entry.mtp is not None and entry.mtp.num_speculative_tokens and Method.MTP in methods:
        out.setdefault(Method.MTP, entry.mtp.num_speculative_tokens)
    return out


def _recipe_draft_tp(suite: Suite, method: Method, pair: ModelPair) -> int | None:
    """The drafter's own tp where the engine's recipe for this model sets one and the draft is the registry's."""
    entry = pair.entry
    recipe = entry.draft_recipe(suite.backend, method) if entry is not None else None
    if recipe is None or recipe.draft_tp is None or pair.drafts.get(method) != entry.draft_for(method, suite.backend):
        return None
    return recipe.draft_tp


def server_spec(suite: Suite, method: Method, pair: ModelPair, port: int) -> ServerSpec:
    """One method's server: the pair's target and draft, the registry's recipe flags for this engine before
    the suite's own (which win), room for the suite's top concurrency in every method's server alike, and the
    memory plan's cap that gives it the same KV capacity in requests as the tightest method's server."""
    cap = pair.memory.caps.get(method) if pair.memory is not None and pair.memory.engine == suite.backend else None
    cap_first, cap_last, cap_config = cap_args(suite.backend, cap)
    arm, method = method, method.base  # an arm's server is its method's, with the arm's draft length
    return ServerSpec(
        method=method, model=pair.target, draft=pair.drafts.get(method) if record(method).needs_draft else None,
        port=port, tp=suite.tp or 1, dp=suite.dp, ep=suite.ep,
        dcp=pair.memory.dcp if pair.memory is not None and pair.memory.engine == suite.backend else 1,
        # across a cluster's nodes where the memory plan lays the server so (issue #67)
        pp=pair.memory.pp if pair.memory is not None and pair.memory.engine == suite.backend else 1,
        nnodes=pair.memory.nodes if pair.memory is not None and pair.memory.engine == suite.backend else 1,
        num_speculative_tokens=suite.draft_tokens(arm), draft_schedule=suite.draft_schedule(arm),
        draft_tp=_recipe_draft_tp(suite, method, pair),
        draft_block_size=pair.dflash_block_size if method in (Method.DFLASH, Method.DFLASH2) else None,
        target_architecture=pair.target_architecture,
        draft_layers=pair.draft_layers if method in (Method.DFLASH, Method.DFLASH2) else None,
        max_running_requests=max(suite.concurrency) if suite.concurrency else suite.max_concurrency,  # a trace alone
        engine_config={**cap_config, **pair.recipe_config(suite.backend), **suite.engine_config},
        extra_args=(*cap_first, *pair.recipe_args(suite.backend, method), *cap_last, *suite.args_for(method)),
    )  # fmt: skip


def capacity_warnings(suite: Suite, pair: ModelPair, backend) -> list[str]:
    """Methods whose server would queue requests below the suite's top concurrency (an engine's own cap)."""
    out = []
    top = max(suite.concurrency, default=0)  # a trace alone: the engine's own cap is its load's
    for method in suite.methods:
        cap = backend.concurrency_cap(server_spec(suite, method, pair, port=8000))
        if cap is not None and cap < top:
            out.append(f"warning: the {suite.backend} {method.value} server runs at most {cap} requests at once; "
                       f"points above c={cap} queue the rest, which skews the comparison")  # fmt: skip
    return out


def draft_warnings(suite: Suite) -> list[str]:
    """A draft given to one speculative method that the registry lists as another kind (a DFlash drafter given to
    eagle3): the engine would load it as the wrong architecture, or fail at launch. DFlash and DFlash2 share the
    engines' method name, so there a wrong kind would run and be labelled wrong: that is an error
    (:func:`check_draft_kind`), not a warning."""
    out = []
    for method, draft in suite.drafts.items():
        known = models.draft_kind(draft) if record(method).needs_draft else None
        if known is None or known[0] is method:
            continue
        kind, entry = known
        if {method, kind} <= {Method.DFLASH, Method.DFLASH2}:
            check_draft_kind(method, draft, [kind_architecture(kind)], f"the model registry ({entry.name})")
        out.append(f"warning: the {method.value} draft {draft} is the model registry's {_words(kind, article=False)} for "
                   f"{entry.hf_id}, not {_words(method)}: measure it with --method {kind.value} "
                   f"--draft {draft}, or give {method.value} its own (--draft {method.value}=ID)")  # fmt: skip
    return out


def _words(method: Method, *, article: bool = True) -> str:
    words = record(method).draft_words or f"a {method.value} draft"
    return words if article else words.split(" ", 1)[1]


def kind_architecture(method: Method) -> str:
    return (record(method).draft_architectures or [method.value])[0]


def check_draft_kind(method: Method, draft: str, architectures: list[str], where: str) -> None:
    """``--method dflash`` with a DFlash2 drafter (or ``dflash2`` with a DFlash one) is an error before launch: the
    engines run a block drafter under one method name and pick DFlash or DFlash2 by its architecture, so the run would
    measure the other method under this one's name. The drafter's kind comes from its ``config.json`` architectures
    (or the registry); nothing is said where neither is known."""
    kind = method_of_architecture(architectures)
    if kind is None or kind is method or method not in (Method.DFLASH, Method.DFLASH2):
        return
    raise UserError(f"{draft} is {_words(kind)} ({', '.join(architectures)}, from {where}): the engines run it as "
                    f"{record(kind).label}, so --method {method.value} would label {record(kind).label} as "
                    f"{record(method).label}; measure it with --method {kind.value} --draft {kind.value}={draft}")  # fmt: skip


def _missing(method: Method, draft: str | None, entry: ModelEntry | None, backend: str) -> tuple[str, str] | None:
    """Why ``method`` cannot run for this target and the fix; ``None`` where it can."""
    rec = record(method)
    if rec.needs_draft and not draft:
        assert entry is not None  # an unregistered model without drafts stopped before
        why = entry.eagle3_missing(backend).rstrip(".") if method is Method.EAGLE3 else "no draft in the registry"
        return why, f"pass --draft {method.value}=<HF id or path> to include it"
    if rec.needs == "own-heads" and entry is not None and entry.mtp is None:
        return (f"the model registry lists no MTP layers in {entry.hf_id}'s checkpoint (dflashbench models show "
                f"{entry.name})", f"drop {method.value} from --method")  # fmt: skip
    return None


def _plan_target(suite: Suite, entry: ModelEntry | None, target: str, methods: list[Method], spec_tokens: dict,
                 drafts: dict, block: int | None, gpus: GpuPlan, notes: list[str]):  # fmt: skip
    """(the entry, a config-described entry for a target the registry lacks, (tp, why, memory plan)): a registry
    model on its checkpoint (:func:`_plan_checkpoint`); another on its own config.json where one can be read
    (:mod:`dflashbench.plan.local_model`), so a local 70B is not planned at tp 1."""
    if entry is not None:
        entry, planned = _plan_checkpoint(suite, entry, methods, spec_tokens, drafts, block, gpus, notes)
        return entry, None, planned
    from dflashbench.plan.local_model import local_entry

    described = local_entry(target)
    if described is None:
        return None, None, _plan_tp(suite, None, methods, spec_tokens, drafts, block, gpus, notes)
    _, (tp, why, plan) = _plan_checkpoint(suite, described, methods, spec_tokens, drafts, block, gpus, notes)
    where = described.source.split("(", 1)[1].split(")", 1)[0]
    return None, described, (tp, f"{why}; from the model's own config.json ({where})", plan)


def _plan_checkpoint(suite: Suite, entry: ModelEntry | None, methods: list[Method], spec_tokens: dict, drafts: dict,
                     block: int | None, gpus: GpuPlan, notes: list[str]):  # fmt: skip
    """The checkpoint and its tp plan: the registry's, else its published FP8 copy where the registry's does not
    hold the top concurrency on these GPUs and the FP8 one does (Hopper and Blackwell run FP8), said in a note."""
    planned = _plan_tp(suite, entry, methods, spec_tokens, drafts, block, gpus, notes)
    plan = planned[2]
    if plan is None or not plan.problems or entry is None or entry.fp8 is None or entry.hf_id == entry.fp8.hf_id \
            or gpus.arch not in ("hopper", "blackwell"):  # fmt: skip
        return entry, planned
    fp8 = entry.as_fp8()
    tried = _plan_tp(suite, fp8, methods, spec_tokens, drafts, block, gpus, [])
    if tried[2] is None or tried[2].problems:
        return entry, planned
    notes.append(f"checkpoint {fp8.hf_id} (FP8, {fp8.weights_gib:.0f} GiB): {entry.hf_id} ({entry.weights_dtype}, "
                 f"{models.weights_gib(entry):.0f} GiB) does not hold c={preflight.top_load(suite)} on "
                 f"{gpus.count or ''} x {gpus.label}, which runs FP8 (the registry's FP8 copy: dflashbench models show "
                 f"{entry.name})")  # fmt: skip
    return fp8, tried


def _plan_tp(suite: Suite, entry: ModelEntry | None, methods: list[Method], spec_tokens: dict, drafts: dict,
             block: int | None, gpus: GpuPlan, notes: list[str]) -> tuple[int, str, MemoryPlan | None]:  # fmt: skip
    """tp, why, and the memory plan: a registry model with KV facts on an engine is planned by
    :mod:`dflashbench.plan.preflight` (tp the smallest that holds HEADROOM x the top concurrency); others by weights
    alone."""
    if entry is not None and entry.kv is not None and suite.backend in preflight.ENGINES:
        planned = suite.model_copy(update={"methods": methods, "num_speculative_tokens": spec_tokens})
        tp, plan = preflight.choose(entry, planned, suite.backend, drafts, block, gpus,
                                    lambda m: entry.recipe_args(suite.backend, m, gpus.arch),
                                    entry.recipe_config(suite.backend))  # fmt: skip
        top = preflight.top_load(suite)
        why = ("given (--tp or the suite)" if suite.tp is not None else
               "the most the planned GPUs allow, and still short (the memory plan below refuses it)" if plan.problems
               else f"the smallest on one node where every method's server holds c={top}, at risk (below "
                    f"{memory.HEADROOM}x; the memory plan)" if plan.at_risk
               else f"the smallest on one node where every method's server holds {memory.HEADROOM}x c={top} "
                    "(the memory plan)")  # fmt: skip
        if plan.nodes > 1 and not plan.problems and suite.tp is None:
            why = (f"no node holds {memory.HEADROOM}x c={top}: each server across {plan.nodes} nodes, tp {plan.tp}"
                   + (f" x pp {plan.pp}" if plan.pp > 1 else "") + " (the memory plan)")  # fmt: skip
        return tp, why, plan
    if suite.tp is not None:
        return suite.tp, "given (--tp or the suite)", None
    return (*_tp(entry, gpus, notes), None)


def _tp(entry: ModelEntry | None, gpus: GpuPlan, notes: list[str]) -> tuple[int, str]:
    """tp and why: the smallest that holds the registry's weight size on ``gpus``; 1 for a model it does not know."""
    if entry is None:
        return 1, "the model registry does not know this model's size; pass --tp N for more GPUs"
    why = (f"the smallest that holds {models.weights_gib(entry):.0f} GiB of weights within "
           f"{models.WEIGHTS_SHARE:.0%} of each {gpus.label}")  # fmt: skip
    if gpus.origin == "nvml" and gpus.memory_gib:
        return models.choose_tp(entry, gpus.memory_gib, gpus.count or 1), why
    tp = models.choose_tp(entry, gpus.memory_gib or models.ASSUMED_GPU_GIB, gpus=gpus.count or 1 << 10)
    if gpus.origin == "assumed":
        notes.append(f"no GPU visible here: tp {tp} planned for {gpus.memory_gib:.0f} GB {gpus.label} GPUs "
                     f"({models.weights_gib(entry):.0f} GiB of weights); pass --gpu NAME or --tp to choose")  # fmt: skip
    return tp, why


def _embedded(suite: Suite) -> ModelPair:
    """The bundled pair's directories; a given draft path is kept (a drafter trained for the tiny target)."""
    try:
        from dflashbench.embedded import default_paths
    except ImportError:
        raise UserError(
            'the suite asks for the "embedded" model pair, which is not installed with this dflashbench; '
            "pass --model DIR (and --draft DIR)"
        ) from None
    paths = default_paths()
    bundled = {Method.DFLASH: getattr(paths, "dflash", None), Method.EAGLE3: getattr(paths, "eagle3", None)}
    drafts = {}
    for method in dict.fromkeys(m.base for m in suite.methods):  # an arm runs its method's drafter
        if not record(method).needs_draft:
            continue
        draft = suite.drafts.get(method, EMBEDDED)
        if draft == EMBEDDED:
            if bundled.get(method) is None:
                raise UserError(f"the embedded pair has no {method.value} drafter; pass --draft for {method.value}")
            draft = str(bundled[method])
        drafts[method] = draft
    block, where = None, None
    drafter = drafts.get(Method.DFLASH)
    if drafter is not None:  # the bundled drafter's own config.json states its block (dflashbench/embedded/dflash)
        found = read_json(drafter, network=False)
        if found is not None and isinstance(found.data.get("block_size"), int):
            block, where = found.data["block_size"], f"the drafter's config.json ({portable(found.where)})"
    return ModelPair(str(paths.target), drafts, dflash_block_size=block, dflash_block_source=where)
