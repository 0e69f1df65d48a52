"""``train``: the embedded target, or a drafter (DFlash, EAGLE-3) for any transformers target, on the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflashbench.cli.common import CONTEXT, STR, IntList, int_list

app = typer.Typer(help="Train the embedded target or a drafter for any target.", context_settings=CONTEXT)


@app.command("target")
def train_target_cmd(
    out: Annotated[str, typer.Option("--out", "-o", help="Output model directory (HF format, with tokenizer).")] = "runs/target",
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 2400,
    seed: Annotated[int, typer.Option(help="Seed of the corpus stream and the initial weights.")] = 0,
    batch_size: Annotated[int, typer.Option(help="Conversations per step.")] = 16,
    lr: Annotated[float, typer.Option(help="Peak learning rate (warm-up, then cosine).")] = 3e-3,
    max_minutes: Annotated[float | None, typer.Option(help="Stop (checkpointed) after this many minutes.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run checkpointed in --out.")] = False,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's choice).")] = None,
    checkpoint_every: Annotated[int, typer.Option(help="Checkpoint every N steps.")] = 200,
) -> None:
    """Train the tiny Qwen3-architecture target (and its tokenizer) on the synthetic corpus, on the CPU."""
    from dflashbench.reference.training.target import TargetTrainConfig, train_target

    cfg = TargetTrainConfig(
        out_dir=Path(out), steps=steps, seed=seed, batch_size=batch_size, lr=lr, max_minutes=max_minutes,
        resume=resume, threads=threads, checkpoint_every=checkpoint_every,
    )  # fmt: skip
    record = train_target(cfg)
    typer.echo(
        f"target: {record['steps_done']} steps, {record['minutes']} min, train loss {record['final_train_loss']}, "
        + ", ".join(f"{c} loss {v['loss']} acc {v['accuracy']}" for c, v in record["heldout"].items())
        + f" -> {out}"
    )


@app.command("draft")
def train_draft_cmd(
    target: Annotated[str, typer.Option(help="Target model directory (transformers causal LM with its tokenizer).")],
    out: Annotated[str, typer.Option("--out", "-o", help="Output drafter directory (released DFlash format).")] = "runs/dflash",
    block_size: Annotated[int, typer.Option(help="Block size B: anchor + B-1 mask slots.")] = 16,
    num_layers: Annotated[int, typer.Option(help="Draft decoder layers.")] = 2,
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 2000,
    seed: Annotated[int, typer.Option(help="Seed of the corpus stream, the anchors and the initial weights.")] = 0,
    batch_size: Annotated[int, typer.Option(help="Conversations per step.")] = 8,
    anchors: Annotated[int, typer.Option(help="Random anchors (blocks) per conversation.")] = 24,
    gamma: Annotated[float, typer.Option(help="Loss decay: slot k weighs exp(-(k-1)/gamma).")] = 7.0,
    distill: Annotated[float, typer.Option(help="Weight of the target-distribution (self-distillation) term.")] = 0.5,
    lr: Annotated[float, typer.Option(help="Peak learning rate (warm-up, then cosine).")] = 1e-3,
    target_layer_ids: Annotated[
        IntList | None,
        typer.Option(parser=int_list("--target-layer-ids", "1,3"), metavar=STR,
                     help="Target layers to fuse, comma-separated (default: the released rule)."),
    ] = None,
    mask_token_id: Annotated[
        int | None, typer.Option(help="Mask token id (default: the tokenizer's <|MASK|>, else the first unused row).")
    ] = None,
    max_minutes: Annotated[float | None, typer.Option(help="Stop (checkpointed) after this many minutes.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run checkpointed in --out.")] = False,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's choice).")] = None,
    checkpoint_every: Annotated[int, typer.Option(help="Checkpoint every N steps.")] = 200,
) -> None:
    """Train a DFlash drafter for any transformers target (anchors, block masks, position-decayed loss)."""
    from dflashbench.reference.training.dflash import DraftTrainConfig, train_draft

    cfg = DraftTrainConfig(
        target_dir=Path(target), out_dir=Path(out), block_size=block_size, num_layers=num_layers, steps=steps,
        seed=seed, batch_size=batch_size, anchors=anchors, gamma=gamma, distill=distill, lr=lr,
        target_layer_ids=list(target_layer_ids) if target_layer_ids else None, mask_token_id=mask_token_id, max_minutes=max_minutes, resume=resume,
        threads=threads, checkpoint_every=checkpoint_every,
    )  # fmt: skip
    record = train_draft(cfg)
    typer.echo(
        f"draft: {record['steps_done']} steps, {record['minutes']} min, train loss {record['final_train_loss']}, "
        "held-out tau estimate: " + ", ".join(f"{c} {v['tau_est']}" for c, v in record["heldout"].items())
        + f" -> {out}"
    )


@app.command("eagle3")
def train_eagle3_cmd(
    target: Annotated[str, typer.Option(help="Target model directory (Hugging Face format, with tokenizer).")],
    out: Annotated[str, typer.Option("--out", "-o", help="Output head directory (EAGLE-3 checkpoint layout).")] = "runs/eagle3",
    k: Annotated[int, typer.Option("--k", help="Tokens the head drafts per step by default (a chain).")] = 5,
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 1000,
    ttt_steps: Annotated[int, typer.Option(help="Unrolled steps of the training-time test.")] = 7,
    seed: Annotated[int, typer.Option(help="Seed of the corpus stream, the anchors and the initial weights.")] = 0,
    batch_size: Annotated[int, typer.Option(help="Conversations per step.")] = 16,
    lr: Annotated[float, typer.Option(help="Peak learning rate (warm-up, then cosine).")] = 5e-3,
    draft_vocab_size: Annotated[
        int | None, typer.Option(help="Keep only the N most frequent answer tokens (default: the whole vocabulary).")
    ] = None,
    max_minutes: Annotated[float | None, typer.Option(help="Stop (checkpointed) after this many minutes.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run checkpointed in --out.")] = False,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's choice).")] = None,
) -> None:
    """Train an EAGLE-3 head (one layer, fused low/middle/high target features) with the training-time test."""
    from dflashbench.reference.training.eagle3 import Eagle3TrainConfig, train_eagle3

    cfg = Eagle3TrainConfig(
        target_dir=Path(target), out_dir=Path(out), k=k, ttt_steps=ttt_steps, steps=steps, seed=seed,
        batch_size=batch_size, lr=lr, draft_vocab_size=draft_vocab_size, max_minutes=max_minutes, resume=resume,
        threads=threads,
    )  # fmt: skip
    record = train_eagle3(cfg)
    accs = record["heldout_step_accuracy"]
    typer.echo(
        f"eagle3: {record['steps_done']} steps, {record['minutes']} min, train loss {record['final_train_loss']}, "
        "held-out top-1 agreement at steps 1..: "
        + "; ".join(f"{c} {' '.join(f'{a:.2f}' for a in v)}" for c, v in accs.items())
        + f" -> {out}"
    )
