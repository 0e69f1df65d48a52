"""The built-in synthetic workload of the embedded default: prompts from dflashbench's own chat corpus.

Categories math, code and writing mimic the real suites (GSM8K-style problems, small Python functions, prose);
see :mod:`dflashbench.reference.corpus`. Prompts are generated, never downloaded: the same seed gives the same
prompts on every machine, and none of them is drawn from the corpus the embedded pair was trained on.
Math prompts carry the corpus's own answer as their reference (graded like GSM8K: the final number).
"""

from __future__ import annotations

from dflashbench.plan.suites import WorkloadSpec
from dflashbench.types import Request
from dflashbench.workloads.base import Workload

CATEGORIES = ("math", "code", "writing")
DEFAULT_NUM_PROMPTS = 24


class Synthetic(Workload):
    name = "synthetic"
    description = "built-in synthetic chat prompts (math, code, writing) for the embedded tiny model pair"
    hf_id = None
    default_max_tokens = 96

    def categories(self, config: str | None) -> tuple[str, ...]:
        return CATEGORIES

    def source_label(self, config: str | None, split: str) -> str:
        return "the built-in synthetic corpus"

    def generate(self, spec: WorkloadSpec, num_prompts: int | None, seed: int) -> list[Request]:
        """``num_prompts`` prompts (round-robin over the categories), generated from ``seed``."""
        from dflashbench.reference.corpus import demo_prompts

        self.resolve_config(spec.config)
        cats = tuple(c for c in CATEGORIES if spec.categories is None or c in spec.categories)
        self.check_categories(spec.categories, None)
        n = num_prompts if num_prompts is not None else DEFAULT_NUM_PROMPTS
        return [
            self.request(spec, id=f"s{seed}-{i}", category=conv.category, turns=[conv.user], **_reference(conv))
            for i, conv in enumerate(demo_prompts(n, seed, cats))
        ]


def _reference(conv) -> dict[str, str]:
    """A math conversation's reference answer (the corpus answer's boxed number) and its grading rule."""
    from dflashbench.workloads.grading import last_boxed

    answer = last_boxed(conv.assistant) if conv.category == "math" else None
    return {"answer": answer, "grader": "gsm8k"} if answer else {}
