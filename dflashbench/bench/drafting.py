"""``dflashbench bench drafting``: EAGLE-3 beside DFlash on one target, single stream, in one run.

1. **Decoding**: on the built-in demo prompts (chat template, greedy, the same ``max_new_tokens``), each prompt
   is decoded by AR, DFlash (its checkpoint's block) and EAGLE-3 at every ``k``, one after the other, so CPU
   load drifts hit all methods alike. Per method: tau (mean tokens per verification step, bonus included),
   TPOT = (end - first token) / (tokens - 1) summed over prompts, speedup = AR TPOT / method TPOT, per-category
   tau, and a lossless check (every method's tokens == AR's).
2. **Drafting cost**: the time of one ``propose`` (drafting ``n`` tokens after a verified step; median of
   ``repeats``) on the first prompt. DFlash drafts ``n`` tokens with one pass over a block of ``n + 1``; EAGLE-3
   with ``n`` chained passes of its head. A least-squares line ``a + b*n`` summarises each curve.

Timing is outside the decode loop (:func:`~dflashbench.bench.pair.timed_decode`, as ``bench pair``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dflashbench.bench.common import median_seconds, torch_threads
from dflashbench.errors import UserError

DEFAULT_CURVE = (1, 2, 3, 4, 5, 6, 8, 10, 12, 15)


@dataclass
class DraftingBenchConfig:
    model: str | Path
    dflash: str | Path
    eagle3: str | Path
    ks: list[int] = field(default_factory=lambda: [3, 5, 8])
    num_prompts: int = 12
    max_new_tokens: int = 128
    repeats: int = 30
    curve: tuple[int, ...] = DEFAULT_CURVE
    threads: int | None = 1  # torch's default of 2 threads is far slower for tiny models on a busy CPU
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.ks or min(self.ks) < 1:
            raise UserError(f"--k {','.join(map(str, self.ks))}: chain lengths must be at least 1")


def _prompts(tokenizer, n: int, seed: int) -> list[tuple[str, list[int]]]:
    from dflashbench.reference.corpus import demo_prompts
    from dflashbench.reference.training.tokenizer import encode_conversation

    out = []
    for conv in demo_prompts(n, seed):
        ids, mask = encode_conversation(tokenizer, conv)
        out.append((conv.category, ids[: mask.index(1)]))  # the prompt exactly as in training
    return out


def _line(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least squares ``y = a + b*x`` -> (a, b)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def drafting_curve(target, dflash_draft, head, prompt: list[int], ns, repeats: int) -> list[dict]:
    """Seconds of one propose drafting ``n`` tokens, both methods, each from a freshly primed state."""
    from dflashbench.reference.dflash.drafter import DFlashDrafter
    from dflashbench.reference.eagle3.drafter import Eagle3Drafter
    from dflashbench.reference.target import TargetKV

    dflash = DFlashDrafter(dflash_draft, target)
    layers = {"dflash": dflash.layer_ids, "eagle3": head.config.feature_layer_ids}
    feats = {name: TargetKV(target).prefill([prompt], ids)[1] for name, ids in layers.items()}
    dev = target.device
    anchors = torch.tensor([prompt[-1]], device=dev)
    starts = torch.tensor([len(prompt)], device=dev)
    no_ctx = torch.zeros(1, dtype=torch.long, device=dev)
    rows = []
    for n in ns:
        eagle = Eagle3Drafter(head, target, k=n)
        dflash.block_size = n + 1

        def seconds(drafter, f) -> float:  # each propose from a freshly primed state (setup is not timed)
            return median_seconds(lambda state: drafter.propose(state, anchors, starts, None, no_ctx), repeats,
                                  setup=lambda: drafter.start(prompt, f))

        rows.append({"drafted": n, "dflash_s": seconds(dflash, feats["dflash"]),
                     "eagle3_s": seconds(eagle, feats["eagle3"])})
    dflash.block_size = dflash_draft.config.block_size
    return rows


def run_bench(cfg: DraftingBenchConfig) -> dict:
    with torch_threads(cfg.threads), torch.inference_mode():
        return _run(cfg)


def _run(cfg: DraftingBenchConfig) -> dict:
    from dflashbench.bench.pair import timed_decode
    from dflashbench.reference.decode import SamplingParams
    from dflashbench.reference.dflash.checkpoint import check_draft_fits, load_draft
    from dflashbench.reference.dflash.drafter import DFlashDrafter
    from dflashbench.reference.drafters import NullDrafter
    from dflashbench.reference.eagle3.checkpoint import check_eagle3_fits, load_eagle3
    from dflashbench.reference.eagle3.drafter import Eagle3Drafter
    from dflashbench.reference.target import load_target

    target = load_target(cfg.model)
    draft = load_draft(cfg.dflash, device=target.device, dtype=target.dtype)
    check_draft_fits(draft.config, target)
    head = load_eagle3(cfg.eagle3, device=target.device, dtype=target.dtype)
    check_eagle3_fits(head.config, target.num_layers, target.hidden_size, target.vocab_size)
    methods = {"ar": NullDrafter(), f"dflash b{draft.config.block_size}": DFlashDrafter(draft, target)}
    methods.update({f"eagle3 k={k}": Eagle3Drafter(head, target, k=k) for k in cfg.ks})
    params = SamplingParams(cfg.max_new_tokens, 0.0, tuple(target.stop_token_ids()))
    prompts = _prompts(target.tokenizer, cfg.num_prompts, cfg.seed)
    for drafter in methods.values():  # warm-up
        timed_decode(target, drafter, prompts[0][1], SamplingParams(16, 0.0, ()))
    stats = {
        m: {"accepts": [], "seconds": 0.0, "gaps": 0, "tokens": 0, "lossless": True, "by_cat": {}}
        for m in methods
    }
    for category, prompt in prompts:
        reference = None
        for name, drafter in methods.items():
            run = timed_decode(target, drafter, prompt, params)
            reference = run.token_ids if reference is None else reference
            s = stats[name]
            s["lossless"] &= run.token_ids == reference
            s["accepts"] += run.accept_lengths
            s["by_cat"].setdefault(category, []).extend(run.accept_lengths)
            s["seconds"] += run.decode_s
            s["gaps"] += max(0, len(run.token_ids) - 1)
            s["tokens"] += len(run.token_ids)
    rows = []
    ar_tpot = stats["ar"]["seconds"] / max(1, stats["ar"]["gaps"])
    for name, s in stats.items():
        tpot = s["seconds"] / max(1, s["gaps"])
        rows.append({
            "method": name, "tau": statistics.fmean(s["accepts"]), "tpot_ms": 1e3 * tpot,
            "speedup": ar_tpot / tpot, "tokens": s["tokens"], "lossless": s["lossless"],
            "tau_by_category": {c: statistics.fmean(a) for c, a in s["by_cat"].items()},
        })  # fmt: skip
    curve = drafting_curve(target, draft, head, prompts[0][1], cfg.curve, cfg.repeats)
    fits = {
        m: _line([r["drafted"] for r in curve], [1e3 * r[f"{m}_s"] for r in curve])
        for m in ("dflash", "eagle3")
    }
    return {
        "model": str(cfg.model), "dflash": str(cfg.dflash), "eagle3": str(cfg.eagle3),
        "num_prompts": len(prompts), "max_new_tokens": cfg.max_new_tokens, "threads": torch.get_num_threads(),
        "device": str(target.device), "decoding": rows, "curve": curve, "repeats": cfg.repeats,
        "curve_fit_ms": {m: {"intercept": a, "per_token": b} for m, (a, b) in fits.items()},
    }  # fmt: skip


def format_report(r: dict) -> str:
    cats = sorted({c for row in r["decoding"] for c in row["tau_by_category"]})
    lines = [
        f"Single stream, greedy, {r['num_prompts']} demo prompts x {r['max_new_tokens']} new tokens, "
        f"{r['device']} ({r['threads']} threads); target {r['model']}",
        f"{'method':<14}{'tau':>7}{'TPOT ms':>10}{'speedup':>9}  "
        + "".join(f"{'tau ' + c:>12}" for c in cats)
        + "  lossless",
    ]
    for row in r["decoding"]:
        lines.append(
            f"{row['method']:<14}{row['tau']:>7.2f}{row['tpot_ms']:>10.2f}{row['speedup']:>8.2f}x  "
            + "".join(f"{row['tau_by_category'].get(c, float('nan')):>12.2f}" for c in cats)
            + f"  {'yes' if row['lossless'] else 'NO'}"
        )
    lines += [
        "",
        f"Drafting cost: one propose after a verified step, median of {r['repeats']} (first prompt)",
        f"{'drafted':>8}{'DFlash ms (1 pass, block n+1)':>32}{'EAGLE-3 ms (n chained passes)':>32}",
    ]
    for row in r["curve"]:
        lines.append(f"{row['drafted']:>8}{1e3 * row['dflash_s']:>32.3f}{1e3 * row['eagle3_s']:>32.3f}")
    for m, label in (("dflash", "DFlash"), ("eagle3", "EAGLE-3")):
        fit = r["curve_fit_ms"][m]
        lines.append(f"{label} fit: {fit['intercept']:.3f} ms + {fit['per_token']:.3f} ms per drafted token")
    return "\n".join(lines)
