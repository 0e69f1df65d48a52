"""Train the embedded target: a tiny transformers ``Qwen3ForCausalLM`` on the synthetic corpus, on the CPU.

The tokenizer is trained first (on the first ``tokenizer_conversations`` training conversations) and saved next
to the model, so ``out_dir`` is a complete Hugging Face model directory (``save_pretrained``, safetensors).
The loss is next-token cross-entropy on the assistant's tokens only (the answer and its ``<|im_end|>``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from dflashbench.errors import UserError
from dflashbench.reference.corpus import CATEGORIES, training_corpus
from dflashbench.reference.threads import torch_threads
from dflashbench.reference.training.common import (
    batch_at,
    heldout_batches,
    run_loop,
    start_state,
    write_record,
)
from dflashbench.reference.training.tokenizer import END_OF_TEXT, IM_END, build_tokenizer


@dataclass
class TargetTrainConfig:
    out_dir: Path
    steps: int = 2400
    seed: int = 0
    batch_size: int = 16
    lr: float = 3e-3
    warmup: int = 100
    max_minutes: float | None = None
    resume: bool = False
    checkpoint_every: int = 200
    # model shape (a few million parameters)
    threads: int | None = None  # torch intra-op threads (None: torch's default)
    hidden_size: int = 192
    num_layers: int = 4
    num_heads: int = 3
    num_kv_heads: int = 1
    head_dim: int = 64
    intermediate_size: int = 512
    vocab_size: int = 2048  # the BPE's maximum; the model's vocabulary is the tokenizer's, rounded up to 64
    tokenizer_conversations: int = 6000
    heldout_conversations: int = 192


def build_model(cfg: TargetTrainConfig, tokenizer):
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    vocab = -(-len(tokenizer) // 64) * 64
    eos = [tokenizer.convert_tokens_to_ids(IM_END), tokenizer.convert_tokens_to_ids(END_OF_TEXT)]
    config = Qwen3Config(
        vocab_size=vocab, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, max_position_embeddings=2048,
        rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=None, eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(cfg.seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=eos, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    return model


def causal_lm_loss(model, batch) -> torch.Tensor:
    """Mean next-token cross-entropy over answer tokens."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits  # [B, T, V]
    labels = batch.input_ids[:, 1:].masked_fill(batch.loss_mask[:, 1:] == 0, -100)
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=-100
    )


@torch.no_grad()
def evaluate(model, batches) -> dict[str, dict[str, float]]:
    """Held-out answer loss and greedy next-token accuracy, per category."""
    sums: dict[str, list[float]] = {c: [0.0, 0.0, 0.0] for c in CATEGORIES}  # loss sum, correct, count
    for b in batches:
        logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits[:, :-1].float()
        labels, mask = b.input_ids[:, 1:], b.loss_mask[:, 1:].bool()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
        correct = logits.argmax(-1) == labels
        for row, cat in enumerate(b.categories):
            m = mask[row]
            sums[cat][0] += float(nll[row][m].sum())
            sums[cat][1] += float(correct[row][m].sum())
            sums[cat][2] += float(m.sum())
    return {
        c: {"loss": round(s[0] / s[2], 4), "accuracy": round(s[1] / s[2], 4)} for c, s in sums.items() if s[2]
    }


def train_target(cfg: TargetTrainConfig, *, progress: bool = True) -> dict:
    """Train (or resume) the target into ``cfg.out_dir``; returns the training record also written there."""
    with torch_threads(cfg.threads):
        return _train_target(cfg, progress)


def _train_target(cfg: TargetTrainConfig, progress: bool) -> dict:
    from transformers import AutoTokenizer

    out = Path(cfg.out_dir)
    if cfg.resume:
        if not (out / "tokenizer.json").exists():
            raise UserError(f"--resume: {out} has no tokenizer.json; run without --resume to start fresh")
        tokenizer = AutoTokenizer.from_pretrained(out)
    else:
        if (out / "checkpoint").exists():
            raise UserError(f"{out} already holds a training run; pass --resume to continue it or pick another --out")
        tokenizer = build_tokenizer(
            training_corpus(cfg.tokenizer_conversations, cfg.seed), out, vocab_size=cfg.vocab_size
        )
    model = build_model(cfg, tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.01)
    state = start_state(out, model, optimizer, cfg.resume)
    meta = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(cfg).items()}}
    started = time.time()
    state = run_loop(
        out_dir=out, model=model, optimizer=optimizer, state=state, steps=cfg.steps, peak_lr=cfg.lr,
        warmup=cfg.warmup, loss_at=lambda step: causal_lm_loss(model, batch_at(tokenizer, step, cfg.batch_size, cfg.seed)),
        max_minutes=cfg.max_minutes, checkpoint_every=cfg.checkpoint_every, meta=meta, desc="train target",
        progress=progress,
    )  # fmt: skip
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    record = {
        "kind": "target",
        **meta,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "steps_done": state.step,
        "final_train_loss": round(sum(state.losses[-50:]) / max(1, len(state.losses[-50:])), 4),
        "minutes": round(state.minutes, 2),
        "heldout": evaluate(model, heldout_batches(tokenizer, cfg.heldout_conversations, cfg.seed)),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    write_record(out, record)
    return record
