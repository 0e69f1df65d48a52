"""An EAGLE-3 head's checkpoint, in the layout vLLM and SGLang load.

Checkpoint (``config.json`` + ``model.safetensors``, names without a ``model.`` prefix):
``architectures ["LlamaForCausalLMEagle3"]``, ``model_type "llama"``, Llama fields, ``num_hidden_layers 1``,
``vocab_size`` (target), ``draft_vocab_size``, ``target_hidden_size``, ``tie_word_embeddings false``,
``norm_before_residual``, ``eagle_config {eagle_aux_hidden_state_layer_ids, use_aux_hidden_state}``; tensors
``fc.weight``, ``midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight``,
``midlayer.self_attn.{q,k,v,o}_proj.weight``, ``midlayer.mlp.{gate,up,down}_proj.weight``, ``norm.weight``,
``lm_head.weight``, and for a reduced draft vocabulary ``d2t`` (int64 ``[draft_vocab]``) and ``t2d`` (bool
``[vocab]``): a full-vocabulary head leaves both out (:func:`identity_vocab_maps`). dflashbench's own fields sit
under ``"dflashbench"`` (``num_target_layers``, ``num_speculative_tokens``: the chain length it drafts by
default); engines ignore them and take the number of speculative tokens from their own flags.
Checked against vLLM's ``llama_eagle3.py`` loader (``midlayer.`` -> ``layers.0.``, ``model.`` prepended to
every name but ``lm_head``, ``d2t`` -> ``draft_id_to_target_id``, ``t2d`` skipped, ``embed_tokens`` optional) and
its aux-layer reading (top-level ``eagle_aux_hidden_state_layer_ids`` or inside ``eagle_config``), and SGLang's
``llama_eagle3.py`` (``d2t`` + arange = hot token ids; ``tie_word_embeddings`` true would tie ``lm_head`` to the
embedding, hence false). Not checked against a published checkpoint's safetensors header.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from pydantic import TypeAdapter
from torch import nn

from dflashbench.errors import UserError
from dflashbench.reference.eagle3.config import Eagle3Config
from dflashbench.reference.eagle3.network import Eagle3Model
from dflashbench.reference.weights import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    dtype_name,
    parse_dtype,
    read_config_json,
    read_weights,
    validate_config,
)

ARCHITECTURE = "LlamaForCausalLMEagle3"
_SCHEMA = TypeAdapter(Eagle3Config)  # the dataclass's own field types are the schema
# Eagle3Config fields that do not sit at the top level of config.json under their own name, and where they do
_WHERE = {"aux_layer_ids": "eagle_config.eagle_aux_hidden_state_layer_ids", "dtype": "torch_dtype",
          "num_target_layers": "dflashbench.num_target_layers",
          "num_speculative_tokens": "dflashbench.num_speculative_tokens"}
_OWN_KEYS = {f.name for f in fields(Eagle3Config)} - {"extra", *_WHERE} | {
    "architectures",
    "model_type",
    "eagle_config",
    "eagle_aux_hidden_state_layer_ids",
    "torch_dtype",
    "tie_word_embeddings",
    "dflashbench",
    "mlp_bias",
}


def config_from_dict(raw: Any, source: str = "EAGLE-3 config") -> Eagle3Config:
    """Validate an EAGLE-3 ``config.json`` dict; errors name the field and the fix in one line."""
    if not isinstance(raw, dict):
        raise UserError(f"{source}: expected a JSON object")
    archs = raw.get("architectures") or []
    if archs and not any("Eagle3" in a for a in archs):
        raise UserError(
            f'{source}: architectures {archs} is not an EAGLE-3 head; expected ["{ARCHITECTURE}"]'
        )
    eagle = raw.get("eagle_config") or {}
    ours = raw.get("dflashbench") or {}
    if not isinstance(eagle, dict) or not isinstance(ours, dict):
        raise UserError(f"{source}: eagle_config and dflashbench must be JSON objects")
    if eagle.get("use_aux_hidden_state") is False:
        raise UserError(
            f"{source}: eagle_config.use_aux_hidden_state false (an EAGLE-1/2-style head) is not "
            "supported; the reference head fuses three target layers"
        )
    ids = raw.get("eagle_aux_hidden_state_layer_ids") or eagle.get("eagle_aux_hidden_state_layer_ids")
    if ids is not None and not (
        isinstance(ids, list) and len(ids) == 3 and all(isinstance(i, int) for i in ids)
    ):
        raise UserError(
            f"{source}: eagle_aux_hidden_state_layer_ids must be a list of three integers, got {ids}"
        )
    if raw.get("tie_word_embeddings"):
        raise UserError(f"{source}: tie_word_embeddings true is not an EAGLE-3 head layout; set it to false")
    known = {f.name for f in fields(Eagle3Config)} - {"extra", *_WHERE}
    kwargs = {k: raw[k] for k in known if raw.get(k) is not None}
    kwargs.update(aux_layer_ids=ids, num_target_layers=ours.get("num_target_layers"),
                  num_speculative_tokens=ours.get("num_speculative_tokens", 5),
                  dtype=str(raw.get("torch_dtype") or raw.get("dtype") or "bfloat16"),
                  extra={k: v for k, v in raw.items() if k not in _OWN_KEYS})
    cfg = validate_config(_SCHEMA, kwargs, source, hint="see an EAGLE-3 config.json", where=_WHERE)
    cfg.extra["eagle_config"] = {
        k: v
        for k, v in eagle.items()
        if k not in ("eagle_aux_hidden_state_layer_ids", "use_aux_hidden_state")
    }
    cfg.extra["dflashbench"] = {
        k: v for k, v in ours.items() if k not in ("num_target_layers", "num_speculative_tokens")
    }
    if cfg.num_attention_heads % cfg.num_key_value_heads:
        raise UserError(
            f"{source}: num_attention_heads ({cfg.num_attention_heads}) must be a multiple of "
            f"num_key_value_heads ({cfg.num_key_value_heads})"
        )
    if cfg.num_speculative_tokens < 1:
        raise UserError(f"{source}: dflashbench.num_speculative_tokens must be >= 1")
    if not 0 < cfg.draft_vocab_size <= cfg.vocab_size:
        raise UserError(
            f"{source}: draft_vocab_size {cfg.draft_vocab_size} must be in 1..vocab_size ({cfg.vocab_size})"
        )
    cfg.layer_ids  # noqa: B018 - raises when neither the ids nor the target's layer count is known
    return cfg


def config_to_dict(cfg: Eagle3Config) -> dict[str, Any]:
    extra = dict(cfg.extra)
    eagle_extra = extra.pop("eagle_config", {}) or {}
    ours_extra = extra.pop("dflashbench", {}) or {}
    out: dict[str, Any] = {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": cfg.hidden_act,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling,
        "attention_bias": cfg.attention_bias,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "vocab_size": cfg.vocab_size,
        "draft_vocab_size": cfg.draft_vocab_size,
        "target_hidden_size": cfg.target_hidden_size,
        "norm_before_residual": cfg.norm_before_residual,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "torch_dtype": cfg.dtype,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": cfg.layer_ids,
            "use_aux_hidden_state": True,
            **eagle_extra,
        },
        "dflashbench": {
            "num_target_layers": cfg.num_target_layers,
            "num_speculative_tokens": cfg.num_speculative_tokens,
            **ours_extra,
        },
    }
    for k, v in extra.items():
        out.setdefault(k, v)
    return out


def read_config(path: str | Path) -> Eagle3Config:
    cfg_path, raw = read_config_json(path, "EAGLE-3")
    return config_from_dict(raw, source=str(cfg_path))


def identity_vocab_maps(cfg: Eagle3Config) -> tuple[str, ...]:
    """The vocabulary maps a checkpoint of ``cfg`` leaves out: ``d2t`` and ``t2d`` when the draft vocabulary is
    the target's whole vocabulary (both are then the identity), none otherwise.

    vLLM refuses them there: ``Eagle3LlamaForCausalLM`` (vllm/model_executor/models/llama_eagle3.py, 0.32.0)
    creates its ``draft_id_to_target_id`` parameter only when ``draft_vocab_size != vocab_size``, so a ``d2t``
    of a full-vocabulary head has nowhere to load ("There is no module or parameter named
    'draft_id_to_target_id'"). SGLang takes either: without ``d2t`` its ``hot_token_id`` stays ``None``, the
    whole vocabulary (python/sglang/srt/models/llama_eagle3.py, ``LlamaForCausalLMEagle3.load_weights``).
    :func:`load_eagle3` fills the identity back in."""
    return ("d2t", "t2d") if cfg.draft_vocab_size == cfg.vocab_size else ()


def save_eagle3(model: Eagle3Model, path: str | Path, dtype: str | torch.dtype | None = None) -> Path:
    """Write ``config.json`` + ``model.safetensors``; float tensors in ``dtype`` (default: the model's)."""
    from safetensors.torch import save_file

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    torch_dtype = parse_dtype(dtype) or model.fc.weight.dtype
    model.config.dtype = dtype_name(torch_dtype)
    tensors = {
        name: (t.detach().to(torch_dtype) if t.is_floating_point() else t.detach()).contiguous().cpu()
        for name, t in model.state_dict().items()
        if name not in identity_vocab_maps(model.config)
    }
    save_file(tensors, str(out / WEIGHTS_NAME), metadata={"format": "pt"})
    (out / CONFIG_NAME).write_text(json.dumps(config_to_dict(model.config), indent=2) + "\n")
    return out


def load_eagle3(
    path: str | Path, device: str | torch.device = "cpu", dtype: str | torch.dtype | None = None
) -> Eagle3Model:
    """Load a head; ``dtype=None`` keeps the stored dtype. Also reads vLLM-internal names (``layers.0.``,
    ``model.`` prefixes); without ``d2t``/``t2d`` the draft vocabulary is the target's."""

    p = Path(path)
    cfg = read_config(p)
    raw = read_weights(p, "EAGLE-3")
    tensors = {k.removeprefix("model.").replace("layers.0.", "midlayer."): v for k, v in raw.items()}
    floats = [v for v in tensors.values() if v.is_floating_point()]
    torch_dtype = parse_dtype(dtype) or (floats[0].dtype if floats else torch.float32)
    embed = tensors.pop("embed_tokens.weight", None)
    model = Eagle3Model(cfg)
    expected = {k: v.shape for k, v in model.state_dict().items()}
    if cfg.draft_vocab_size == cfg.vocab_size:  # a full-vocabulary head may omit the (identity) mapping
        tensors.setdefault("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        tensors.setdefault("t2d", torch.ones(cfg.vocab_size, dtype=torch.bool))
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or unexpected:
        what = f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}"
        raise UserError(
            f"EAGLE-3 checkpoint: {p / WEIGHTS_NAME} does not match its config.json ({what}"
            f"{' ...' if len(missing or unexpected) > 3 else ''}); re-save it with a matching config"
        )
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != tuple(shape):
            raise UserError(
                f"EAGLE-3 checkpoint: tensor {name} has shape {tuple(tensors[name].shape)} but "
                f"config.json implies {tuple(shape)}; check hidden_size/heads/vocab sizes"
            )
    model.load_state_dict({k: v.to(torch_dtype) if v.is_floating_point() else v for k, v in tensors.items()})
    if embed is not None:
        model.embed_tokens = nn.Embedding.from_pretrained(embed.to(torch_dtype), freeze=True)
    return model.to(device=device, dtype=torch_dtype).eval()


def check_eagle3_fits(cfg: Eagle3Config, num_layers: int, hidden_size: int, vocab_size: int) -> None:
    """One-line :class:`UserError` when this head cannot run on a target of this shape."""
    if cfg.target_hidden_size != hidden_size or cfg.hidden_size != hidden_size:
        raise UserError(
            f"EAGLE-3 head hidden sizes ({cfg.hidden_size}, target_hidden_size {cfg.target_hidden_size}) "
            f"do not match the target's {hidden_size}; use a head trained for this target"
        )
    if cfg.vocab_size != vocab_size:
        raise UserError(
            f"EAGLE-3 head vocab_size {cfg.vocab_size} != the target's {vocab_size}; "
            "use a head trained for this target"
        )
    if cfg.num_target_layers is not None and cfg.num_target_layers != num_layers:
        raise UserError(
            f"EAGLE-3 head was trained on a {cfg.num_target_layers}-layer target, this one has "
            f"{num_layers}; use a head trained for this target"
        )
    ids = cfg.layer_ids
    if min(ids) < 0 or max(ids) >= num_layers:
        raise UserError(
            f"EAGLE-3 eagle_aux_hidden_state_layer_ids {ids} do not fit a {num_layers}-layer target "
            f"(ids are 0..{num_layers - 1}); fix them in config.json"
        )
