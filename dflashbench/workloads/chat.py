"""Multi-turn chat: MT-Bench (80 two-turn questions in 8 categories).

The first turn is sent as the request; the second goes into ``followup_turns`` and is sent with the model's
own first answer as history, as the DFlash benchmark does.
"""

from __future__ import annotations

from typing import Any

from dflashbench.types import Request
from dflashbench.workloads.base import Workload
from dflashbench.workloads.spec import WorkloadSpec

MT_BENCH_CATEGORIES = ("coding", "extraction", "humanities", "math", "reasoning", "roleplay", "stem", "writing")


class MtBench(Workload):
    name = "mt-bench"
    description = "MT-Bench two-turn questions (HuggingFaceH4/mt_bench_prompts, train: 80 rows)"
    hf_id = "HuggingFaceH4/mt_bench_prompts"
    card_rows = {"train": 80}
    split = "train"
    layout = ("data/{split}-*.parquet", "raw/question.jsonl", "{split}-*.parquet")

    def categories(self, config: str | None) -> tuple[str, ...]:
        return MT_BENCH_CATEGORIES

    def to_request(self, row: dict[str, Any], index: int, spec: WorkloadSpec) -> Request:
        turns = row.get("prompt") or row.get("turns")  # the Hub parquet says "prompt", FastChat's file "turns"
        ident = row.get("prompt_id", row.get("question_id", index))
        return self.request(spec, id=str(ident), category=row["category"], turns=list(turns))
