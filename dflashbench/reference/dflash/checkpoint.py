"""Read and write DFlash drafters in the released (z-lab) checkpoint format.

A checkpoint directory holds ``config.json`` (``architectures ["DFlashDraftModel"]``, ``model_type "qwen3"``,
``block_size``, ``num_target_layers``, ``dflash_config {mask_token_id, target_layer_ids}``, the Qwen3
fields, ``dtype``) and ``model.safetensors`` whose tensor names carry no ``model.`` prefix
(``fc.weight``, ``hidden_norm.weight``, ``norm.weight``, ``layers.{i}.self_attn.q_proj.weight``, ...).
There are no embedding or LM-head tensors: the target's are shared.

Everything a user can get wrong raises :class:`UserError` with one line naming the field and the fix.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from pydantic import TypeAdapter

from dflashbench.errors import UserError
from dflashbench.reference.dflash.network import DFlashDraftConfig, DFlashDraftModel
from dflashbench.reference.target import Target
from dflashbench.reference.weights import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    dtype_name,
    parse_dtype,
    read_config_json,
    read_weights,
    validate_config,
)

_SCHEMA = TypeAdapter(DFlashDraftConfig)  # the dataclass's own field types are the schema
_WHERE = {"mask_token_id": "dflash_config.mask_token_id", "target_layer_ids": "dflash_config.target_layer_ids"}
# Top-level keys this module writes itself (everything else is preserved in DFlashDraftConfig.extra).
_OWN_KEYS = {f.name for f in fields(DFlashDraftConfig)} - {"extra", "mask_token_id", "target_layer_ids"} | {
    "architectures", "auto_map", "model_type", "dflash_config", "torch_dtype", "rope_parameters"}


def config_from_dict(raw: dict[str, Any], source: str = "draft config") -> DFlashDraftConfig:
    """Validate a released-format config dict. ``block_size`` may sit top-level or in ``dflash_config``."""
    if not isinstance(raw, dict):
        raise UserError(f"{source}: expected a JSON object")
    dflash = raw.get("dflash_config") or {}
    if not isinstance(dflash, dict):
        raise UserError(f"{source}: dflash_config must be an object with mask_token_id and target_layer_ids")
    if dflash.get("mask_token_id") is None:
        raise UserError(f"{source}: required field 'dflash_config.mask_token_id' is missing; "
                        "add the target tokenizer's mask token id")
    block_size = raw.get("block_size", dflash.get("block_size"))
    if block_size is None:
        raise UserError(f"{source}: required field 'block_size' is missing (top level or in dflash_config); add it")
    rope = raw.get("rope_parameters") or {}
    rope_theta = raw.get("rope_theta", rope.get("rope_theta"))
    if rope_theta is None:
        raise UserError(f"{source}: required field 'rope_theta' is missing; copy it from the target's config")
    rope_scaling = raw.get("rope_scaling")
    if rope_scaling is None and rope.get("rope_type", "default") != "default":
        rope_scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    layer_types = raw.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types):
        raise UserError(f"{source}: only full_attention draft layers are supported (layer_types={layer_types})")
    known = {f.name for f in fields(DFlashDraftConfig)}
    kwargs = {k: raw[k] for k in known - {"extra", "mask_token_id", "target_layer_ids", "block_size",
                                          "rope_theta", "rope_scaling", "dtype"} if raw.get(k) is not None}
    kwargs.update(block_size=block_size, mask_token_id=dflash["mask_token_id"],
                  target_layer_ids=dflash.get("target_layer_ids"), rope_theta=rope_theta, rope_scaling=rope_scaling,
                  dtype=str(raw.get("dtype") or raw.get("torch_dtype") or "bfloat16"),
                  extra={k: v for k, v in raw.items() if k not in _OWN_KEYS})
    cfg = validate_config(_SCHEMA, kwargs, source, hint="see a released DFlash config.json", where=_WHERE)
    cfg.extra["dflash_config"] = {k: v for k, v in dflash.items()
                                  if k not in ("mask_token_id", "target_layer_ids", "block_size")}
    _check_self_consistent(cfg, source)
    return cfg


def _check_self_consistent(cfg: DFlashDraftConfig, source: str) -> None:
    if cfg.block_size < 2:
        raise UserError(f"{source}: block_size must be at least 2 (got {cfg.block_size})")
    if cfg.num_attention_heads % cfg.num_key_value_heads:
        raise UserError(f"{source}: num_attention_heads ({cfg.num_attention_heads}) must be a multiple of "
                        f"num_key_value_heads ({cfg.num_key_value_heads})")
    ids = cfg.layer_ids
    if not ids or min(ids) < 0 or max(ids) >= cfg.num_target_layers:
        raise UserError(f"{source}: dflash_config.target_layer_ids {ids} must lie in [0, num_target_layers="
                        f"{cfg.num_target_layers}); fix the ids or num_target_layers")


def config_to_dict(cfg: DFlashDraftConfig) -> dict[str, Any]:
    """The released ``config.json`` layout."""
    extra = dict(cfg.extra)
    dflash_extra = extra.pop("dflash_config", {}) or {}
    out: dict[str, Any] = {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "model_type": "qwen3",
        "block_size": cfg.block_size,
        "dflash_config": {"mask_token_id": cfg.mask_token_id, "target_layer_ids": cfg.layer_ids, **dflash_extra},
        "num_target_layers": cfg.num_target_layers,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "layer_types": ["full_attention"] * cfg.num_hidden_layers,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling,
        "rms_norm_eps": cfg.rms_norm_eps,
        "attention_bias": cfg.attention_bias,
        "hidden_act": cfg.hidden_act,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "use_sliding_window": False,
        "sliding_window": None,
        "vocab_size": cfg.vocab_size,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "dtype": cfg.dtype,
    }
    for k, v in extra.items():
        out.setdefault(k, v)
    return out


def read_config(path: str | Path) -> DFlashDraftConfig:
    """Read and validate ``<dir>/config.json`` (or a config file path)."""
    cfg_path, raw = read_config_json(path, "draft")
    if isinstance(raw, dict) and "DFlashDraftModel" not in (raw.get("architectures") or ["DFlashDraftModel"]):
        raise UserError(f"draft checkpoint: {cfg_path} has architectures {raw.get('architectures')}; "
                        "expected a DFlash drafter (DFlashDraftModel)")
    return config_from_dict(raw, source=str(cfg_path))


def save_draft(model: DFlashDraftModel, path: str | Path, dtype: str | torch.dtype | None = None) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (released names); ``dtype`` defaults to the model's."""
    from safetensors.torch import save_file

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    torch_dtype = parse_dtype(dtype) or next(model.parameters()).dtype
    model.config.dtype = dtype_name(torch_dtype)
    tensors = {name: t.detach().to(torch_dtype).contiguous().cpu() for name, t in model.state_dict().items()}
    save_file(tensors, str(out / WEIGHTS_NAME), metadata={"format": "pt"})
    (out / CONFIG_NAME).write_text(json.dumps(config_to_dict(model.config), indent=2) + "\n")
    return out


def load_draft(path: str | Path, device: str | torch.device = "cpu",
               dtype: str | torch.dtype | None = None) -> DFlashDraftModel:
    """Load a drafter; ``dtype=None`` keeps the stored dtype."""

    p = Path(path)
    cfg = read_config(p)
    tensors = read_weights(p, "draft")
    tensors = {k.removeprefix("model."): v for k, v in tensors.items()
               if not k.endswith(("embed_tokens.weight", "lm_head.weight"))}
    stored = next(iter(tensors.values())).dtype if tensors else torch.float32
    torch_dtype = parse_dtype(dtype) or stored
    with torch.device("meta"):
        model = DFlashDraftModel(cfg)
    expected = {k: v.shape for k, v in model.state_dict().items()}
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        what = f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}"
        raise UserError(f"draft checkpoint: {p / WEIGHTS_NAME} does not match its config.json ({what}"
                        f"{' ...' if len(missing or unexpected) > 3 else ''}); re-save it with matching config")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != tuple(shape):
            raise UserError(f"draft checkpoint: tensor {name} has shape {tuple(tensors[name].shape)} but config.json "
                            f"implies {tuple(shape)}; check hidden_size/heads/intermediate_size/target_layer_ids")
    model = model.to_empty(device=device)
    model.load_state_dict({k: v.to(torch_dtype) for k, v in tensors.items()}, strict=True)
    return model.to(dtype=torch_dtype).eval()


def check_draft_fits(draft: DFlashDraftConfig, target: Target) -> None:
    """Raise a one-line :class:`UserError` when a drafter cannot run against this target."""
    if draft.hidden_size != target.hidden_size:
        raise UserError(f"draft hidden_size {draft.hidden_size} != target hidden_size {target.hidden_size}; "
                        "use a drafter trained for this target")
    if draft.num_target_layers != target.num_layers:
        raise UserError(f"draft num_target_layers {draft.num_target_layers} != target's {target.num_layers} layers; "
                        "use a drafter trained for this target")
    ids = draft.layer_ids
    if max(ids) >= target.num_layers or min(ids) < 0:
        raise UserError(f"draft dflash_config.target_layer_ids {ids} do not fit a {target.num_layers}-layer target; "
                        "fix target_layer_ids")
    if not 0 <= draft.mask_token_id < target.vocab_size:
        raise UserError(f"draft dflash_config.mask_token_id {draft.mask_token_id} is outside the target vocabulary "
                        f"(size {target.vocab_size}); set the target tokenizer's mask token id")
