"""The built-in synthetic workload of the embedded default: prompts from dflashbench's own chat corpus.

Categories math, code and writing mimic the real suites (GSM8K-style problems, small Python functions, prose);
see :mod:`dflashbench.reference.corpus`. Prompts are generated, never downloaded: the same seed gives the same
prompts on every machine, and none of them is drawn from the corpus the embedded pair was trained on.
Math prompts carry the corpus's own answer as their reference (graded like GSM8K: the final number).

Config ``long-context`` puts earlier conversations of the same corpus in front of each request (0, 1, 2, 4 or 6 of
them, in turn, every category getting each), so the prompts span from ~20 to ~1,000 tokens: what reading
acceptance against input length needs (docs/metrics.md, "Acceptance by slice"; the default prompts span 19-58
tokens, too alike). The context comes from its own key space, so it never repeats a request.
"""

from __future__ import annotations

from dflashbench.types import Request
from dflashbench.workloads.base import Workload
from dflashbench.workloads.spec import WorkloadSpec

CATEGORIES = ("math", "code", "writing")
DEFAULT_NUM_PROMPTS = 24
CONTEXT_TURNS = (0, 1, 2, 4, 6)  # earlier conversations in front of a long-context prompt, in turn


class Synthetic(Workload):
    name = "synthetic"
    description = "built-in synthetic chat prompts (math, code, writing) for the embedded tiny model pair"
    hf_id = None
    default_max_tokens = 96
    configs = ("chat", "long-context")  # the first is the default (and leaves the workload's label as it was)

    def categories(self, config: str | None) -> tuple[str, ...]:
        return CATEGORIES

    def source_label(self, config: str | None, split: str) -> str:
        return "the built-in synthetic corpus"

    def generate(self, spec: WorkloadSpec, num_prompts: int | None, seed: int) -> list[Request]:
        """``num_prompts`` prompts (round-robin over the categories), generated from ``seed``."""
        from dflashbench.reference.corpus import demo_prompts

        long = self.resolve_config(spec.config) == "long-context"
        cats = tuple(c for c in CATEGORIES if spec.categories is None or c in spec.categories)
        self.check_categories(spec.categories, None)
        n = num_prompts if num_prompts is not None else DEFAULT_NUM_PROMPTS
        return [
            self.request(spec, id=f"s{seed}-{i}", category=conv.category,
                         turns=[_with_context(conv.user, seed, i, len(cats)) if long else conv.user], **_reference(conv))
            for i, conv in enumerate(demo_prompts(n, seed, cats))
        ]  # fmt: skip


def _with_context(user: str, seed: int, i: int, categories: int) -> str:
    """``user`` after ``CONTEXT_TURNS[k]`` earlier conversations, k cycling per round of categories."""
    from dflashbench.reference.corpus import demo_prompts

    turns = CONTEXT_TURNS[(i // max(categories, 1)) % len(CONTEXT_TURNS)]
    if not turns:
        return user
    earlier = demo_prompts(turns, f"context-{seed}-{i}")
    text = "\n\n".join(f"User: {c.user}\nAssistant: {c.assistant}" for c in earlier)
    return f"Earlier in this conversation:\n\n{text}\n\nNow, the next request.\n{user}"


def _reference(conv) -> dict[str, str]:
    """A math conversation's reference answer (the corpus answer's boxed number) and its grading rule."""
    from dflashbench.workloads.grading import last_boxed

    answer = last_boxed(conv.assistant) if conv.category == "math" else None
    return {"answer": answer, "grader": "gsm8k"} if answer else {}
