"""Training an EAGLE-3 head: the loss goes down and the drafts get accepted more; the CLI writes a loadable
checkpoint, resumes, and fails with one line."""

import json

import pytest
import torch
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.reference.decode import SamplingParams, ar_decode, generate
from dflashbench.reference.eagle3.checkpoint import load_eagle3
from dflashbench.reference.eagle3.drafter import Eagle3Drafter
from dflashbench.reference.target import load_target
from dflashbench.reference.tiny import tiny_target, write_tiny_pair
from dflashbench.reference.training.eagle3 import build_head, frequent_answer_tokens, sample_anchors, ttt_loss


def test_toy_training_lowers_the_loss_and_raises_acceptance():
    """Sequences are the tiny target's own greedy continuations, so a head that learns them gets accepted.
    (A random tiny target is close to random text: the head learns it slowly; the bars are modest.)"""
    torch.manual_seed(0)
    target = tiny_target("qwen3", seed=11, vocab_size=48, init_std=0.5)
    for p in target.model.parameters():
        p.requires_grad_(False)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 47, (6,), generator=g).tolist() for _ in range(24)]
    seqs = torch.tensor([p + ar_decode(target, p, max_new_tokens=26).token_ids for p in prompts])  # [24, 32]
    loss_mask = torch.zeros_like(seqs)
    loss_mask[:, 6:] = 1  # the continuation is the "answer"
    head = build_head(target, k=4, seed=0)
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    drafter = Eagle3Drafter(head, target)

    def tau():
        head.eval()
        taus = [generate(target, drafter, p, SamplingParams(26)).tau for p in prompts[:6]]
        head.train()
        return sum(taus) / len(taus)

    before, losses = tau(), []
    for step in range(80):
        rows = torch.arange(8) + 8 * (step % 3)
        loss, accs = ttt_loss(head, target, seqs[rows], torch.ones_like(seqs[rows]), loss_mask[rows], steps=4,
                              anchors=8, generator=torch.Generator().manual_seed(step))  # fmt: skip
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert sum(losses[-5:]) / 5 < 0.85 * sum(losses[:5]) / 5
    assert min(accs) > 0.2  # top-1 agreement with the target at every unrolled step (chance: 1/48)
    after = tau()
    assert after > before + 0.3, (before, after)


def test_anchors_are_answer_positions():
    loss_mask = torch.tensor([[0, 0, 0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1, 1, 1]])
    anchors, keep = sample_anchors(loss_mask, 3, torch.Generator().manual_seed(0))
    assert anchors.shape == (2, 3)
    for row in range(2):
        for t, k in zip(anchors[row].tolist(), keep[row].tolist(), strict=True):
            assert k == bool(loss_mask[row, t + 2])  # step 0 at entry t predicts token t+2
    assert keep[0].all() and sorted(anchors[0].tolist()) == [1, 2, 3]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_pair(tmp_path_factory.mktemp("pair"), num_layers=4)[0]


def test_a_compressed_draft_vocabulary_keeps_the_frequent_answer_tokens(tiny_dir):
    target = load_target(tiny_dir)
    ids = frequent_answer_tokens(target.tokenizer, 10, conversations=30, seed=0)
    im_end = target.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert (
        len(ids) == len(set(ids)) == 10 and ids == sorted(ids) and im_end in ids
    )  # every answer ends with it
    head = build_head(target, k=2, draft_ids=ids)
    assert head.config.draft_vocab_size == 10 and head.draft_to_target.tolist() == ids
    assert head.t2d.nonzero().flatten().tolist() == ids


def test_train_command_writes_a_head_and_resumes(tiny_dir, tmp_path):
    runner = CliRunner()
    out = tmp_path / "head"
    args = ["train", "eagle3", "--target", str(tiny_dir), "--out", str(out), "--batch-size", "2", "--k", "3",
            "--ttt-steps", "3", "--threads", "1"]  # fmt: skip
    first = runner.invoke(app, [*args, "--steps", "2"])
    assert first.exit_code == 0, first.output
    assert "eagle3: 2 steps" in first.output
    head = load_eagle3(out)
    assert head.config.num_speculative_tokens == 3 and head.config.layer_ids == [1, 2, 3]
    record = json.loads((out / "training.json").read_text())
    assert record["steps_done"] == 2 and set(record["heldout_step_accuracy"]) == {"math", "code", "writing"}
    again = runner.invoke(app, [*args, "--steps", "2"])
    assert again.exit_code == 2 and "already holds a training run" in again.output
    resumed = runner.invoke(app, [*args, "--steps", "3", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((out / "training.json").read_text())["steps_done"] == 3


def test_train_command_errors_are_one_line(tmp_path):
    res = CliRunner().invoke(app, ["train", "eagle3", "--target", str(tmp_path / "nope")])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "no config.json" in res.output
