"""Train a DFlash drafter for any transformers causal LM, with the published block-training recipe.

Per training sequence (a corpus conversation rendered with the target's chat template):

1. The frozen target runs once over the whole sequence; the chosen layers' hidden states are the context
   features ``[B, S, n*H]`` (fused by the draft's own ``fc`` + ``hidden_norm``).
2. Random **anchors** are drawn among the answer tokens (uniformly, without replacement; an anchor needs at
   least one answer token after it). Each anchor opens a **block** ``[token[anchor], MASK x (B-1)]`` at positions
   ``anchor .. anchor+B-1``, embedded with the target's frozen embedding.
3. All blocks of a sequence go through the draft in one forward, over the K/V sequence
   ``[context (S) | block_0 | ... | block_{N-1}]`` with a dense boolean mask: a block sees context keys strictly
   before its anchor (exactly what it sees at inference), every token of its own block (bidirectional), and no
   other block.
4. Slot ``k >= 1`` of a block predicts ``token[anchor+k]`` through the target's frozen LM head. The per-slot
   cross-entropy is weighted by ``exp(-(k-1)/gamma)`` (early slots matter most: a miss there ends the accepted
   prefix) and normalised by the sum of weights over valid slots (inside the sequence, on answer tokens).
   With ``distill > 0`` the target is made the teacher too: the loss mixes in, with that weight, the
   cross-entropy against the target's own next-token distribution at ``anchor+k-1`` (the self-distillation
   variant of speculators / ModelOpt), so the draft learns what the target would say, not only the corpus.

Only the draft's parameters train; the target (embedding and LM head included) is frozen. The result is saved in
the released DFlash checkpoint format (:mod:`dflashbench.reference.dflash.checkpoint`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from dflashbench.errors import UserError
from dflashbench.reference.corpus import CATEGORIES
from dflashbench.reference.dflash.checkpoint import save_draft
from dflashbench.reference.dflash.network import DFlashDraftConfig, DFlashDraftModel, build_target_layer_ids
from dflashbench.reference.target import Target, extract_context_feature, load_target
from dflashbench.reference.threads import torch_threads
from dflashbench.reference.training.common import (
    CHECKPOINT_DIR,
    STATE_FILE,
    Batch,
    batch_at,
    check_target_dir,
    heldout_batches,
    run_loop,
    start_state,
    write_record,
)
from dflashbench.reference.training.tokenizer import MASK


@dataclass
class DraftTrainConfig:
    target_dir: Path
    out_dir: Path
    block_size: int = 16
    num_layers: int = 2
    steps: int = 2000
    seed: int = 0
    batch_size: int = 8
    anchors: int = 24  # anchors drawn per sequence (fewer when the answer is shorter)
    gamma: float = 7.0  # loss decay; the paper's value for block 16
    distill: float = 0.5  # weight of the target-distribution term (0 = plain corpus labels)
    lr: float = 1e-3
    warmup: int = 100
    max_minutes: float | None = None
    resume: bool = False
    checkpoint_every: int = 200
    threads: int | None = None
    target_layer_ids: list[int] | None = None
    mask_token_id: int | None = None
    intermediate_size: int | None = None  # default: the target's
    heldout_conversations: int = 96
    corpus_seed: int | None = None  # corpus stream seed (default: seed)

    def __post_init__(self) -> None:
        check_target_dir(self.target_dir)


def default_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """The released rule; for targets too shallow for it (it would repeat a layer), spread from layer 1 to L-2."""
    ids = build_target_layer_ids(num_target_layers, num_draft_layers)
    if len(set(ids)) == len(ids):
        return ids
    last = max(1, num_target_layers - 2)
    return sorted({round(1 + i * (last - 1) / max(1, num_draft_layers - 1)) for i in range(num_draft_layers)})


def resolve_mask_token_id(target: Target, explicit: int | None) -> int:
    """``--mask-token-id``, else the tokenizer's ``<|MASK|>``, else the first unused (padded) embedding row."""
    if explicit is not None:
        return explicit
    tok = target.tokenizer
    vocab = tok.get_vocab() if tok is not None else {}
    if MASK in vocab:
        return vocab[MASK]
    if tok is not None and len(tok) < target.vocab_size:
        return len(tok)  # Qwen3: <|MASK|> added to the tokenizer lands on the first padded row (151669)
    raise UserError("train draft: the target has no <|MASK|> token and no unused embedding row; pass --mask-token-id")


def build_draft(cfg: DraftTrainConfig, target: Target) -> DFlashDraftModel:
    tc = target.config
    L = target.num_layers
    layer_ids = cfg.target_layer_ids or default_layer_ids(L, cfg.num_layers)
    rope = getattr(tc, "rope_parameters", None) or {}
    draft_cfg = DFlashDraftConfig(
        hidden_size=target.hidden_size,
        intermediate_size=cfg.intermediate_size or tc.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=tc.num_attention_heads,
        num_key_value_heads=tc.num_key_value_heads,
        head_dim=getattr(tc, "head_dim", None) or target.hidden_size // tc.num_attention_heads,
        num_target_layers=L,
        mask_token_id=resolve_mask_token_id(target, cfg.mask_token_id),
        block_size=cfg.block_size,
        target_layer_ids=list(layer_ids),
        rms_norm_eps=getattr(tc, "rms_norm_eps", 1e-6),
        rope_theta=float(getattr(tc, "rope_theta", None) or rope.get("rope_theta", 10000.0)),
        max_position_embeddings=getattr(tc, "max_position_embeddings", 4096),
        vocab_size=target.vocab_size,
        eos_token_id=target.stop_token_ids() or None,
        dtype="float32",
    )
    torch.manual_seed(cfg.seed)
    return DFlashDraftModel(draft_cfg)


# ------------------------------------------------------------------------------------ block construction


@dataclass
class Blocks:
    """The anchor blocks of one batch. ``N`` anchors per row (padded), ``K`` block size."""

    anchors: torch.Tensor  # [B, N] anchor positions
    keep: torch.Tensor  # [B, N] real (not padding) anchors
    block_ids: torch.Tensor  # [B, N*K] anchor token then mask tokens
    block_pos: torch.Tensor  # [B, N*K] anchor + 0..K-1
    labels: torch.Tensor  # [B, N, K-1] token[anchor + k], k = 1..K-1
    valid: torch.Tensor  # [B, N, K-1] slot has a label on an answer token
    attn_mask: torch.Tensor  # [B, N*K, S + N*K] True = may attend


def sample_anchors(batch: Batch, num: int, gen: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to ``num`` sorted anchors per row among answer tokens followed by an answer token; -> anchors, keep."""
    lm = batch.loss_mask.bool()
    eligible = lm.clone()
    eligible[:, :-1] &= lm[:, 1:]
    eligible[:, -1] = False
    rows = []
    for row in eligible:
        pos = row.nonzero().flatten()
        if num and len(pos) > num:
            pos = pos[torch.randperm(len(pos), generator=gen)[:num]].sort().values
        rows.append(pos)
    n = max(1, max(len(r) for r in rows))
    anchors = torch.zeros(len(rows), n, dtype=torch.long)
    keep = torch.zeros(len(rows), n, dtype=torch.bool)
    for i, r in enumerate(rows):
        anchors[i, : len(r)], keep[i, : len(r)] = r, True
    return anchors, keep


def make_blocks(batch: Batch, anchors: torch.Tensor, keep: torch.Tensor, block_size: int, mask_id: int) -> Blocks:
    B, S = batch.input_ids.shape
    N, K = anchors.shape[1], block_size
    offs = torch.arange(K)
    pos = anchors[:, :, None] + offs  # [B, N, K]
    ids = torch.full((B, N, K), mask_id, dtype=torch.long)
    ids[:, :, 0] = batch.input_ids.gather(1, anchors)
    lab_pos = pos[:, :, 1:]  # [B, N, K-1]
    inside = lab_pos < S
    flat = lab_pos.clamp(max=S - 1).view(B, -1)
    labels = batch.input_ids.gather(1, flat).view(B, N, K - 1)
    on_answer = batch.loss_mask.gather(1, flat).view(B, N, K - 1).bool()
    valid = inside & on_answer & keep[:, :, None]
    # mask over keys [context (S) | blocks (N*K)]
    q_anchor = anchors[:, :, None].expand(B, N, K).reshape(B, N * K)  # each query's anchor
    ctx_ok = torch.arange(S)[None, None, :] < q_anchor[:, :, None]  # strictly before the anchor
    ctx_ok &= batch.attention_mask.bool()[:, None, :]
    q_block = torch.arange(N).repeat_interleave(K)  # [N*K]
    same_block = (q_block[:, None] == q_block[None, :])[None].expand(B, -1, -1)
    attn = torch.cat([ctx_ok, same_block], dim=-1)
    return Blocks(anchors, keep, ids.view(B, N * K), pos.view(B, N * K), labels, valid, attn)


def slot_weights(block_size: int, gamma: float) -> torch.Tensor:
    """``exp(-(k-1)/gamma)`` for slots k = 1..K-1."""
    return torch.exp(-torch.arange(block_size - 1, dtype=torch.float32) / gamma)


# ---------------------------------------------------------------------------------------------- the loss


@torch.no_grad()
def target_pass(target: Target, batch: Batch, layer_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """-> context features ``[B, S, n*H]`` and the target's next-token logits ``[B, S, V]``."""
    out = target.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_hidden_states=True)
    return extract_context_feature(out.hidden_states, layer_ids), out.logits


def draft_logits(draft: DFlashDraftModel, target: Target, batch: Batch, blocks: Blocks, feats) -> torch.Tensor:
    """Draft logits for slots 1..K-1 of every block -> ``[B, N, K-1, V]``."""
    B, S = batch.input_ids.shape
    N, K = blocks.anchors.shape[1], draft.block_size
    with torch.no_grad():
        embeds = target.embed(blocks.block_ids)  # [B, N*K, H], frozen
    ctx_pos = torch.arange(S)[None].expand(B, S)
    hidden = draft(embeds, feats, blocks.block_pos, ctx_pos, attn_mask=blocks.attn_mask)  # [B, N*K, H]
    hidden = hidden.view(B, N, K, -1)[:, :, 1:]
    return target.lm_head(hidden)  # the frozen head; gradients reach the draft only


def block_loss(cfg: DraftTrainConfig, draft, target: Target, batch: Batch, gen) -> torch.Tensor:
    feats, t_logits = target_pass(target, batch, draft.layer_ids)
    anchors, keep = sample_anchors(batch, cfg.anchors, gen)
    blocks = make_blocks(batch, anchors, keep, draft.block_size, draft.config.mask_token_id)
    logits = draft_logits(draft, target, batch, blocks, feats).float()  # [B, N, K-1, V]
    w = slot_weights(draft.block_size, cfg.gamma)[None, None] * blocks.valid  # [B, N, K-1]
    ce = F.cross_entropy(logits.flatten(0, 2), blocks.labels.flatten(), reduction="none").view_as(w)
    loss = ce
    if cfg.distill > 0:
        # teacher for slot k is the target's prediction at position anchor+k-1
        B, N, Km1 = blocks.labels.shape
        src = (blocks.anchors[:, :, None] + torch.arange(Km1)).clamp(max=batch.input_ids.shape[1] - 1)
        teacher = t_logits.gather(1, src.view(B, -1, 1).expand(-1, -1, t_logits.shape[-1])).view_as(logits)
        soft = -(teacher.float().softmax(-1) * logits.log_softmax(-1)).sum(-1)  # [B, N, K-1]
        loss = (1 - cfg.distill) * ce + cfg.distill * soft
    return (loss * w).sum() / w.sum().clamp(min=1e-6)


@torch.no_grad()
def evaluate(cfg: DraftTrainConfig, draft, target: Target, batches: list[Batch]) -> dict[str, dict[str, float]]:
    """Teacher-forced estimate of tau per category: every answer position is an anchor; the draft's greedy
    slot k is "accepted" when it equals the target's greedy next token at anchor+k-1 and all earlier slots were;
    tau_est = 1 + mean accepted prefix. Also the per-slot agreement of slot 1 and the last slot."""
    draft.eval()
    stats = {c: [0.0, 0, 0.0, 0.0] for c in CATEGORIES}  # sum accepted, blocks, slot1 agree, last slot agree
    for batch in batches:
        feats, t_logits = target_pass(target, batch, draft.layer_ids)
        anchors, keep = sample_anchors(batch, 0, None)
        blocks = make_blocks(batch, anchors, keep, draft.block_size, draft.config.mask_token_id)
        pred = draft_logits(draft, target, batch, blocks, feats).argmax(-1)  # [B, N, K-1]
        B, N, Km1 = pred.shape
        src = (anchors[:, :, None] + torch.arange(Km1)).clamp(max=batch.input_ids.shape[1] - 1)
        want = t_logits.argmax(-1).gather(1, src.view(B, -1)).view(B, N, Km1)
        ok = (pred == want) & blocks.valid  # invalid slots (past the answer) end the prefix
        accepted = ok.long().cumprod(-1).sum(-1)  # [B, N]
        for row, cat in enumerate(batch.categories):
            k = keep[row]
            stats[cat][0] += float(accepted[row][k].sum())
            stats[cat][1] += int(k.sum())
            stats[cat][2] += float(ok[row, :, 0][k].sum())
            stats[cat][3] += float(ok[row, :, -1][k].sum())
    draft.train()
    return {
        c: {"tau_est": round(1 + s[0] / s[1], 3), "slot1_agree": round(s[2] / s[1], 3),
            "last_slot_agree": round(s[3] / s[1], 3)}
        for c, s in stats.items() if s[1]
    }  # fmt: skip


# --------------------------------------------------------------------------------------------- the run


def train_draft(cfg: DraftTrainConfig, *, progress: bool = True) -> dict:
    """Train (or resume) a drafter for ``cfg.target_dir`` into ``cfg.out_dir``; returns the training record."""
    with torch_threads(cfg.threads):
        return _train_draft(cfg, progress)


def _train_draft(cfg: DraftTrainConfig, progress: bool) -> dict:
    if cfg.block_size < 2:
        raise UserError(f"--block-size must be at least 2 (got {cfg.block_size})")
    target = load_target(cfg.target_dir, dtype="float32")
    if target.tokenizer is None:
        raise UserError(f"train draft: {cfg.target_dir} has no tokenizer; the corpus is rendered with it")
    for p in target.model.parameters():
        p.requires_grad_(False)
    out = Path(cfg.out_dir)
    if cfg.resume:
        blob = _stored_config(out)
        cfg = dataclasses.replace(cfg, **{k: blob[k] for k in _SHAPE_FIELDS})
    elif (out / CHECKPOINT_DIR / STATE_FILE).exists():
        raise UserError(f"{out} already holds a training run; pass --resume to continue it or pick another --out")
    draft = build_draft(cfg, target)
    optimizer = torch.optim.AdamW(draft.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.01)
    state = start_state(out, draft, optimizer, cfg.resume)
    meta = {"config": _jsonable(cfg), "target": str(cfg.target_dir)}
    corpus_seed = cfg.seed if cfg.corpus_seed is None else cfg.corpus_seed
    tok = target.tokenizer

    def loss_at(step: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)  # anchors: reproducible per step
        return block_loss(cfg, draft, target, batch_at(tok, step, cfg.batch_size, corpus_seed), gen)

    state = run_loop(
        out_dir=out, model=draft, optimizer=optimizer, state=state, steps=cfg.steps, peak_lr=cfg.lr,
        warmup=cfg.warmup, loss_at=loss_at, max_minutes=cfg.max_minutes, checkpoint_every=cfg.checkpoint_every,
        meta=meta, desc="train draft", progress=progress,
    )  # fmt: skip
    save_draft(draft, out, dtype="float32")
    record = {
        "kind": "dflash-draft",
        **meta,
        "draft_config": {"block_size": cfg.block_size, "num_layers": cfg.num_layers,
                         "target_layer_ids": draft.layer_ids, "mask_token_id": draft.config.mask_token_id},
        "num_parameters": sum(p.numel() for p in draft.parameters()),
        "steps_done": state.step,
        "final_train_loss": round(sum(state.losses[-50:]) / max(1, len(state.losses[-50:])), 4),
        "minutes": round(state.minutes, 2),
        "heldout": evaluate(cfg, draft, target, heldout_batches(tok, cfg.heldout_conversations, corpus_seed, 16)),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }  # fmt: skip
    write_record(out, record)
    return record


_SHAPE_FIELDS = ("block_size", "num_layers", "target_layer_ids", "mask_token_id", "intermediate_size", "seed",
                 "corpus_seed", "anchors", "gamma", "distill", "batch_size")


def _jsonable(cfg: DraftTrainConfig) -> dict:
    return {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(cfg).items()}


def _stored_config(out: Path) -> dict:
    path = out / CHECKPOINT_DIR / STATE_FILE
    if not path.exists():
        raise UserError(f"--resume: no checkpoint at {path}; run without --resume to start fresh")
    return torch.load(path, map_location="cpu", weights_only=False)["meta"]["config"]

