"""Issue #63, item 6: models outside the registry. A local folder's config.json gives the memory plan and tp; a
path that does not exist is refused; a bare name gets a did-you-mean; an unregistered target's error names every
draft it needs in command-line terms; a gated target is flagged like a gated draft."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.plan.local_model import local_entry, parameters

LLAMA_70B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
             "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8, "vocab_size": 128256,
             "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "tie_word_embeddings": False}  # fmt: skip


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def dry(*args: str):
    return CliRunner().invoke(app, ["sweep", "--dry-run", *args])


def test_a_local_folders_config_gives_the_memory_plan_and_tp(tmp_path):
    folder = tmp_path / "my-70b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_70B))
    total, active = parameters(LLAMA_70B)
    assert 69 < total < 72 and active == total  # a dense Llama-3-70B's shapes: 70.6B
    entry = local_entry(str(folder))
    assert entry is not None and entry.kv.full_layers == 80 and entry.kv.kv_heads == 8 and entry.kv.head_dim == 128
    result = dry("--backend", "vllm", "--model", str(folder), "--method", "ar", "--gpu", "8xh100")
    assert result.exit_code == 0, result.output
    assert "plan: tp 8: " in result.output and f"from the model's own config.json ({folder}/config.json)" in result.output
    assert "plan: memory (vllm, tp 8): " in result.output and "rates (tok/s/user, estimated" in result.output
    small = dry("--backend", "vllm", "--model", str(folder), "--method", "ar", "--gpu", "1xh100")
    assert "refused" in small.output  # 131 GiB of weights on one H100: not a silent tp 1


def test_a_path_that_does_not_exist_is_refused(tmp_path):
    (tmp_path / "my-model").mkdir()
    result = dry("--backend", "vllm", "--model", f"{tmp_path}/my-modle", "--method", "ar")
    assert result.exit_code == 2
    assert f"--model {tmp_path}/my-modle: no such directory; did you mean {tmp_path}/my-model?" in result.output


def test_a_registry_name_misspelled_gets_a_did_you_mean():
    result = dry("--backend", "vllm", "--model", "gpt-oss-12b")
    assert result.exit_code == 2 and "did you mean gpt-oss-120b" in result.output


def test_an_unregistered_targets_error_names_every_draft_in_command_line_terms():
    result = dry("--backend", "vllm", "--model", "someorg/unknown-model")
    assert result.exit_code == 2
    assert "eagle3 and dflash need one each. Pass --draft eagle3=<HF id or path>,dflash=<HF id or path>, or --method ar" \
        in result.output  # fmt: skip
    one = dry("--backend", "vllm", "--model", "someorg/unknown-model", "--method", "ar,dflash")
    assert "dflash needs one. Pass --draft dflash=<HF id or path>, or --method ar" in one.output


def test_a_gated_target_is_flagged():
    out = dry("--backend", "vllm", "--model", "llama-3.1-8b-instruct", "--gpu", "8xh100").output
    assert "plan: gated: meta-llama/Llama-3.1-8B-Instruct (the target); a real run checks your Hugging Face token" in out
