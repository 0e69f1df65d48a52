"""``dflashbench bench decoder``: what the reference decoder's mechanics cost, on a random-weight target.

Measures, at a chosen model shape: one AR step (1 token against a ``context``-token cache), one DFlash
draft pass (anchor + K-1 masks against the drafter's context cache), one verify pass (K tokens against the
target cache), and end-to-end tokens/s of AR vs DFlash with an *oracle* drafter that always proposes the
target's own next tokens (tau = K): the mechanical ceiling of the decoder. The oracle is timed twice: alone
(no draft compute) and with the real draft network run and its proposals discarded (the ceiling a perfect
drafter of this size would reach). Timing wraps whole calls, with a CUDA synchronise on GPU. The AR step asks the target
for no hidden states (AR decoding needs none); the verify pass asks for the drafter's layers, as DFlash does.

The oracle's proposals are the target's greedy AR output. Where a K-token verify pass picks another argmax
than the 1-token AR step did (bf16 on a GPU, with random weights' near-tied logits), the oracle is rejected
there; its measured tau is reported beside its tok/s, so a ceiling below K is visible as such.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from dflashbench.bench.common import median_seconds
from dflashbench.errors import UserError
from dflashbench.reference.random_pair import SHAPES


@dataclass
class DecoderBench:
    shape: str
    device: str
    dtype: str
    block_size: int
    context: int
    ar_step_ms: float
    draft_pass_ms: float
    verify_pass_ms: float
    ar_tok_per_s: float
    oracle_tok_per_s: float
    oracle_with_draft_tok_per_s: float
    new_tokens: int
    oracle_tau: float = float("nan")  # tokens per verify step the oracle drafter actually got accepted

    @property
    def verify_over_ar(self) -> float:
        """The paper's premise on a GPU: verifying K tokens costs about one AR step (ratio near 1)."""
        return self.verify_pass_ms / self.ar_step_ms

    @property
    def draft_over_ar(self) -> float:
        return self.draft_pass_ms / self.ar_step_ms

    def to_dict(self) -> dict:
        return {**asdict(self), "verify_over_ar": self.verify_over_ar, "draft_over_ar": self.draft_over_ar}


def _timer(device: torch.device) -> Callable[[Callable[[], object], int], float]:
    def run(fn: Callable[[], object], reps: int) -> float:
        """Median milliseconds of ``fn`` over ``reps`` runs, after one warm-up."""
        return median_seconds(fn, reps, warmup=1, device=device) * 1e3

    return run


def run_decoder_bench(shape: str = "small", *, device: str = "cpu", dtype: str | None = None, block_size: int = 16,
                      context: int = 128, new_tokens: int = 64, reps: int = 10, seed: int = 0) -> DecoderBench:
    from dflashbench.reference.decode import SamplingParams, ar_decode, generate
    from dflashbench.reference.dflash.drafter import DFlashDrafter
    from dflashbench.reference.drafters import OracleDrafter
    from dflashbench.reference.target import TargetKV, _check_device
    from dflashbench.reference.tiny import tiny_draft, tiny_target
    from dflashbench.reference.weights import parse_dtype

    if shape not in SHAPES:
        raise UserError(f"unknown shape {shape!r}; choose one of: {', '.join(SHAPES)}")
    _check_device(device)
    torch_dtype = parse_dtype(dtype) or (torch.bfloat16 if device.startswith("cuda") else torch.float32)
    kw, draft_layers = SHAPES[shape].target_kwargs(), SHAPES[shape].dflash_layers
    target = tiny_target(seed=seed, dtype=torch_dtype, device=device, init_std=0.02, eos_token_id=None, **kw)
    draft = tiny_draft(target, block_size=block_size, num_layers=draft_layers, seed=seed + 1, init_std=0.02,
                       intermediate_size=kw["intermediate_size"])  # the released drafters' MLP width
    drafter = DFlashDrafter(draft, target)
    dev = target.device
    timed = _timer(dev)
    prompt = torch.randint(0, kw["vocab_size"], (context,), generator=torch.Generator().manual_seed(seed)).tolist()

    kv = TargetKV(target)
    _, feats = kv.prefill([prompt], drafter.layer_ids)
    one, block = torch.tensor([[prompt[-1]]], device=dev), torch.tensor([prompt[-block_size:]], device=dev)

    def target_pass(tokens: torch.Tensor, layer_ids) -> None:  # forward, roll the cache back: context fixed
        kv.forward(tokens, layer_ids)
        kv.commit(torch.zeros(1, dtype=torch.long, device=dev))

    ar_ms = timed(lambda: target_pass(one, None), reps)
    verify_ms = timed(lambda: target_pass(block, drafter.layer_ids), reps)

    state = drafter.start(prompt, feats)
    anchors, starts = one[:, 0], torch.tensor([context], device=dev)
    no_ctx = torch.zeros(1, dtype=torch.long, device=dev)

    def draft_pass() -> None:
        drafter.propose(state, anchors, starts, None, no_ctx)

    draft_ms = timed(draft_pass, reps)

    with torch.no_grad():
        future = prompt + ar_decode(target, prompt, max_new_tokens=new_tokens + block_size).token_ids
    params = SamplingParams(new_tokens)

    taus: list[float] = []

    def tok_per_s(make_drafter) -> float:
        ms = timed(lambda: taus.append(generate(target, make_drafter(), prompt, params).tau), max(1, reps // 4))
        return new_tokens / (ms / 1e3)

    from dflashbench.reference.drafters import NullDrafter

    ar_tok_per_s = tok_per_s(NullDrafter)
    oracle_tok_per_s = tok_per_s(lambda: OracleDrafter(future, block_size))
    oracle_tau = taus[-1]
    return DecoderBench(
        shape=shape, device=str(dev), dtype=str(torch_dtype).removeprefix("torch."), block_size=block_size,
        context=context, ar_step_ms=ar_ms, draft_pass_ms=draft_ms, verify_pass_ms=verify_ms,
        ar_tok_per_s=ar_tok_per_s, oracle_tok_per_s=oracle_tok_per_s,
        oracle_with_draft_tok_per_s=tok_per_s(lambda: OracleDrafter(future, block_size, inner=drafter)),
        new_tokens=new_tokens, oracle_tau=oracle_tau,
    )  # fmt: skip


def format_table(b: DecoderBench) -> str:
    rows = [
        ("AR step (1 token)", f"{b.ar_step_ms:.2f} ms"),
        (f"DFlash draft pass (block {b.block_size})", f"{b.draft_pass_ms:.2f} ms ({b.draft_over_ar:.2f}x AR step)"),
        (f"verify pass ({b.block_size} tokens)", f"{b.verify_pass_ms:.2f} ms ({b.verify_over_ar:.2f}x AR step)"),
        ("AR decode", f"{b.ar_tok_per_s:.1f} tok/s"),
        (f"DFlash, oracle drafter (tau {b.oracle_tau:.2f} of {b.block_size}), no draft compute",
         f"{b.oracle_tok_per_s:.1f} tok/s ({b.oracle_tok_per_s / b.ar_tok_per_s:.2f}x)"),
        ("DFlash, oracle acceptance + real draft pass",
         f"{b.oracle_with_draft_tok_per_s:.1f} tok/s ({b.oracle_with_draft_tok_per_s / b.ar_tok_per_s:.2f}x)"),
    ]
    width = max(len(r[0]) for r in rows)
    head = (f"reference decoder, shape {b.shape}, {b.device} {b.dtype}, context {b.context}, "
            f"{b.new_tokens} new tokens, {torch.get_num_threads()} CPU threads")
    return "\n".join([head, *(f"  {name:<{width}}  {value}" for name, value in rows)])
