"""``dflashbench bench batching``: how the reference decoder's throughput grows with concurrency, without HTTP.

The serving engine's loop, in process: a closed loop over the built-in demo prompts at each concurrency C (C
requests in flight; those that finish are replaced before the next step, and replacements admitted together
are prefilled together, as the engine does), for each method on a model pair. Within a round every
concurrency level runs back to back, and rounds repeat: each level's throughput is divided by that of C=1
*in the same round* and the median of those ratios is reported. On a shared machine whose speed drifts from
minute to minute, only such paired ratios can be trusted. Also reported: the median step time at each batch
size, the prefill time per request, and losslessness (under batching, every request's greedy output equals
its output alone).

The step bound says how much of the ratio the decoder step itself allows: ``C * step(B=1) / step(B=C)``,
paired per round like the ratio. It is the ratio a closed loop would reach if every step ran a full batch
and nothing else took time (no prefill, no ramp-down), as every row commits the same tokens per step at any
batch size (lossless). A measured ratio well under its bound points at serving overheads; a bound under the
target says no scheduler can reach it on this machine, only a cheaper batched step can.

What this leaves out, by design: HTTP, tokenization and the client. ``dflashbench sweep`` measures those
too; the gap between the two is what serving costs on top of decoding.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

import torch

from dflashbench.bench.common import torch_threads
from dflashbench.bench.pair import encode_prompts
from dflashbench.errors import UserError
from dflashbench.reference.corpus import demo_prompts
from dflashbench.reference.decode import DecodeBatch, SamplingParams
from dflashbench.reference.dflash.checkpoint import check_draft_fits, load_draft
from dflashbench.reference.dflash.drafter import DFlashDrafter
from dflashbench.reference.drafters import NullDrafter
from dflashbench.reference.target import load_target

METHODS = ("ar", "dflash")


@dataclass
class BatchingBenchConfig:
    model: str
    draft: str | None = None  # DFlash drafter (needed for method dflash)
    methods: tuple[str, ...] = METHODS
    concurrency: tuple[int, ...] = (1, 2, 4)
    num_prompts: int = 32
    max_new_tokens: int = 96
    rounds: int = 3
    seed: int = 0  # demo prompt seed
    threads: int | None = 1
    device: str = "cpu"
    dtype: str | None = None  # None: float32 (the embedded pair's own), as on the CPU

    def __post_init__(self) -> None:
        self.methods = tuple(dict.fromkeys(str(m) for m in self.methods))  # a Method is a str too
        if not self.methods or any(m not in METHODS for m in self.methods):
            raise UserError(f"--method {','.join(self.methods)}: choose from {', '.join(METHODS)}")
        self.concurrency = tuple(sorted({1, *self.concurrency}))  # c=1 always runs: the ratios' base
        for flag, value in (("--concurrency", self.concurrency[0]), ("--num-prompts", self.num_prompts),
                            ("--max-new-tokens", self.max_new_tokens), ("--rounds", self.rounds)):  # fmt: skip
            if value < 1:
                raise UserError(f"{flag} must be at least 1 (got {value})")


@dataclass
class LevelRun:
    """One closed-loop run of every prompt at one concurrency."""

    method: str
    concurrency: int
    round: int
    elapsed_s: float
    prefill_s: list[float]  # per prefill pass (every prompt has one; several may share a pass)
    step_s: dict[int, list[float]]  # batch size -> step times
    outputs: list[list[int]]  # per prompt

    @property
    def output_tokens(self) -> int:
        return sum(map(len, self.outputs))

    @property
    def tok_per_s(self) -> float:
        return self.output_tokens / self.elapsed_s


@dataclass
class BatchingBenchResult:
    config: BatchingBenchConfig
    threads: int
    runs: list[LevelRun] = field(default_factory=list)

    def lossless(self, method: str) -> bool:
        """Every concurrency's outputs equal those of C=1 (the single stream), prompt for prompt, every round."""
        alone = [r.outputs for r in self.runs if r.method == method and r.concurrency == 1]
        return bool(alone) and all(r.outputs == alone[0] for r in self.runs if r.method == method)

    def summary(self) -> list[dict]:
        """Per method and concurrency: median tok/s, median paired ratio to C=1, median paired step bound,
        step ms at batch size C, prefill ms per request."""
        rows = []
        for method in self.config.methods:
            alone = [r for r in self.runs if r.method == method and r.concurrency == 1]
            base = {r.round: r.tok_per_s for r in alone}
            base_steps = {r.round: r.step_s.get(1, []) for r in alone}
            for c in self.config.concurrency:
                runs = [r for r in self.runs if r.method == method and r.concurrency == c]
                if not runs:
                    continue
                steps = [s for r in runs for s in r.step_s.get(c, [])]
                bounds = [b for r in runs if (b := step_bound(base_steps.get(r.round, []), r.step_s.get(c, []), c))]
                prefill = sum(sum(r.prefill_s) for r in runs) / sum(len(r.outputs) for r in runs)
                rows.append({
                    "method": method,
                    "concurrency": c,
                    "tok_per_s": statistics.median(r.tok_per_s for r in runs),
                    "ratio_to_c1": paired_ratio([(base[r.round], r.tok_per_s) for r in runs if r.round in base]),
                    "step_bound_to_c1": statistics.median(bounds) if bounds else None,  # paired per round
                    "step_ms_at_c": statistics.median(steps) * 1e3 if steps else None,
                    "prefill_ms_per_request": prefill * 1e3,
                    "rounds": len(runs),
                })  # fmt: skip
        return rows


def step_bound(step_at_1_s: list[float], step_at_c_s: list[float], concurrency: int) -> float | None:
    """``C * median step time at B=1 / median step time at B=C``: the throughput ratio to C=1 of steps that
    each commit C rows instead of one (``None`` without both)."""
    if not step_at_1_s or not step_at_c_s:
        return None
    return concurrency * statistics.median(step_at_1_s) / statistics.median(step_at_c_s)


def paired_ratio(pairs: list[tuple[float, float]]) -> float | None:
    """Median of ``new / base`` over pairs measured side by side (``None`` with no pairs)."""
    return statistics.median(new / base for base, new in pairs) if pairs else None


def closed_loop(target, drafter, prompts: list[list[int]], params: SamplingParams, concurrency: int,
                method: str = "", round_: int = 0) -> LevelRun:
    """Every prompt through one DecodeBatch with ``concurrency`` requests in flight; timed from the first
    prefill to the last step. On a GPU each timed call ends synchronised: prefill and step both read their
    chosen tokens back to the host (``int``/``tolist``) before they return."""
    batch = DecodeBatch(target, drafter)
    queue = deque(range(len(prompts)))
    outputs: list[list[int]] = [[] for _ in prompts]
    step_s: dict[int, list[float]] = defaultdict(list)
    prefill_s: list[float] = []
    start = time.perf_counter()
    while queue or batch.rows:
        joining = [queue.popleft() for _ in range(min(len(queue), concurrency - len(batch.rows)))]
        if joining:
            t = time.perf_counter()
            outs = batch.add_many([(prompts[i], params, i) for i in joining])
            prefill_s.append(time.perf_counter() - t)
            for o in outs:
                outputs[o.row.tag] += o.token_ids
        if batch.rows:
            size, t = len(batch.rows), time.perf_counter()
            outs = batch.step()
            step_s[size].append(time.perf_counter() - t)
            for o in outs:
                outputs[o.row.tag] += o.token_ids
    elapsed = time.perf_counter() - start
    return LevelRun(method, concurrency, round_, elapsed, prefill_s, dict(step_s), outputs)


def run_batching_bench(cfg: BatchingBenchConfig, progress=None) -> BatchingBenchResult:
    """``progress(run)`` is called after each closed-loop run (the CLI prints a line)."""
    with torch_threads(cfg.threads), torch.inference_mode():
        return _run(cfg, progress)


def _run(cfg: BatchingBenchConfig, progress) -> BatchingBenchResult:
    target = load_target(cfg.model, device=cfg.device, dtype=cfg.dtype or "float32")
    drafters = {}
    for method in cfg.methods:
        if method == "ar":
            drafters[method] = NullDrafter()
        else:
            draft = load_draft(cfg.draft, device=target.device, dtype=target.dtype)
            check_draft_fits(draft.config, target)
            drafters[method] = DFlashDrafter(draft, target)
    prompts = encode_prompts(target.tokenizer, demo_prompts(cfg.num_prompts, cfg.seed))
    params = SamplingParams(cfg.max_new_tokens, 0.0, tuple(target.stop_token_ids()))
    for drafter in drafters.values():  # warm-up: first calls allocate and pick kernels
        closed_loop(target, drafter, prompts[:2], SamplingParams(8, 0.0), 2)
    result = BatchingBenchResult(cfg, torch.get_num_threads())
    for round_ in range(cfg.rounds):
        for method, drafter in drafters.items():
            for c in cfg.concurrency:
                run = closed_loop(target, drafter, prompts, params, c, method, round_)
                result.runs.append(run)
                if progress is not None:
                    progress(run)
    return result


def format_report(result: BatchingBenchResult) -> str:
    cfg = result.config
    lines = [
        f"Reference decoder in process, closed loop, greedy: {cfg.num_prompts} demo prompts, max {cfg.max_new_tokens} "
        f"new tokens, {cfg.rounds} round(s), {cfg.device} {cfg.dtype or 'float32'}, torch threads {result.threads}",
        f"target {cfg.model}" + (f"\ndraft  {cfg.draft}" if "dflash" in cfg.methods else ""),
        "",
        f"{'method':<7} {'conc':>4} {'tok/s':>8} {'x c=1':>7} {'step bound':>10} {'step ms @ B=conc':>17} "
        f"{'prefill ms/req':>15}",
    ]
    for row in result.summary():
        ratio, bound = _or_dash(row["ratio_to_c1"], "x"), _or_dash(row["step_bound_to_c1"], "x")
        step = _or_dash(row["step_ms_at_c"])
        lines.append(f"{row['method']:<7} {row['concurrency']:>4} {row['tok_per_s']:>8.1f} {ratio:>7} {bound:>10} "
                     f"{step:>17} {row['prefill_ms_per_request']:>15.2f}")
    lines.append("")
    lines.append("x c=1: median over rounds of (tok/s at this concurrency) / (tok/s at c=1 in the same round)")
    lines.append("step bound: conc x (step ms at B=1) / (step ms at B=conc), paired per round: the x c=1 that full "
                 "steps alone would give, with no prefill or ramp-down")
    for method in cfg.methods:
        lines.append(f"{method}: " + ("lossless, every output equals its single-stream output" if result.lossless(method)
                                      else "NOT LOSSLESS: some output under batching differs from its single stream"))
    return "\n".join(lines)


def _or_dash(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def to_json(result: BatchingBenchResult) -> dict:
    return {
        "config": {**vars(result.config), "methods": list(result.config.methods),
                   "concurrency": list(result.config.concurrency)},
        "threads": result.threads,
        "summary": result.summary(),
        "lossless": {m: result.lossless(m) for m in result.config.methods},
        "runs": [
            {"method": r.method, "concurrency": r.concurrency, "round": r.round, "elapsed_s": r.elapsed_s,
             "output_tokens": r.output_tokens, "tok_per_s": r.tok_per_s, "prefill_s": r.prefill_s,
             "step_s": {str(b): s for b, s in sorted(r.step_s.items())}}
            for r in result.runs
        ],
    }  # fmt: skip
