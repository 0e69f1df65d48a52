"""The same-budget rule (issue #33): scheduler and memory flags go to every method's server or to none, for every
registry entry, engine and GPU architecture."""

from __future__ import annotations

import pytest

from dflashbench.plan import models
from dflashbench.plan.models import ModelEntry, budget_args, budget_problems, registry


@pytest.mark.parametrize("entry", registry().models, ids=lambda e: e.name)
def test_every_method_gets_the_same_scheduler_and_memory_flags(entry):
    assert budget_problems(entry) == []


def test_gemma_4_31b_gives_its_dflash_batch_budget_to_every_method():
    gemma = models.require("gemma-4-31b-it")
    for method in ("ar", "eagle3", "dflash"):
        args = gemma.recipe_args("vllm", models.Method(method))
        assert args[args.index("--max-num-batched-tokens") + 1] == "32768"


def test_a_budget_flag_for_one_method_only_is_caught():
    raw = models.require("gemma-4-31b-it").model_dump()
    raw["recipes"]["vllm"]["all"] = ["--attention-backend", "triton_attn"]
    raw["recipes"]["vllm"]["dflash"] = ["--max-num-batched-tokens", "32768", "--trust-remote-code"]  # as it was
    problems = budget_problems(ModelEntry.model_validate(raw))
    assert problems == ["gemma-4-31b-it vllm: ar: none; eagle3: none; dflash: [('--max-num-batched-tokens', '32768')]; "
                        "ngram: none"]
    raw["recipes"]["vllm"]["dflash"] = []
    raw["recipes"]["sglang"]["gpu"]["blackwell"]["dflash"] = ["--mem-fraction-static=0.8"]  # bound to one arch
    assert budget_problems(ModelEntry.model_validate(raw))[0].startswith("gemma-4-31b-it sglang blackwell: ")


def test_budget_args_reads_both_spellings_and_bare_switches():
    assert budget_args(["--max-num-seqs=64", "--trust-remote-code", "--disable-radix-cache", "--mem-fraction-static",
                        "0.75"]) == [("--disable-radix-cache", None), ("--max-num-seqs", "64"),
                                     ("--mem-fraction-static", "0.75")]  # fmt: skip
