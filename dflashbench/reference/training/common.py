"""What the target and drafter trainers share: the batch stream, the LR schedule, budgeted and resumable loops.

A training run is a loop of ``steps`` optimizer steps over a deterministic, endless stream of corpus
conversations (step s reads conversations ``[s*B, (s+1)*B)`` of ``train/{seed}/...``), so resuming at step s
needs only the weights, the optimizer state and s. Checkpoints are written every ``checkpoint_every`` steps and
when the ``max_minutes`` budget runs out; minutes are counted across resumes.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dflashbench.errors import UserError
from dflashbench.reference.corpus import CATEGORIES, Conversation, training_corpus
from dflashbench.reference.training.tokenizer import encode_conversation

CHECKPOINT_DIR = "checkpoint"
TRAIN_INFO = "training.json"  # the trainer's record beside the weights it wrote (every trainer)
STATE_FILE = "state.pt"


@dataclass
class Batch:
    """Right-padded token ids, attention mask and answer (loss) mask, all ``[B, T]``."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    categories: list[str]


def check_target_dir(target_dir: Path) -> None:
    """A drafter trains against a transformers model directory: fail at once, naming ``--target``, if it is not."""
    if not Path(target_dir, "config.json").is_file():
        raise UserError(f"--target {target_dir}: no config.json there; pass a transformers model directory")


def collate(tokenizer, conversations: Sequence[Conversation]) -> Batch:
    encoded = [encode_conversation(tokenizer, c) for c in conversations]
    width = max(len(ids) for ids, _ in encoded)
    pad = tokenizer.pad_token_id
    ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    attn = torch.zeros((len(encoded), width), dtype=torch.long)
    loss = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, (tok, mask) in enumerate(encoded):
        ids[row, : len(tok)] = torch.tensor(tok)
        attn[row, : len(tok)] = 1
        loss[row, : len(tok)] = torch.tensor(mask)
    return Batch(ids, attn, loss, [c.category for c in conversations])


def batch_at(tokenizer, step: int, batch_size: int, seed: int) -> Batch:
    """The batch of optimizer step ``step``: the same conversations whatever happened before (resumable)."""
    return collate(tokenizer, training_corpus(batch_size, seed, start=step * batch_size))


def heldout_batches(tokenizer, n: int, seed: int, batch_size: int = 32) -> list[Batch]:
    convs = training_corpus(n, seed, CATEGORIES, split="heldout")
    return [collate(tokenizer, convs[i : i + batch_size]) for i in range(0, n, batch_size)]


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warm-up then cosine decay to 10% of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@dataclass
class LoopState:
    step: int = 0
    minutes: float = 0.0
    losses: list[float] = field(default_factory=list)  # recent training losses (for the final figure)


def save_checkpoint(out_dir: Path, model: torch.nn.Module, optimizer, state: LoopState, meta: dict) -> None:
    ckpt = out_dir / CHECKPOINT_DIR
    ckpt.mkdir(parents=True, exist_ok=True)
    tmp = ckpt / (STATE_FILE + ".tmp")
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": state.step,
         "minutes": state.minutes, "losses": state.losses[-200:], "meta": meta},
        tmp,
    )  # fmt: skip
    tmp.replace(ckpt / STATE_FILE)  # atomic: a crash mid-write keeps the previous checkpoint


def load_checkpoint(out_dir: Path, model: torch.nn.Module, optimizer) -> LoopState:
    path = out_dir / CHECKPOINT_DIR / STATE_FILE
    if not path.exists():
        raise UserError(f"--resume: no checkpoint at {path}; run without --resume to start fresh")
    blob = torch.load(path, map_location="cpu", weights_only=False)
    model.load_state_dict(blob["model"])
    optimizer.load_state_dict(blob["optimizer"])
    return LoopState(step=blob["step"], minutes=blob["minutes"], losses=list(blob["losses"]))


def run_loop(
    *,
    out_dir: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: LoopState,
    steps: int,
    peak_lr: float,
    warmup: int,
    loss_at: Callable[[int], torch.Tensor],
    max_minutes: float | None,
    checkpoint_every: int,
    meta: dict,
    desc: str,
    progress: bool = True,
) -> LoopState:
    """Optimizer steps ``state.step .. steps-1``; ``loss_at(step)`` returns the step's scalar loss.

    Stops early (after checkpointing) when the cumulative time reaches ``max_minutes``.
    """
    from tqdm.auto import tqdm

    bar = tqdm(total=steps, initial=state.step, desc=desc, disable=not progress, dynamic_ncols=True)
    started, minutes0 = time.monotonic(), state.minutes
    model.train()
    while state.step < steps:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(state.step, steps, peak_lr, warmup)
        loss = loss_at(state.step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        state.step += 1
        state.losses.append(loss.item())
        state.minutes = minutes0 + (time.monotonic() - started) / 60
        bar.update(1)
        bar.set_postfix(loss=f"{sum(state.losses[-20:]) / len(state.losses[-20:]):.3f}", min=f"{state.minutes:.1f}")
        over_budget = max_minutes is not None and state.minutes >= max_minutes
        if state.step % checkpoint_every == 0 or over_budget or state.step == steps:
            save_checkpoint(out_dir, model, optimizer, state, meta)
        if over_budget:
            bar.write(f"time budget of {max_minutes} min reached at step {state.step}/{steps}")
            break
    bar.close()
    model.eval()
    return state


def start_state(out_dir: Path, model: torch.nn.Module, optimizer, resume: bool) -> LoopState:
    """Where a run starts: its checkpoint's weights, optimizer and step when resuming, else step 0."""
    return load_checkpoint(out_dir, model, optimizer) if resume else LoopState()


def write_record(out_dir: Path, record: dict) -> None:
    """The trainer's record (:data:`TRAIN_INFO`), beside the weights it describes."""
    (out_dir / TRAIN_INFO).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
