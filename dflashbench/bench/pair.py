"""AR vs DFlash on a model pair, side by side: tau per category, time per output token, and losslessness.

For every built-in demo prompt (chat template applied, thinking off), greedy, single stream, the same prompt is
decoded with AR and with DFlash back to back (``repeats`` times each, alternating; the median is kept), so both
methods see the same machine load. Time per output token (TPOT) follows the paper: decode time after the first
token (prefill and the first token excluded) divided by the tokens after the first; a category's TPOT is its
total decode time over its total tokens. Lossless: the DFlash tokens must equal the AR tokens on every prompt.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from dflashbench.bench.common import torch_threads
from dflashbench.errors import UserError
from dflashbench.reference.corpus import CATEGORIES, demo_prompts
from dflashbench.reference.decode import SamplingParams, decode_steps
from dflashbench.reference.dflash.checkpoint import check_draft_fits, load_draft
from dflashbench.reference.dflash.drafter import DFlashDrafter
from dflashbench.reference.drafters import NullDrafter
from dflashbench.reference.target import load_target


@dataclass
class PairBenchConfig:
    model: str
    draft: str
    num_prompts: int = 24
    block_size: int | None = None  # default: the drafter's own
    max_new_tokens: int = 128
    repeats: int = 1
    seed: int = 0  # demo prompt seed
    threads: int | None = 1

    def __post_init__(self) -> None:
        if self.block_size is not None and self.block_size < 2:
            raise UserError(f"--block-size must be at least 2 (got {self.block_size})")


@dataclass
class Run:
    token_ids: list[int]
    accept_lengths: list[int]
    decode_s: float  # after the first token

    @property
    def tau(self) -> float:
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else float("nan")


@dataclass
class PromptResult:
    category: str
    prompt: str
    ar: Run
    dflash: Run

    @property
    def lossless(self) -> bool:
        return self.ar.token_ids == self.dflash.token_ids


@dataclass
class PairBenchResult:
    config: PairBenchConfig
    block_size: int
    threads: int
    prompts: list[PromptResult] = field(default_factory=list)

    def summary(self) -> dict[str, dict[str, float]]:
        """Per category and "all": prompts, mean tau, output tokens, TPOT (ms) of AR and DFlash, speedup."""
        out = {}
        cats = [c for c in CATEGORIES if any(p.category == c for p in self.prompts)]
        for cat in [*cats, "all"]:
            ps = [p for p in self.prompts if cat in ("all", p.category)]
            ar_tpot = _tpot([p.ar for p in ps])
            df_tpot = _tpot([p.dflash for p in ps])
            out[cat] = {
                "prompts": len(ps),
                "tau": statistics.mean(p.dflash.tau for p in ps),
                "output_tokens": statistics.mean(len(p.dflash.token_ids) for p in ps),
                "ar_tpot_ms": ar_tpot * 1e3,
                "dflash_tpot_ms": df_tpot * 1e3,
                "speedup": ar_tpot / df_tpot,
                "lossless": sum(p.lossless for p in ps),
            }
        return out

    @property
    def all_lossless(self) -> bool:
        return all(p.lossless for p in self.prompts)


def _tpot(runs: list[Run]) -> float:
    tokens = sum(max(0, len(r.token_ids) - 1) for r in runs)
    return sum(r.decode_s for r in runs) / max(1, tokens)


def timed_decode(target, drafter, prompt_ids: list[int], params: SamplingParams) -> Run:
    """Decode one prompt, timing everything after the first (prefill) token."""
    tokens: list[int] = []
    accepts: list[int] = []
    steps = decode_steps(target, drafter, prompt_ids, params)
    first = next(steps)  # prefill + first token (not timed)
    tokens += first.token_ids
    t0 = time.perf_counter()
    for out in steps:
        tokens += out.token_ids
        if out.verified:
            accepts.append(out.accepted + 1)
    return Run(tokens, accepts, time.perf_counter() - t0)


def encode_prompts(tokenizer, convs) -> list[list[int]]:
    """Prompt token ids of demo conversations: the chat template applied, thinking off, ready for the answer."""
    encoded = [
        tokenizer.apply_chat_template(c.messages(with_answer=False), add_generation_prompt=True,
                                      enable_thinking=False, tokenize=True, return_dict=False)
        for c in convs
    ]  # fmt: skip
    return [list(e["input_ids"]) if isinstance(e, dict) else list(e) for e in encoded]


def _median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.decode_s)[len(runs) // 2]


def run_pair_bench(cfg: PairBenchConfig, progress=None) -> PairBenchResult:
    """``progress(i, n, result)`` is called after each prompt (the CLI prints a line)."""
    with torch_threads(cfg.threads):
        return _run(cfg, progress)


def _run(cfg: PairBenchConfig, progress) -> PairBenchResult:
    target = load_target(cfg.model, dtype="float32")
    draft = load_draft(cfg.draft, dtype="float32")
    check_draft_fits(draft.config, target)
    if cfg.block_size is not None:
        draft.config.block_size = cfg.block_size  # a drafter can run with any block up to its trained one
    dflash, ar = DFlashDrafter(draft, target), NullDrafter()
    params = SamplingParams(cfg.max_new_tokens, 0.0, tuple(target.stop_token_ids()))
    convs = demo_prompts(cfg.num_prompts, cfg.seed)
    encoded = encode_prompts(target.tokenizer, convs)
    with torch.inference_mode():  # warm-up: first calls allocate and pick kernels
        timed_decode(target, ar, encoded[0], SamplingParams(8, 0.0))
        timed_decode(target, dflash, encoded[0], SamplingParams(8, 0.0))
    result = PairBenchResult(cfg, draft.config.block_size, torch.get_num_threads())
    for i, (conv, ids) in enumerate(zip(convs, encoded, strict=True)):
        ar_runs, df_runs = [], []
        with torch.inference_mode():
            for _ in range(cfg.repeats):
                ar_runs.append(timed_decode(target, ar, ids, params))
                df_runs.append(timed_decode(target, dflash, ids, params))
        pr = PromptResult(conv.category, conv.user, _median_run(ar_runs), _median_run(df_runs))
        result.prompts.append(pr)
        if progress is not None:
            progress(i + 1, len(convs), pr)
    return result


def format_report(result: PairBenchResult) -> str:
    cfg = result.config
    lines = [
        f"AR vs DFlash, greedy, single stream, block {result.block_size}, {len(result.prompts)} demo prompts, "
        f"max {cfg.max_new_tokens} new tokens, {cfg.repeats} repeat(s), torch threads {result.threads}",
        f"target {cfg.model}",
        f"draft  {cfg.draft}",
        "",
        f"{'category':<10} {'prompts':>7} {'tokens':>7} {'tau':>6} {'AR ms/tok':>10} {'DFlash ms/tok':>14} "
        f"{'speedup':>8} {'lossless':>9}",
    ]
    for cat, s in result.summary().items():
        lines.append(
            f"{cat:<10} {s['prompts']:>7} {s['output_tokens']:>7.1f} {s['tau']:>6.2f} {s['ar_tpot_ms']:>10.2f} "
            f"{s['dflash_tpot_ms']:>14.2f} {s['speedup']:>7.2f}x {s['lossless']:>4}/{s['prompts']:<4}"
        )
    bad = [p for p in result.prompts if not p.lossless]
    lines.append("")
    lines.append("lossless: DFlash greedy == AR greedy on every prompt" if not bad else
                 f"NOT LOSSLESS on {len(bad)} prompt(s): {', '.join(repr(p.prompt[:40]) for p in bad[:3])}")
    return "\n".join(lines)


def to_json(result: PairBenchResult) -> dict:
    return {
        "config": vars(result.config),
        "block_size": result.block_size,
        "threads": result.threads,
        "summary": result.summary(),
        "all_lossless": result.all_lossless,
        "prompts": [
            {"category": p.category, "prompt": p.prompt, "tau": p.dflash.tau, "tokens": len(p.dflash.token_ids),
             "ar_decode_s": p.ar.decode_s, "dflash_decode_s": p.dflash.decode_s, "lossless": p.lossless}
            for p in result.prompts
        ],
    }  # fmt: skip
