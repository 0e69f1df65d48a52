"""Train an EAGLE-3 head for any transformers target, on the synthetic corpus, on the CPU.

Recipe: **EAGLE-3's training-time test (TTT)**, unrolled ``ttt_steps`` (default 7) steps, with the frozen
target's embedding; only the head (``fc``, the layer, ``norm``, ``lm_head``) trains.

* Data: the same deterministic corpus stream and batches as the target and the DFlash drafter
  (:func:`~dflashbench.reference.training.common.batch_at`); the target runs once per batch (no grad) for its
  three aux layers' hidden states (``[B, S, 3H]``) and its logits.
* Step 0 (every position): entry ``t`` = (fused target features of ``t``, embedding of token ``t+1``) at
  position ``t``, causal attention over entries. It predicts token ``t+2``.
* Steps ``i = 1 .. ttt_steps-1`` (the test): the head's own pre-norm output of step ``i-1`` replaces the target
  features, with the corpus token ``t+1+i``, at position ``t+i``; each entry attends to the committed entries
  ``<= t`` and to its own entries of steps ``1..i`` - exactly what a chain query sees at inference (context,
  then its own chain), so training and decoding see the same inputs, positions and keys. It predicts token
  ``t+2+i``. As a CPU economy (not in EAGLE-3), steps ``>= 1`` run on ``anchors`` random entries per sequence
  whose step-0 prediction is an answer token (step 0 runs on all entries, as it must: they are the keys).
* Loss: per step, the cross-entropy of the head's draft-vocabulary distribution against the target's own
  next-token distribution (softmax of its logits restricted to the draft vocabulary; positions whose target
  argmax is outside it are skipped), over answer tokens; steps weighted ``0.8**i`` and summed (EAGLE-3's
  reference trainer and SpecForge use these weights).
* Draft vocabulary: the target's whole vocabulary by default (``d2t`` all zero); ``draft_vocab_size`` keeps the
  most frequent answer tokens of the first training conversations (EAGLE-3's vocabulary compression).

Aux layers: :func:`~dflashbench.reference.eagle3.config.spread_aux_layer_ids` (vLLM's default when distinct).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from dflashbench.errors import UserError
from dflashbench.reference.corpus import CATEGORIES
from dflashbench.reference.eagle3.checkpoint import save_eagle3
from dflashbench.reference.eagle3.config import Eagle3Config, spread_aux_layer_ids
from dflashbench.reference.eagle3.network import Eagle3Model
from dflashbench.reference.eagle3.ttt import ttt_unroll
from dflashbench.reference.target import extract_context_feature
from dflashbench.reference.threads import torch_threads
from dflashbench.reference.training.common import (
    batch_at,
    check_target_dir,
    heldout_batches,
    run_loop,
    start_state,
    write_record,
)

STEP_WEIGHT = 0.8


@dataclass
class Eagle3TrainConfig:
    target_dir: Path
    out_dir: Path
    k: int = 5  # chain length the head drafts by default (dflashbench.num_speculative_tokens)
    ttt_steps: int = 7
    steps: int = 1000
    seed: int = 0
    batch_size: int = 16
    lr: float = 5e-3
    warmup: int = 50
    anchors: int = 24
    max_minutes: float | None = None
    resume: bool = False
    checkpoint_every: int = 100
    intermediate_size: int | None = None  # None: the target's
    draft_vocab_size: int | None = None  # None: the target's vocabulary
    vocab_conversations: int = 2000
    heldout_conversations: int = 48
    save_dtype: str = "bfloat16"
    threads: int | None = None

    def __post_init__(self) -> None:
        check_target_dir(self.target_dir)


# -------------------------------------------------------------------------------------- training-time test


def target_outputs(
    target,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    feature_layer_ids: Sequence[int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Frozen target pass -> aux features ``[B, S, 3H]``, logits ``[B, S, V]`` (float32)."""
    with torch.no_grad():
        out = target.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return extract_context_feature(out.hidden_states, feature_layer_ids), out.logits.float()


def _soft_ce(
    head: Eagle3Model,
    normed: torch.Tensor,
    target_logits: torch.Tensor,
    mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> (summed loss, correct count, count) over ``mask``; the target distribution restricted to the draft
    vocabulary, positions whose target argmax is outside it skipped."""
    mask = mask & head.t2d[target_logits.argmax(-1)]
    if not bool(mask.any()):
        zero = normed.sum() * 0.0
        return zero, zero.detach(), zero.detach()
    logits = head.draft_logits(normed[mask]).float()  # [M, Vd]
    p = torch.softmax(target_logits[mask][:, head.draft_to_target], dim=-1)
    loss = -(p * torch.log_softmax(logits, dim=-1)).sum(-1).sum()
    correct = (head.draft_to_target[logits.argmax(-1)] == target_logits[mask].argmax(-1)).sum()
    return loss, correct.float(), mask.sum().float()


def sample_anchors(
    loss_mask: torch.Tensor, n: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to ``n`` random entries ``t`` per row whose step-0 target (token ``t+2``) is an answer token
    -> (anchors ``[B, n']``, keep ``[B, n']``)."""
    B, S = loss_mask.shape
    eligible = torch.zeros(B, S - 1, dtype=torch.bool, device=loss_mask.device)
    eligible[:, : S - 2] = loss_mask[:, 2:].bool()
    n = max(1, min(n, S - 1))
    scores = torch.rand(B, S - 1, generator=generator).to(loss_mask.device).masked_fill(~eligible, -1.0)
    anchors = scores.topk(n, dim=1).indices.sort(dim=1).values
    return anchors, eligible.gather(1, anchors)


def ttt_loss(
    head: Eagle3Model,
    target,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    steps: int,
    anchors: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, list[float]]:
    """Weighted TTT loss of one batch -> (loss, per-step top-1 agreement with the target)."""
    B, S = input_ids.shape
    if S < 3:
        raise ValueError("sequences need at least 3 tokens")
    feats, tlogits = target_outputs(target, input_ids, attention_mask, head.config.feature_layer_ids)
    answer = loss_mask.bool() & attention_mask.bool()
    idx, keep = sample_anchors(answer, anchors, generator)
    normed0, outs = ttt_unroll(head, target.embed, feats, input_ids, idx, steps)
    # step 0: entry t (t <= S-3) predicts token t+2 from the target's distribution at t+1
    loss, correct, count = _soft_ce(head, normed0[:, : S - 2], tlogits[:, 1 : S - 1], answer[:, 2:])
    total, accs = loss / count.clamp(min=1), [float(correct / count.clamp(min=1))]
    for i, normed in enumerate(outs, start=1):
        label = idx + 2 + i  # the token step i predicts
        ok = keep & (label <= S - 1)
        label = label.clamp(max=S - 1)
        mask = ok & answer.gather(1, label)
        loss, correct, count = _soft_ce(
            head, normed, tlogits.gather(1, (label - 1)[:, :, None].expand(-1, -1, tlogits.shape[-1])), mask
        )
        total = total + STEP_WEIGHT**i * loss / count.clamp(min=1)
        accs.append(float(correct / count.clamp(min=1)))
    return total, accs


# -------------------------------------------------------------------------------------------- the head


def build_head(
    target,
    *,
    k: int,
    intermediate_size: int | None = None,
    draft_ids: Sequence[int] | None = None,
    seed: int = 0,
) -> Eagle3Model:
    tc = target.config
    L = target.num_layers
    heads = int(tc.num_attention_heads)
    cfg = Eagle3Config(
        hidden_size=target.hidden_size,
        intermediate_size=int(intermediate_size or tc.intermediate_size),
        num_attention_heads=heads,
        num_key_value_heads=int(getattr(tc, "num_key_value_heads", None) or heads),
        head_dim=int(getattr(tc, "head_dim", None) or target.hidden_size // heads),
        vocab_size=target.vocab_size,
        draft_vocab_size=len(draft_ids) if draft_ids is not None else None,
        aux_layer_ids=spread_aux_layer_ids(L),
        num_target_layers=L,
        num_speculative_tokens=k,
        rms_norm_eps=float(getattr(tc, "rms_norm_eps", 1e-6)),
        rope_theta=float(
            getattr(tc, "rope_theta", None)
            or (getattr(tc, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
        ),
        max_position_embeddings=int(getattr(tc, "max_position_embeddings", 2048)),
        bos_token_id=getattr(tc, "bos_token_id", None),
        eos_token_id=getattr(tc, "eos_token_id", None),
    )
    head = Eagle3Model(cfg)
    head.reset_parameters(std=0.02, generator=torch.Generator().manual_seed(seed))
    if draft_ids is not None:
        head.set_draft_vocab(draft_ids)
    return head.to(device=target.device, dtype=torch.float32)


def frequent_answer_tokens(tokenizer, size: int, conversations: int, seed: int) -> list[int]:
    """The ``size`` most frequent answer tokens of the first training conversations (+ the special tokens
    that end an answer), as the draft vocabulary."""
    from dflashbench.reference.corpus import training_corpus
    from dflashbench.reference.training.tokenizer import encode_conversation

    counts: Counter[int] = Counter()
    for conv in training_corpus(conversations, seed):
        ids, mask = encode_conversation(tokenizer, conv)
        counts.update(t for t, m in zip(ids, mask, strict=True) if m)
    chosen = [t for t, _ in counts.most_common(size)]
    for t in range(len(tokenizer)):  # pad with the lowest unused ids if the corpus uses fewer tokens
        if len(chosen) >= size:
            break
        if t not in counts:
            chosen.append(t)
    return sorted(chosen[:size])


@torch.no_grad()
def evaluate(head: Eagle3Model, target, batches, steps: int) -> dict[str, list[float]]:
    """Held-out top-1 agreement with the target at each unrolled step (64 anchors a sequence), per category."""
    out: dict[str, list[float]] = {}
    for cat in CATEGORIES:
        rows = [(b, [i for i, c in enumerate(b.categories) if c == cat]) for b in batches]
        sums = [0.0] * steps
        n = 0
        for b, sel in rows:
            if not sel:
                continue
            ids, attn, lm = b.input_ids[sel], b.attention_mask[sel], b.loss_mask[sel]
            _, accs = ttt_loss(
                head,
                target,
                ids,
                attn,
                lm,
                steps=steps,
                anchors=64,
                generator=torch.Generator().manual_seed(0),
            )
            sums = [s + a * len(sel) for s, a in zip(sums, accs, strict=True)]
            n += len(sel)
        if n:
            out[cat] = [round(s / n, 4) for s in sums]
    return out


def train_eagle3(cfg: Eagle3TrainConfig, *, progress: bool = True) -> dict:
    """Train (or resume) a head into ``cfg.out_dir``; returns the training record also written there."""
    with torch_threads(cfg.threads):
        return _train(cfg, progress)


def _train(cfg: Eagle3TrainConfig, progress: bool) -> dict:
    from dflashbench.reference.target import load_target

    if cfg.k < 1 or cfg.ttt_steps < 1:
        raise UserError("--k and the number of TTT steps must be at least 1")
    out = Path(cfg.out_dir)
    if not cfg.resume and (out / "checkpoint").exists():
        raise UserError(
            f"{out} already holds a training run; pass --resume to continue it or pick another --out"
        )
    target = load_target(cfg.target_dir, dtype="float32")
    for p in target.model.parameters():
        p.requires_grad_(False)
    tok = target.tokenizer
    draft_ids = None  # a resumed run passes the same options; the checkpoint restores d2t/t2d too
    if cfg.draft_vocab_size is not None and cfg.draft_vocab_size < target.vocab_size:
        draft_ids = frequent_answer_tokens(tok, cfg.draft_vocab_size, cfg.vocab_conversations, cfg.seed)
    head = build_head(
        target, k=cfg.k, intermediate_size=cfg.intermediate_size, draft_ids=draft_ids, seed=cfg.seed
    )
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    state = start_state(out, head, optimizer, cfg.resume)
    meta = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(cfg).items()}}
    last_accs: list[float] = []

    def loss_at(step: int) -> torch.Tensor:
        b = batch_at(tok, step, cfg.batch_size, cfg.seed)
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
        loss, accs = ttt_loss(
            head,
            target,
            b.input_ids,
            b.attention_mask,
            b.loss_mask,
            steps=cfg.ttt_steps,
            anchors=cfg.anchors,
            generator=gen,
        )
        last_accs[:] = accs
        return loss

    started = time.time()
    state = run_loop(
        out_dir=out, model=head, optimizer=optimizer, state=state, steps=cfg.steps, peak_lr=cfg.lr,
        warmup=cfg.warmup, loss_at=loss_at, max_minutes=cfg.max_minutes, checkpoint_every=cfg.checkpoint_every,
        meta=meta, desc="train eagle3", progress=progress,
    )  # fmt: skip
    head.config.extra.setdefault("dflashbench", {})["recipe"] = (
        f"EAGLE-3 training-time test, {cfg.ttt_steps} steps, 0.8^i-weighted soft CE against the target"
    )
    save_eagle3(head, out, dtype=cfg.save_dtype)
    record = {
        "kind": "eagle3",
        **meta,
        "aux_layer_ids": head.config.layer_ids,
        "num_parameters": sum(p.numel() for p in head.parameters()),
        "steps_done": state.step,
        "final_train_loss": round(sum(state.losses[-50:]) / max(1, len(state.losses[-50:])), 4),
        "final_train_step_accuracy": [round(a, 4) for a in last_accs],
        "minutes": round(state.minutes, 2),
        "heldout_step_accuracy": evaluate(
            head, target, heldout_batches(tok, cfg.heldout_conversations, cfg.seed), cfg.ttt_steps
        ),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
    }
    write_record(out, record)
    return record
