"""Code generation: HumanEval, MBPP (sanitized), LiveCodeBench.

Prompt formats of the DFlash benchmark: HumanEval wraps the function stub in a "Write a solution ... passes
the tests" instruction and a python fence; MBPP sends its ``prompt`` as is; LiveCodeBench uses the LCB
system instruction, the question, and either the starter code or a "# YOUR CODE HERE" block, all in one
user turn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dflashbench.errors import UserError
from dflashbench.types import Request
from dflashbench.workloads.base import Workload, offline, read_data_files
from dflashbench.workloads.spec import WorkloadSpec

HUMANEVAL_TEMPLATE = (
    "Write a solution to the following problem and make sure that it passes the tests:\n```python\n{prompt}\n```"
)
LCB_SYSTEM = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will "
    "generate a correct Python program that matches the specification and passes all tests. You will NOT "
    "return anything except for the program"
)
LCB_FILES = ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl", "test6.jsonl")


class HumanEval(Workload):
    name = "humaneval"
    description = "HumanEval function completion (openai/openai_humaneval, test: 164 rows)"
    hf_id = "openai/openai_humaneval"
    card_rows = {"test": 164}
    layout = ("openai_humaneval/{split}-*.parquet", "{split}-*.parquet")

    def categories(self, config: str | None) -> tuple[str, ...]:
        return ("code",)

    def to_request(self, row: dict[str, Any], index: int, spec: WorkloadSpec) -> Request:
        return self.request(
            spec,
            id=row.get("task_id") or str(index),
            category="code",
            turns=[HUMANEVAL_TEMPLATE.format(prompt=row["prompt"])],
            entry_point=row.get("entry_point"),
        )


class Mbpp(Workload):
    name = "mbpp"
    description = "MBPP Python problems (google-research-datasets/mbpp, sanitized, test: 257 rows)"
    hf_id = "google-research-datasets/mbpp"
    configs = ("sanitized", "full")
    card_rows = {"sanitized/test": 257}
    layout = ("{config}/{split}-*.parquet",)

    def categories(self, config: str | None) -> tuple[str, ...]:
        return ("code",)

    def to_request(self, row: dict[str, Any], index: int, spec: WorkloadSpec) -> Request:
        text = row.get("prompt") or row.get("text")  # sanitized: "prompt"; full: "text"
        return self.request(spec, id=str(row.get("task_id", index)), category="code", turns=[text])


def lcb_prompt(question: str, starter_code: str | None) -> str:
    if starter_code:
        fmt = f"### Format: Use the following code structure:\n```python\n{starter_code}\n```"
    else:
        fmt = "### Format: Write your code in the following format:\n```python\n# YOUR CODE HERE\n```"
    return f"{LCB_SYSTEM}\n\n### Question:\n{question}\n\n{fmt}\n\n### Answer: (use the provided format with backticks)"


class LiveCodeBench(Workload):
    name = "livecodebench"
    description = "LiveCodeBench code generation (livecodebench/code_generation_lite, test.jsonl .. test6.jsonl)"
    hf_id = "livecodebench/code_generation_lite"
    layout = ("{split}*.jsonl",)  # test.jsonl, test2.jsonl, ... test6.jsonl

    def categories(self, config: str | None) -> tuple[str, ...]:
        return ("code",)

    def hub_rows(self, config: str | None, split: str) -> list[dict[str, Any]]:
        # The Hub repository is a loading script plus JSON Lines files; newer `datasets` runs no scripts,
        # so the files are fetched (through the same cache) and read directly.
        from huggingface_hub import hf_hub_download

        paths = []
        for name in LCB_FILES:
            try:
                paths.append(Path(hf_hub_download(self.hf_id, name, repo_type="dataset")))
            except Exception as exc:  # noqa: BLE001 - offline, not cached, no network: all "not available"
                raise UserError(
                    f"dataset {self.hf_id} file {name} is "
                    + ("offline and not in the Hugging Face cache" if offline() else "not available")
                    + f" ({type(exc).__name__}). Either pass --data PATH with a folder holding "
                    f"{', '.join(LCB_FILES)}, or fetch them on a machine with network: "
                    f"hf download {self.hf_id} {' '.join(LCB_FILES)} --repo-type dataset"
                ) from None
        return read_data_files(paths)

    def to_request(self, row: dict[str, Any], index: int, spec: WorkloadSpec) -> Request:
        return self.request(
            spec,
            id=row.get("question_id") or str(index),
            category="code",
            turns=[lcb_prompt(row["question_content"], row.get("starter_code"))],
            difficulty=row.get("difficulty"),
            platform=row.get("platform"),
        )
