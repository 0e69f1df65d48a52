"""Checkpoint I/O in the released format: names, config layout, round trip, one-line errors."""

import json

import pytest
import torch
from safetensors import safe_open

from dflashbench.errors import UserError
from dflashbench.reference.dflash.checkpoint import (
    config_from_dict,
    config_to_dict,
    load_draft,
    read_config,
    save_draft,
)
from dflashbench.reference.dflash.network import DFlashDraftConfig, DFlashDraftModel


def _cfg(**kw):
    base = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, num_target_layers=6, mask_token_id=3, block_size=4,
                rope_theta=10000.0, vocab_size=40)
    base.update(kw)
    return DFlashDraftConfig(**base)


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = DFlashDraftModel(_cfg())
    save_draft(model, tmp_path / "d", dtype="float32")
    return model, tmp_path / "d"


def test_released_layout_and_weight_names(saved):
    _, d = saved
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"]
    assert cfg["auto_map"] == {"AutoModel": "dflash.DFlashDraftModel"}
    assert cfg["model_type"] == "qwen3" and cfg["block_size"] == 4 and cfg["num_target_layers"] == 6
    assert cfg["dflash_config"] == {"mask_token_id": 3, "target_layer_ids": [1, 3]}
    assert cfg["dtype"] == "float32"
    with safe_open(str(d / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert {"fc.weight", "hidden_norm.weight", "norm.weight", "layers.0.input_layernorm.weight",
            "layers.1.post_attention_layernorm.weight", "layers.0.self_attn.q_proj.weight",
            "layers.0.self_attn.k_norm.weight", "layers.1.mlp.down_proj.weight"} <= names
    assert not any(n.startswith("model.") or "embed" in n or "lm_head" in n for n in names)
    assert len(names) == 3 + 2 * 11


def test_round_trip_identical_logits(saved):
    model, d = saved
    loaded = load_draft(d)
    assert loaded.config.layer_ids == model.config.layer_ids
    g = torch.Generator().manual_seed(5)
    head = torch.randn(40, 32, generator=g)
    ctx, blk = torch.randn(1, 5, 64, generator=g), torch.randn(1, 4, 32, generator=g)
    args = (blk, ctx, torch.arange(5, 9)[None], torch.arange(5)[None])
    assert torch.equal(model(*args) @ head.T, loaded(*args) @ head.T)


def test_dtype_stored_and_overridable(tmp_path):
    model = DFlashDraftModel(_cfg())
    save_draft(model, tmp_path / "bf", dtype="bfloat16")
    assert json.loads((tmp_path / "bf" / "config.json").read_text())["dtype"] == "bfloat16"
    assert next(load_draft(tmp_path / "bf").parameters()).dtype == torch.bfloat16
    assert next(load_draft(tmp_path / "bf", dtype="float32").parameters()).dtype == torch.float32


def test_unknown_fields_survive_and_block_size_may_sit_in_dflash_config(saved, tmp_path):
    _, d = saved
    raw = json.loads((d / "config.json").read_text())
    raw["dflash_config"]["block_size"] = raw.pop("block_size")
    raw["transformers_version"] = "4.57.3"
    (d / "config.json").write_text(json.dumps(raw))
    cfg = read_config(d)
    assert cfg.block_size == 4
    assert config_to_dict(cfg)["transformers_version"] == "4.57.3"


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda c: c.pop("hidden_size"), "'hidden_size' is missing"),
    (lambda c: c["dflash_config"].pop("mask_token_id"), "dflash_config.mask_token_id"),
    (lambda c: c.pop("block_size"), "'block_size' is missing"),
    (lambda c: c.pop("num_target_layers"), "'num_target_layers' is missing"),
    (lambda c: c["dflash_config"].update(target_layer_ids=[1, 9]), "target_layer_ids [1, 9]"),
    (lambda c: c.update(num_key_value_heads=3), "multiple of num_key_value_heads"),
    (lambda c: c.update(intermediate_size=65), "shape"),
])
def test_bad_config_is_one_line_user_error(saved, edit, needle):
    _, d = saved
    raw = json.loads((d / "config.json").read_text())
    edit(raw)
    (d / "config.json").write_text(json.dumps(raw))
    with pytest.raises(UserError) as err:
        load_draft(d)
    msg = str(err.value)
    assert needle in msg and "\n" not in msg


def test_missing_files(tmp_path):
    with pytest.raises(UserError, match="config.json"):
        load_draft(tmp_path)
    model = DFlashDraftModel(_cfg())
    save_draft(model, tmp_path / "x")
    (tmp_path / "x" / "model.safetensors").unlink()
    with pytest.raises(UserError, match="model.safetensors"):
        load_draft(tmp_path / "x")


@pytest.mark.parametrize(("edit", "needle"), [
    ({"hidden_size": "big"}, "field 'hidden_size' should be a valid integer"),
    ({"rms_norm_eps": "small"}, "field 'rms_norm_eps' should be a valid number"),
    ({"dflash_config": {"mask_token_id": 3, "target_layer_ids": ["a"]}}, "'dflash_config.target_layer_ids.0'"),
])
def test_config_types_are_checked_with_the_field_named(edit, needle):
    raw = {**config_to_dict(_cfg()), **edit}
    with pytest.raises(UserError) as err:
        config_from_dict(raw, source="cfg.json")
    assert str(err.value).startswith("cfg.json: ") and needle in str(err.value) and "\n" not in str(err.value)
