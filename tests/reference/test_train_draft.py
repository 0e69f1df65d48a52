import json

import pytest
import torch
from safetensors import safe_open
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.reference.decode import ar_decode, dflash_decode
from dflashbench.reference.dflash.checkpoint import load_draft
from dflashbench.reference.target import load_target
from dflashbench.reference.tiny import write_tiny_pair
from dflashbench.reference.training.common import Batch
from dflashbench.reference.training.dflash import (
    DraftTrainConfig,
    default_layer_ids,
    make_blocks,
    sample_anchors,
    slot_weights,
    train_draft,
)
from dflashbench.reference.training.target import TargetTrainConfig, train_target

TOY_TARGET = dict(threads=1, hidden_size=32, num_layers=4, num_heads=2, num_kv_heads=1, head_dim=16,
                  intermediate_size=64, vocab_size=400, tokenizer_conversations=300, heldout_conversations=12,
                  batch_size=8, warmup=2, lr=1e-2)  # fmt: skip
TOY_DRAFT = dict(threads=1, block_size=4, num_layers=1, batch_size=4, anchors=8, warmup=2, lr=3e-3,
                 heldout_conversations=6, checkpoint_every=5)  # fmt: skip


@pytest.fixture(scope="module")
def toy_target(tmp_path_factory):
    out = tmp_path_factory.mktemp("target")
    train_target(TargetTrainConfig(out_dir=out, steps=30, **TOY_TARGET), progress=False)
    return out


@pytest.fixture(scope="module")
def toy_draft(toy_target, tmp_path_factory):
    out = tmp_path_factory.mktemp("draft")
    record = train_draft(DraftTrainConfig(target_dir=toy_target, out_dir=out, steps=10, **TOY_DRAFT), progress=False)
    return out, record


def _batch(ids, loss_mask):
    ids = torch.tensor([ids])
    return Batch(ids, torch.ones_like(ids), torch.tensor([loss_mask]), ["math"])


def test_blocks_see_context_strictly_before_their_anchor_and_only_their_own_block():
    #            prompt     | answer
    batch = _batch([10, 11, 12, 20, 21, 22, 23, 24], [0, 0, 0, 1, 1, 1, 1, 1])
    anchors, keep = sample_anchors(batch, 0, None)
    assert anchors.tolist() == [[3, 4, 5, 6]]  # answer tokens followed by an answer token
    blocks = make_blocks(batch, anchors[:, :2], keep[:, :2], block_size=3, mask_id=99)
    assert blocks.block_ids.tolist() == [[20, 99, 99, 21, 99, 99]]
    assert blocks.block_pos.tolist() == [[3, 4, 5, 4, 5, 6]]
    assert blocks.labels.tolist() == [[[21, 22], [22, 23]]]
    m = blocks.attn_mask[0].int()  # [6 queries, 8 context + 6 block keys]
    assert m[:3, :8].tolist() == [[1, 1, 1, 0, 0, 0, 0, 0]] * 3  # anchor 3: context 0..2
    assert m[3:, :8].tolist() == [[1, 1, 1, 1, 0, 0, 0, 0]] * 3  # anchor 4: context 0..3
    assert m[:, 8:].tolist() == [[1, 1, 1, 0, 0, 0]] * 3 + [[0, 0, 0, 1, 1, 1]] * 3  # bidirectional, isolated


def test_labels_past_the_answer_do_not_count():
    batch = _batch([10, 20, 21, 2, 0], [0, 1, 1, 1, 0])  # answer 20 21 <im_end>, then padding
    anchors, keep = sample_anchors(batch, 0, None)
    blocks = make_blocks(batch, anchors, keep, block_size=4, mask_id=99)
    assert anchors.tolist() == [[1, 2]]
    assert blocks.valid.tolist() == [[[True, True, False], [True, False, False]]]


def test_slot_weights_decay():
    w = slot_weights(16, 7.0)
    assert w.shape == (15,) and w[0] == 1 and torch.allclose(w[7], torch.exp(torch.tensor(-1.0)))


def test_layer_ids_follow_the_released_rule_and_stay_distinct_on_shallow_targets():
    assert default_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    assert default_layer_ids(4, 2) == [1, 2]
    assert default_layer_ids(4, 1) == [2]


def test_draft_training_lowers_the_loss_and_writes_the_released_format(toy_draft, toy_target):
    out, record = toy_draft
    losses = torch.load(out / "checkpoint" / "state.pt", weights_only=False)["losses"]
    assert sum(losses[-3:]) / 3 < losses[0] - 0.3
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["block_size"] == 4
    assert cfg["dflash_config"]["mask_token_id"] == 3  # the tokenizer's <|MASK|>
    assert cfg["num_target_layers"] == 4
    with safe_open(out / "model.safetensors", "pt") as f:
        names = set(f.keys())
    assert "fc.weight" in names and "layers.0.self_attn.q_proj.weight" in names
    assert not any(n.startswith("model.") or "embed_tokens" in n or "lm_head" in n for n in names)
    assert set(record["heldout"]) == {"math", "code", "writing"}


def test_trained_draft_loads_back_and_decodes_losslessly(toy_draft, toy_target):
    out, _ = toy_draft
    target = load_target(toy_target)
    draft = load_draft(out)
    prompt = target.tokenizer.encode("<|im_start|>user\nTom has 3 apples.<|im_end|>\n<|im_start|>assistant\n")
    ar = ar_decode(target, prompt, max_new_tokens=24)
    df = dflash_decode(target, draft, prompt, max_new_tokens=24)
    assert df.token_ids == ar.token_ids


def test_draft_training_resumes(toy_draft, toy_target):
    out, _ = toy_draft
    record = train_draft(
        DraftTrainConfig(target_dir=toy_target, out_dir=out, steps=12, resume=True, **TOY_DRAFT), progress=False
    )
    assert record["steps_done"] == 12


def test_draft_trains_for_a_llama_target_too(tmp_path):
    target_dir, _ = write_tiny_pair(tmp_path / "pair", arch="llama", vocab_size=64)
    record = train_draft(
        DraftTrainConfig(target_dir=target_dir, out_dir=tmp_path / "d", steps=3, **TOY_DRAFT), progress=False
    )
    assert record["steps_done"] == 3
    assert load_draft(tmp_path / "d").config.num_target_layers == 4


def test_train_draft_cli_errors_are_one_line(tmp_path):
    result = CliRunner().invoke(app, ["train", "draft", "--target", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no config.json" in result.output and "Traceback" not in result.output
