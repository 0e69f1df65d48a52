"""How many tokens each speculative method drafts per step, and where that number came from: the command line
(``--num-draft-tokens METHOD=K``), the suite (``[num_speculative_tokens]``), the engine's recipe for the model
(the registry's ``[models.recipes.<engine>.draft]``), the drafter itself (a DFlash drafter's block size less one),
else the method's documented default on the engine (``dflashbench/data/methods.toml``). The first that says wins,
and the plan prints which.
"""

from __future__ import annotations

from dataclasses import dataclass

from dflashbench.methods import record
from dflashbench.types import Method

# vLLM drafts this many tokens for a DFlash drafter whose block size nothing states (the released drafters' 16)
UNKNOWN_BLOCK_K = 15


@dataclass(frozen=True)
class DraftLength:
    """One method's draft tokens per step (``k``), where they came from, and the drafter's own tp where a recipe
    sets it (``None``: the engine's default, the target's tp)."""

    method: Method
    k: int
    origin: str  # "flag" | "suite" | "recipe" | "drafter" | "default"
    source: str  # words, for the plan
    draft_tp: int | None = None
    draft_tp_source: str | None = None

    def describe(self) -> str:
        tp = f"; draft tp {self.draft_tp} ({self.draft_tp_source})" if self.draft_tp is not None else ""
        return f"{self.method.value} drafts {self.k} token{'s' if self.k != 1 else ''} a step ({self.source}){tp}"


def draft_length(method: Method, suite, pair, engine: str, flagged: frozenset[Method] = frozenset()) -> DraftLength | None:
    """``method``'s draft length on ``engine`` for ``pair`` (a :class:`dflashbench.plan.pairing.ModelPair`) under
    ``suite``; ``None`` for AR. ``flagged``: the methods whose suite value came from ``--num-draft-tokens``."""
    if method is Method.AR:
        return None
    entry = pair.entry if pair is not None else None
    recipe = entry.draft_recipe(engine, method) if entry is not None else None
    tp = (recipe.draft_tp, f"the {engine} recipe: {recipe.source}") if recipe and recipe.draft_tp else (None, None)
    given = suite.num_speculative_tokens.get(method)
    if given is not None and method in flagged:
        return DraftLength(method, given, "flag", f"--num-draft-tokens {method.value}={given}", *tp)
    if given is not None and not _from_registry(method, given, entry, engine):
        return DraftLength(method, given, "suite", f"num_speculative_tokens.{method.value} = {given} in the suite", *tp)
    if recipe is not None and recipe.num_speculative_tokens:
        return DraftLength(method, recipe.num_speculative_tokens, "recipe", f"the {engine} recipe: {recipe.source}", *tp)
    if method in (Method.DFLASH, Method.DFLASH2):
        block = pair.dflash_block_size if pair is not None else None
        if block:
            return DraftLength(method, block - 1, "drafter", f"block size {block} less one, from "
                               f"{pair.dflash_block_source or 'the drafter'}", *tp)  # fmt: skip
        return DraftLength(method, UNKNOWN_BLOCK_K, "default", "the released drafters' block of 16 less one (block size "
                           "not known here; a real run reads the drafter's config.json)", *tp)  # fmt: skip
    if given is not None:  # the registry's own figure for its head or MTP layers
        return DraftLength(method, given, "recipe", _registry_source(method, entry), *tp)
    rec = record(method)
    if rec.runs_on(engine) and "num_speculative_tokens" in rec.on(engine).defaults:
        how = rec.on(engine)
        return DraftLength(method, int(how.defaults["num_speculative_tokens"]), "default",
                           f"the method's default on {engine}: {how.defaults_source}", *tp)  # fmt: skip
    return DraftLength(method, 3, "default", "dflashbench's default chain of 3 (no engine default recorded)", *tp)


def _from_registry(method: Method, k: int, entry, engine: str) -> bool:
    """Whether ``k`` in the resolved suite is the registry's own (an EAGLE-3 head's or the MTP layers' figure,
    which :func:`dflashbench.plan.pairing.resolve` fills in where the suite says nothing)."""
    if entry is None:
        return False
    if method is Method.EAGLE3:
        head = entry.eagle3_for(engine)
        return head is not None and head.num_speculative_tokens == k
    if method is Method.MTP:
        return entry.mtp is not None and entry.mtp.num_speculative_tokens == k
    return False


def _registry_source(method: Method, entry) -> str:
    if method is Method.MTP and entry is not None and entry.mtp is not None:
        return f"the model registry's MTP entry: {entry.mtp.source}"
    head = entry.eagle3 if entry is not None else None
    return f"the model registry's EAGLE-3 head: {head.source}" if head else "the model registry"
