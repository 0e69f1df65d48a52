"""Math word problems and competition math: GSM8K, MATH-500, AIME 2025.

Prompt format of the DFlash benchmark: the problem text, then "Please reason step by step, and put your
final answer within \\boxed{}." on its own line. Each request carries the dataset's reference answer and the
rule that grades it (``metadata["answer"]``, ``metadata["grader"]``; see :mod:`dflashbench.workloads.grading`).
"""

from __future__ import annotations

from typing import Any

from dflashbench.types import Request
from dflashbench.workloads.base import MATH_SUFFIX, Workload
from dflashbench.workloads.grading import gsm8k_reference
from dflashbench.workloads.spec import WorkloadSpec


class Gsm8k(Workload):
    name = "gsm8k"
    description = "GSM8K grade-school math word problems (openai/gsm8k, main, test: 1,319 rows)"
    hf_id = "openai/gsm8k"
    configs = ("main", "socratic")
    card_rows = {"main/test": 1319}
    layout = ("{config}/{split}-*.parquet",)

    def to_request(self, row: dict[str, Any], index: int, spec: WorkloadSpec) -> Request:
        return self.request(spec, id=str(index), category="math", turns=[row["question"] + MATH_SUFFIX],
                            answer=gsm8k_reference(str(row.get("answer") or "")), grader="gsm8k")


class Math500(Workload):
    name = "math500"
    description = "MATH-500 competition problems (HuggingFaceH4/MATH-500, test: 500 rows)"
    hf_id = "HuggingFaceH4/MATH-500"
    card_rows = {"test": 500}
    layout = ("{split}.jsonl", "{split}-*.parquet", "data/{split}-*.parquet")

    def to_request(self, row: dict[str, Any], index: int, spec: WorkloadSpec) -> Request:
        return self.request(
            spec,
            id=row.get("unique_id") or str(index),
            category="math",
            turns=[row["problem"] + MATH_SUFFIX],
            subject=row.get("subject"),
            level=row.get("level"),
            answer=row.get("answer"),
            grader="math",
        )


class Aime25(Workload):
    name = "aime25"
    description = "AIME 2025 I and II (MathArena/aime_2025, train: 30 rows)"
    hf_id = "MathArena/aime_2025"
    card_rows = {"train": 30}
    split = "train"
    layout = ("data/{split}-*.parquet", "{split}-*.parquet")

    def to_request(self, row: dict[str, Any], index: int, spec: WorkloadSpec) -> Request:
        answer = row.get("answer")
        return self.request(
            spec, id=str(row.get("problem_idx", index)), category="math", turns=[row["problem"] + MATH_SUFFIX],
            answer=None if answer is None else str(answer), grader="aime",
        )
