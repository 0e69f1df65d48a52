"""SPEED-Bench (nvidia/SPEED-Bench): the speculative-decoding benchmark's qualitative and throughput configs.

- ``qualitative``: 880 rows, 80 in each of 11 categories (coding, humanities, math, multilingual, qa, rag,
  reasoning, roleplay, stem, summarization, writing); some rows are multi-turn.
- ``throughput_1k`` .. ``throughput_32k``: 1,536 rows each, 512 per entropy tier (low_entropy, mixed,
  high_entropy), padded or cut to the nominal length in tiktoken ``o200k_base`` tokens (not the target's).

The published parquet ships many rows whose ``turns`` are only a placeholder: their text must first be rebuilt
from the source datasets with NVIDIA's ``prepare_data.py`` (Model-Optimizer ``examples/specdec_bench``). Such
rows are never sent as prompts: loading stops with the exact fix, or (``on_placeholder = "skip"``) leaves them
out and says how many.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from dflashbench.errors import UserError
from dflashbench.types import Request
from dflashbench.workloads.base import Workload
from dflashbench.workloads.spec import WorkloadSpec

log = logging.getLogger(__name__)

PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
QUALITATIVE_CATEGORIES = (
    "coding", "humanities", "math", "multilingual", "qa", "rag", "reasoning", "roleplay", "stem",
    "summarization", "writing",
)  # fmt: skip
ENTROPY_TIERS = ("low_entropy", "mixed", "high_entropy")
THROUGHPUT_CONFIGS = ("throughput_1k", "throughput_2k", "throughput_8k", "throughput_16k", "throughput_32k")
PREPARE_COMMAND = "python3 prepare_data.py --dataset speed --config {config}"
PREPARED_FILE = "data/speed/{config}/test.parquet"


def is_placeholder(turns: Any) -> bool:
    """A row whose turns still hold the "fetch from the source" marker instead of prompt text."""
    return any(isinstance(t, str) and PLACEHOLDER in t for t in (turns or ()))


def placeholder_fix(config: str) -> str:
    return (
        f"rebuild the rows from their source datasets with NVIDIA's script: in a checkout of "
        f"NVIDIA/Model-Optimizer, cd examples/specdec_bench && pip install -r requirements.txt && "
        f"{PREPARE_COMMAND.format(config=config)}; then pass --data "
        f"examples/specdec_bench/{PREPARED_FILE.format(config=config)}"
    )


class SpeedBench(Workload):
    name = "speed-bench"
    description = "SPEED-Bench: qualitative (11 categories x 80) and throughput_1k..32k (3 entropy tiers x 512)"
    hf_id = "nvidia/SPEED-Bench"
    configs = ("qualitative", *THROUGHPUT_CONFIGS)
    # The card's dataset_info (https://huggingface.co/datasets/nvidia/SPEED-Bench README.md, num_examples); rows
    # still placeholders are fewer when skipped.
    card_rows = {"qualitative/test": 880, **{f"{c}/test": 1536 for c in THROUGHPUT_CONFIGS}}
    # The Hub layout, then the layout prepare_data.py writes (data/speed/<config>/test.parquet).
    layout = (
        "{config}/{split}-*.parquet",
        "{config}/{split}.parquet",
        "speed/{config}/{split}.parquet",
        "data/speed/{config}/{split}.parquet",
    )
    default_max_tokens = 4096  # the output cap SPEED-Bench's runners use

    def categories(self, config: str | None) -> tuple[str, ...]:
        return QUALITATIVE_CATEGORIES if config in (None, "qualitative") else ENTROPY_TIERS

    def to_request(self, row: dict[str, Any], index: int, spec: WorkloadSpec) -> Request:
        return self.request(
            spec,
            id=row.get("question_id") or str(index),
            category=row["category"],
            turns=list(row["turns"]),
            sub_category=row.get("sub_category"),
            source=row.get("source"),
            difficulty=row.get("difficulty"),
        )

    def select_rows(
        self, rows: list[tuple[int, dict[str, Any]]], spec: WorkloadSpec, config: str | None, wanted: set[str] | None
    ) -> list[tuple[int, dict[str, Any]]]:
        """Placeholder rows among the selected categories: stop with the fix, or leave them out."""
        rows = [(i, r) for i, r in rows if wanted is None or r.get("category") in wanted]
        held = [r for _, r in rows if is_placeholder(r.get("turns"))]
        if not held:
            return rows
        by_cat = Counter(str(r.get("category")) for r in held)
        detail = ", ".join(f"{c}: {n}" for c, n in sorted(by_cat.items()))
        what = (f"{len(held)} of {len(rows)} rows of {self.hf_id} {config}"
                + (f" (categories {', '.join(sorted(wanted))})" if wanted else "")
                + f" are placeholders, not prompts ({detail})")  # fmt: skip
        if spec.on_placeholder == "error":
            raise UserError(
                f"{what}. Fix: {placeholder_fix(config)}. Or set on_placeholder = \"skip\" on the workload "
                "to run only the rows that have text (not comparable with published SPEED-Bench figures)"
            )
        log.warning("%s; skipping them (on_placeholder = \"skip\"). To run them: %s", what, placeholder_fix(config))
        return [(i, r) for i, r in rows if not is_placeholder(r.get("turns"))]
