import json

import pytest
import torch
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.reference.corpus import demo_prompts, training_corpus
from dflashbench.reference.training.target import TargetTrainConfig, train_target
from dflashbench.reference.training.tokenizer import MASK, build_tokenizer, encode_conversation

TOY = dict(threads=1, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16, intermediate_size=64,
           vocab_size=400, tokenizer_conversations=300, heldout_conversations=12, batch_size=8, warmup=2, lr=1e-2)  # fmt: skip


@pytest.fixture(scope="module")
def toy_target(tmp_path_factory):
    out = tmp_path_factory.mktemp("target")
    record = train_target(TargetTrainConfig(out_dir=out, steps=12, checkpoint_every=6, **TOY), progress=False)
    return out, record


def test_tokenizer_loads_offline_with_chat_template(tmp_path):
    from transformers import AutoTokenizer

    build_tokenizer(training_corpus(200, 0), tmp_path, vocab_size=400)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    conv = demo_prompts(1, 0)[0]
    prompt = tok.apply_chat_template(
        conv.messages(with_answer=False), add_generation_prompt=True, enable_thinking=False, tokenize=False
    )
    assert prompt == f"<|im_start|>user\n{conv.user}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    msgs = conv.messages(with_answer=False)
    thinking = tok.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=True, tokenize=False)
    assert thinking.endswith("<|im_start|>assistant\n")
    # thinking is off unless asked for: the tiny target never saw thinking traces
    assert tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False) == prompt
    full = tok.apply_chat_template(conv.messages(), tokenize=False)
    ids, mask = encode_conversation(tok, conv)
    assert tok.decode(ids) + "\n" == full  # the training text is exactly the template's rendering
    assert tok.decode([i for i, m in zip(ids, mask, strict=True) if m]) == conv.assistant + "<|im_end|>"
    assert tok.eos_token == "<|im_end|>" and tok.convert_tokens_to_ids(MASK) != tok.unk_token_id
    assert tok.decode(tok.encode("ünïcode ✓ 123")) == "ünïcode ✓ 123"  # byte-level: nothing is unknown


def test_target_training_lowers_the_loss_and_saves_a_hf_model(toy_target):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, record = toy_target
    info = json.loads((out / "training.json").read_text())
    assert info["steps_done"] == 12 and info["kind"] == "target"
    losses = torch.load(out / "checkpoint" / "state.pt", weights_only=False)["losses"]
    assert sum(losses[-3:]) / 3 < losses[0] - 0.5
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert model.config.model_type == "qwen3" and model.config.vocab_size >= len(tok)
    assert (out / "model.safetensors").exists()
    ids = torch.tensor([tok.encode("Tom has 3 apples.")])
    assert model(ids).logits.shape == (1, ids.shape[1], model.config.vocab_size)


def test_target_training_resumes_from_its_checkpoint(toy_target, tmp_path):
    out, _ = toy_target
    cfg = TargetTrainConfig(out_dir=out, steps=14, resume=True, **TOY)
    record = train_target(cfg, progress=False)
    assert record["steps_done"] == 14


def test_train_target_cli_refuses_to_overwrite_a_run(toy_target):
    out, _ = toy_target
    result = CliRunner().invoke(app, ["train", "target", "--out", str(out), "--steps", "1"])
    assert result.exit_code == 2
    assert "--resume" in result.output and "Traceback" not in result.output
