"""The memory plan beside public engine logs: ``python tools/memory_vs_logs.py [LOGS_TOML]``.

Each log (docs/measurements/2026-11-27-memory-plan/public_logs.toml: a registry model, its engine release, GPU, tp
and memory share, and the figures its own lines print per GPU) is planned the way a sweep plans it
(:func:`dflashbench.plan.memory.server_budget`, an AR server at that release's defaults), and printed as a Markdown
table: weights as loaded and KV memory, plan against log, with the rule dflashbench used before (share x NVML's total
- the checkpoint's weights) beside them.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from dflashbench.plan import budget_terms
from dflashbench.plan.gpus import GPU_MODELS
from dflashbench.plan.memory import ServerNeeds, Share, server_budget
from dflashbench.plan.models import require, weights_gib
from dflashbench.types import Method

LOGS = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "2026-11-27-memory-plan" / "public_logs.toml"


def plan_row(log: dict) -> dict:
    """The plan's figures for one log, and the log's own."""
    entry = require(log["model"])
    gpu = GPU_MODELS[log["gpu"]]
    tp, share = log["tp"], log.get("share", 0.9)
    release = log["release"]
    setting = budget_terms.Settings(log.get("batched_tokens", budget_terms.VLLM_BATCHED_TOKENS),
                                    log.get("max_seqs", budget_terms.VLLM_MAX_SEQS),
                                    not budget_terms.older(release, budget_terms.CUDA_GRAPH_SINCE))  # fmt: skip
    mxfp4 = budget_terms.Mxfp4Moe(**entry.mxfp4.model_dump(exclude={"source"})) if entry.mxfp4 else None
    assert entry.kv is not None
    needs = ServerNeeds(Method.AR, entry.kv, weights_gib(entry), mxfp4=mxfp4, vocab_size=entry.vocab_size,
                        moe=entry.active_params_b is not None, settings=setting)  # fmt: skip
    budget = server_budget("vllm", needs, Share(share, "the log's"), gpu.memory_gib, tp, release)
    return {**log, "plan_weights_gib": budget.terms[0].gib, "plan_kv_gib": budget.kv_gib if "share" in log else None,
            "old_kv_gib": share * gpu.memory_gib - weights_gib(entry) / tp if "share" in log else None}  # fmt: skip


def rows(path: Path = LOGS) -> list[dict]:
    return [plan_row(log) for log in tomllib.loads(path.read_text())["logs"]]


def _pct(plan: float | None, log: float | None) -> str:
    if plan is None or log is None:
        return "-"
    if abs(log) < 5:  # near zero a share of it means nothing: say the gap in GiB
        return f"{plan - log:+.2f} GiB"
    return f"{plan / log - 1:+.1%}"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(found: list[dict]) -> str:
    out = ["| model | GPU | tp | vLLM | share | weights log | weights plan | diff | KV log | KV plan | diff | "
           "KV by the old rule | diff | log |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in found:
        short = r["url"].split("/")[-1] if "llm-d" in r["url"] else "vllm#" + r["url"].rsplit("/", 1)[-1]
        out.append(f"| {r['model']} | {r['gpu'].upper()} | {r['tp']} | {r['release']} | {r.get('share', '-')} | "
                   f"{_gib(r.get('weights_gib'))} | {_gib(r['plan_weights_gib'])} | "
                   f"{_pct(r['plan_weights_gib'], r.get('weights_gib'))} | {_gib(r.get('kv_gib'))} | "
                   f"{_gib(r['plan_kv_gib'])} | {_pct(r['plan_kv_gib'], r.get('kv_gib'))} | {_gib(r['old_kv_gib'])} | "
                   f"{_pct(r['old_kv_gib'], r.get('kv_gib'))} | [{short}]({r['url']}) |")  # fmt: skip
    return "\n".join(out)


if __name__ == "__main__":
    print(table(rows(Path(sys.argv[1]) if len(sys.argv) > 1 else LOGS)))
