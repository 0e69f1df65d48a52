"""How many tokens each speculative method drafts per step, and where that number came from. First that says wins:

1. the command line, ``--num-draft-tokens METHOD=K`` (it sets the suite's ``[num_speculative_tokens]``);
2. the suite's ``[num_speculative_tokens]``;
3. the engine's recipe for the model (the registry's ``[models.recipes.<engine>.draft.<method>]``, read from
   vllm-project/recipes), with the drafter's own tp where the recipe sets it;
4. the drafter itself: a DFlash drafter's block size less one; an EAGLE-3 head's or the MTP layers' own figure in
   the registry;
5. the method's documented default on the engine (``dflashbench/data/methods.toml``).

:func:`dflashbench.plan.pairing.resolve` puts the winner into the resolved suite (what the engines' argv read);
the plan prints each with its source (:func:`draft_length`), and ``compare`` flags a length that differs between
two runs (:mod:`dflashbench.gate.compare_drafts`).
"""

from __future__ import annotations

from dataclasses import dataclass

from dflashbench.errors import UserError
from dflashbench.methods import record
from dflashbench.types import Method

ORIGIN_WORDS = {"flag": "flag", "suite": "suite", "recipe": "engine recipe", "drafter": "drafter",
                "default": "method's default"}
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
        tp = f", draft tp {self.draft_tp}" if self.draft_tp is not None else ""
        return f"{self.method.value} {self.k}{tp} ({self.origin}: {self.source})"


def parse_flag(text: str) -> dict[Method, int]:
    """``--num-draft-tokens mtp=3,eagle3=5`` -> {MTP: 3, EAGLE3: 5}; a clear error otherwise."""
    out: dict[Method, int] = {}
    for item in (t.strip() for t in text.split(",") if t.strip()):
        name, sep, value = item.partition("=")
        try:
            method = Method.parse(name.strip())
            k = int(value)
        except ValueError:
            method, k = None, 0
        if not sep or method is None or k < 1 or method is Method.AR:
            raise UserError(f"--num-draft-tokens {text!r}: give METHOD=K for a speculative method and K >= 1, e.g. "
                            "--num-draft-tokens mtp=3 or eagle3=5,dflash=15")  # fmt: skip
        out[method] = k
    if not out:
        raise UserError(f"--num-draft-tokens {text!r}: give METHOD=K, e.g. --num-draft-tokens mtp=3")
    return out


def draft_length(method: Method, suite, pair, engine: str, flagged: frozenset[Method] = frozenset()) -> DraftLength | None:
    """``method``'s draft length on ``engine`` for ``pair`` (a :class:`dflashbench.plan.pairing.ModelPair`) under
    the resolved ``suite``; ``None`` for AR. ``flagged``: the methods ``--num-draft-tokens`` set."""
    if method is Method.AR:
        return None
    entry = pair.entry if pair is not None else None
    recipe = entry.draft_recipe(engine, method) if entry is not None else None
    recipe_tp = recipe is not None and recipe.draft_tp is not None and pair.drafts.get(method) == entry.draft_for(
        method, engine)  # fmt: skip
    tp = (recipe.draft_tp, f"the {engine} recipe: {recipe.source}") if recipe_tp else (None, None)
    resolved = suite.num_speculative_tokens.get(method)
    given = getattr(pair, "given_draft_lengths", {}) or {}
    if method in given and method in flagged:
        return DraftLength(method, given[method], "flag", f"--num-draft-tokens {method.value}={given[method]}", *tp)
    if method in given:
        return DraftLength(method, given[method], "suite", f"num_speculative_tokens.{method.value} in the suite", *tp)
    if recipe is not None and recipe.num_speculative_tokens and resolved == recipe.num_speculative_tokens:
        return DraftLength(method, resolved, "recipe", f"the {engine} recipe for the model: {recipe.source}", *tp)
    if method in (Method.DFLASH, Method.DFLASH2):
        block = pair.dflash_block_size if pair is not None else None
        if block:
            return DraftLength(method, block - 1, "drafter", f"its block size {block} less one, from "
                               f"{pair.dflash_block_source or 'the drafter'}", *tp)  # fmt: skip
        return DraftLength(method, UNKNOWN_BLOCK_K, "default", "the released drafters' block of 16 less one (block size "
                           "not known here; a real run reads the drafter's config.json)", *tp)  # fmt: skip
    if resolved is not None:  # the registry's own figure for its EAGLE-3 head or MTP layers
        return DraftLength(method, resolved, "drafter", _registry_source(method, entry), *tp)
    rec = record(method)
    if rec.runs_on(engine) and "num_speculative_tokens" in rec.on(engine).defaults:
        how = rec.on(engine)
        return DraftLength(method, int(how.defaults["num_speculative_tokens"]), "default",
                           f"the method's default on {engine}: {how.defaults_source}", *tp)  # fmt: skip
    return DraftLength(method, 3, "default", "a chain of 3 (no engine default recorded for the method)", *tp)


def _registry_source(method: Method, entry) -> str:
    if method is Method.MTP and entry is not None and entry.mtp is not None:
        return f"the model registry's MTP entry: {entry.mtp.source}"
    head = entry.eagle3 if entry is not None else None
    return f"the model registry's EAGLE-3 head: {head.source}" if head else "the model registry"


def plan_lines(ctx, verbose: bool = False) -> list[str]:
    """The plan's draft-length line: each speculative method's k (and draft tp) with where it came from; the
    sources in full under ``verbose``, else their kind."""
    found = [draft_length(m, ctx.suite, ctx.pair, ctx.backend_name, ctx.flagged_draft_lengths) for m in ctx.launches]
    found = [d for d in found if d is not None and d.method not in (Method.DFLASH, Method.DFLASH2)]  # DFlash: block line
    if not found:
        return []
    if not verbose:
        shown = "; ".join(f"{d.method.value} {d.k}" + (f", draft tp {d.draft_tp}," if d.draft_tp else "")
                          + f" from the {ORIGIN_WORDS[d.origin]}" for d in found)  # fmt: skip
        return [f"draft tokens a step: {shown} (--verbose: its source)"]
    return ["draft tokens a step, first that says: --num-draft-tokens > the suite > the engine's recipe for the model > "
            "the drafter > the method's default", *(f"draft tokens a step: {d.describe()}" for d in found)]
