"""An EAGLE-3 draft head in plain torch, and its checkpoint in the layout vLLM and SGLang load.

EAGLE-3 drafts *autoregressively*, one token per forward pass of a single decoder layer, conditioned on the
target's hidden states from three layers (low, middle, high). DFlash (:mod:`~dflashbench.reference.dflash.network`)
drafts a whole block in one pass of several layers; this module is the comparison point.

The network (``H`` hidden size, ``Ht`` the target's hidden size, usually ``H``):

* ``fc``: ``Linear(3*Ht, H)`` fuses the three target features of a position into one hidden state.
* ``midlayer``: one Llama decoder layer whose attention reads ``2H`` inputs:
  ``x = [input_layernorm(embed(token)) ; hidden_norm(hidden)]``, with ``q/k/v_proj: 2H -> heads``,
  ``o_proj: heads -> H`` (no q/k norm: a Llama layer), residual = ``hidden`` (or ``hidden_norm(hidden)`` with
  ``norm_before_residual``), then ``post_attention_layernorm`` + SwiGLU ``mlp`` with its residual.
* ``norm`` -> ``lm_head: Linear(H, draft_vocab_size)``; a draft id ``d`` is the target id ``d + d2t[d]``.
  ``t2d[v]`` says whether target id ``v`` is in the draft vocabulary.
* Token embeddings are the target's (a checkpoint may ship its own ``embed_tokens.weight``; then it is used).

An *entry* at position ``p`` pairs the hidden state of position ``p`` with the embedding of token ``p+1`` and
predicts token ``p+2``. Committed positions enter with the fused target features (``fc``); a chain of drafts
continues with the layer's own pre-norm output as the next hidden state (no ``fc``), at positions ``p+1,
p+2, ...``. Every entry's K/V (after RoPE) is cached; attention is causal over positions.

Training (:func:`ttt_unroll`, :func:`ttt_attention`) unrolls the same layer the way a chain runs at decoding
time (EAGLE-3's "training-time test"); :mod:`~dflashbench.reference.train_eagle3` has the recipe.

Target layers: ``aux_layer_ids`` use vLLM's convention, id ``k`` = the residual stream *entering* target layer
``k`` = transformers' ``hidden_states[k]`` (the output of layer ``k-1``), so :attr:`Eagle3Config.feature_layer_ids`
(``k-1``) are the ids :func:`~dflashbench.reference.target.extract_context_feature` takes. With none in the
config, vLLM's default ``(2, L//2, L-3)`` applies.

Checkpoint (``config.json`` + ``model.safetensors``, names without a ``model.`` prefix):
``architectures ["LlamaForCausalLMEagle3"]``, ``model_type "llama"``, Llama fields, ``num_hidden_layers 1``,
``vocab_size`` (target), ``draft_vocab_size``, ``target_hidden_size``, ``tie_word_embeddings false``,
``norm_before_residual``, ``eagle_config {eagle_aux_hidden_state_layer_ids, use_aux_hidden_state}``; tensors
``fc.weight``, ``midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight``,
``midlayer.self_attn.{q,k,v,o}_proj.weight``, ``midlayer.mlp.{gate,up,down}_proj.weight``, ``norm.weight``,
``lm_head.weight``, ``d2t`` (int64 ``[draft_vocab]``), ``t2d`` (bool ``[vocab]``). dflashbench's own fields sit
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
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dflashbench.errors import UserError
from dflashbench.reference.layers import RMSNorm, RotaryEmbedding, SwiGLU, apply_rope, init_qwen_style
from dflashbench.reference.target import compaction_index
from dflashbench.reference.weights import dtype_name, parse_dtype, read_config_json, read_weights

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
ARCHITECTURE = "LlamaForCausalLMEagle3"


def default_aux_layer_ids(num_target_layers: int) -> list[int]:
    """vLLM's default when a checkpoint names no aux layers: ``(2, L//2, L-3)`` (vLLM ids)."""
    L = num_target_layers
    return [2, L // 2, L - 3]


def spread_aux_layer_ids(num_target_layers: int) -> list[int]:
    """Low, middle and high layers for training a new head: vLLM's default when its three ids are distinct
    and valid, else ``[1, L//2, L-1]`` (a 6-layer target: vLLM's rule gives ``[2, 3, 3]``; this gives
    ``[1, 3, 5]``, the outputs of layers 0, 2 and 4)."""
    L = num_target_layers
    ids = default_aux_layer_ids(L)
    if len(set(ids)) == 3 and 0 <= min(ids) and max(ids) < L:
        return ids
    ids = [1, L // 2, L - 1]
    if len(set(ids)) != 3 or min(ids) < 0:
        raise UserError(f"an EAGLE-3 head needs a target with at least 4 layers (this one has {L})")
    return ids


@dataclass
class Eagle3Config:
    """``config.json`` of an EAGLE-3 head (Llama fields + EAGLE-3 fields + dflashbench's own)."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int  # the target's vocabulary
    draft_vocab_size: int | None = None  # None: the target's
    target_hidden_size: int | None = None  # None: hidden_size
    aux_layer_ids: list[int] | None = None  # vLLM convention; None: default_aux_layer_ids(num_target_layers)
    num_target_layers: int | None = None
    num_speculative_tokens: int = 5
    head_dim: int | None = None
    num_hidden_layers: int = 1
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    hidden_act: str = "silu"
    attention_bias: bool = False
    norm_before_residual: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    dtype: str = "bfloat16"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.draft_vocab_size is None:
            self.draft_vocab_size = self.vocab_size
        if self.target_hidden_size is None:
            self.target_hidden_size = self.hidden_size

    @property
    def layer_ids(self) -> list[int]:
        """The aux layer ids, vLLM convention (input of target layer ``k``)."""
        if self.aux_layer_ids is not None:
            return list(self.aux_layer_ids)
        if self.num_target_layers is None:
            raise UserError(
                "EAGLE-3 config names no eagle_aux_hidden_state_layer_ids and no num_target_layers"
            )
        return default_aux_layer_ids(self.num_target_layers)

    @property
    def feature_layer_ids(self) -> list[int]:
        """The same layers in :func:`extract_context_feature`'s convention (id ``k`` -> ``hidden_states[k+1]``)."""
        return [k - 1 for k in self.layer_ids]


# ----------------------------------------------------------------------------------------------- modules


class Eagle3Attention(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        H, D, bias = cfg.hidden_size, cfg.head_dim, cfg.attention_bias
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, D
        self.q_proj = nn.Linear(2 * H, self.num_heads * D, bias=bias)
        self.k_proj = nn.Linear(2 * H, self.num_kv_heads * D, bias=bias)
        self.v_proj = nn.Linear(2 * H, self.num_kv_heads * D, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * D, H, bias=bias)

    def qkv(self, x: torch.Tensor, rope) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x ``[B, T, 2H]`` -> q ``[B, Hq, T, D]``, k/v ``[B, Hkv, T, D]`` (RoPE on q and k)."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return apply_rope(q, *rope), apply_rope(k, *rope), v

    def expand_kv(self, t: torch.Tensor) -> torch.Tensor:
        rep = self.num_heads // self.num_kv_heads
        return t if rep == 1 else t.repeat_interleave(rep, dim=1)


class Eagle3Layer(nn.Module):
    """The one decoder layer (``midlayer``)."""

    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Eagle3Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act)
        self.norm_before_residual = cfg.norm_before_residual


class Eagle3Model(nn.Module):
    """The EAGLE-3 head. Parameter and buffer names are the checkpoint's tensor names."""

    def __init__(self, config: Eagle3Config):
        super().__init__()
        if config.num_hidden_layers != 1:
            raise UserError(
                f"EAGLE-3 config: num_hidden_layers {config.num_hidden_layers} is not supported; "
                "the reference head has exactly one layer"
            )
        self.config = config
        H = config.hidden_size
        self.fc = nn.Linear(3 * config.target_hidden_size, H, bias=False)
        self.midlayer = Eagle3Layer(config)
        self.norm = RMSNorm(H, config.rms_norm_eps)
        self.lm_head = nn.Linear(H, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(config.vocab_size, dtype=torch.bool))
        self.embed_tokens: nn.Embedding | None = None  # the target's, unless a checkpoint ships one
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling)
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02, generator: torch.Generator | None = None) -> None:
        init_qwen_style(self, std, generator)

    @torch.no_grad()
    def set_draft_vocab(self, target_ids: Sequence[int]) -> None:
        """Draft id ``i`` <-> target id ``target_ids[i]`` (sorted, ``draft_vocab_size`` of them)."""
        ids = torch.tensor(sorted(target_ids), dtype=torch.long, device=self.d2t.device)
        if ids.numel() != self.config.draft_vocab_size or len(set(ids.tolist())) != ids.numel():
            raise ValueError(f"need {self.config.draft_vocab_size} distinct target ids, got {ids.numel()}")
        self.d2t.copy_(ids - torch.arange(ids.numel(), device=ids.device))
        self.t2d.zero_()
        self.t2d[ids] = True

    @property
    def draft_to_target(self) -> torch.Tensor:
        """``[draft_vocab]`` target ids of the draft vocabulary."""
        return torch.arange(self.d2t.shape[0], device=self.d2t.device) + self.d2t

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """Target features ``[B, T, 3*Ht]`` -> hidden ``[B, T, H]``."""
        return self.fc(features.to(self.fc.weight.dtype))

    def draft_logits(self, normed: torch.Tensor) -> torch.Tensor:
        """``[.., H]`` -> ``[.., draft_vocab]``."""
        return self.lm_head(normed)

    def greedy_tokens(self, normed: torch.Tensor) -> torch.Tensor:
        """Greedy drafts as *target* ids."""
        return self.draft_to_target[self.draft_logits(normed).argmax(-1)]

    def layer(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        attend,
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One pass of the layer over entries: token embeddings ``[B, T, H]``, hidden ``[B, T, H]`` (fused
        target features or the previous pass's pre-norm output), positions ``[B, T]``.
        ``attend(q, k, v) -> [B, Hq, T, D]`` decides which keys each entry sees (cache, or the training-time-
        test layout). Returns ``(norm(h), h, (k, v))``: logits come from the first, the next chain step's
        hidden is the second (pre-norm), the third is this pass's K/V after RoPE."""
        m = self.midlayer
        dtype = self.fc.weight.dtype
        embeds, hidden = embeds.to(dtype), hidden.to(dtype)
        normed_hidden = m.hidden_norm(hidden)
        residual = normed_hidden if m.norm_before_residual else hidden
        x = torch.cat([m.input_layernorm(embeds), normed_hidden], dim=-1)  # [B, T, 2H]
        q, k, v = m.self_attn.qkv(x, self.rotary(positions, dtype))
        out = attend(q, k, v)  # [B, Hq, T, D]
        B, T = embeds.shape[:2]
        h = residual + m.self_attn.o_proj(out.transpose(1, 2).reshape(B, T, -1))
        h = h + m.mlp(m.post_attention_layernorm(h))
        return self.norm(h), h, (k, v)

    def forward(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        cache: Eagle3Cache,
        valid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inference: the entries' K/V join ``cache`` (``valid[b, t]`` False marks padding) and each entry
        attends to every valid cached or new entry at a position <= its own. -> ``(norm(h), h)``."""
        attn = self.midlayer.self_attn
        if valid is None:
            valid = torch.ones(positions.shape, dtype=torch.bool, device=positions.device)

        def attend(q, k, v):
            keys, values, mask = cache.append(k, v, positions, valid)  # [B, Hkv, L, D] x2, [B, T, L]
            return F.scaled_dot_product_attention(
                q, attn.expand_kv(keys), attn.expand_kv(values), attn_mask=mask[:, None]
            )

        normed, h, _ = self.layer(embeds, hidden, positions, attend)
        return normed, h


def ttt_attention(
    q: torch.Tensor,
    k0: torch.Tensor,
    v0: torch.Tensor,
    key_mask: torch.Tensor,
    diagonal: Sequence[tuple[torch.Tensor, torch.Tensor]],
    expand,
) -> torch.Tensor:
    """Attention of the training-time test: queries ``q [B, Hq, N, D]`` see the committed entries' keys
    ``k0/v0 [B, Hkv, T, D]`` where ``key_mask [B, N, T]`` allows, plus, from each earlier unrolled step
    (and their own), the one key at their *own* entry: ``diagonal`` = ``[(k [B, Hkv, N, D], v), ...]``.
    That is exactly what a chain query at inference sees: the committed context, then its chain's entries."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ expand(k0).transpose(-1, -2)) * scale  # [B, Hq, N, T]
    scores = scores.masked_fill(~key_mask[:, None], float("-inf"))
    diag = [(q * expand(k)).sum(-1, keepdim=True) * scale for k, _ in diagonal]  # [B, Hq, N, 1] each
    probs = torch.softmax(
        torch.cat([scores, *diag], dim=-1), dim=-1, dtype=torch.promote_types(q.dtype, torch.float32)
    )
    probs = probs.to(q.dtype)
    T = k0.shape[2]
    out = probs[..., :T] @ expand(v0)
    for j, (_, v) in enumerate(diagonal):
        out = out + probs[..., T + j : T + j + 1] * expand(v)
    return out


def ttt_unroll(
    head: Eagle3Model,
    embed,
    features: torch.Tensor,
    input_ids: torch.Tensor,
    anchors: torch.Tensor,
    steps: int,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The unrolled test. features ``[B, S, 3H]``, input_ids ``[B, S]``, anchors ``[B, N]`` (entry indices
    ``< S-1``) -> step 0's normed output at every entry ``[B, S-1, H]`` and steps ``1..steps-1``'s at the
    anchors ``[B, N, H]`` each. Step ``i`` at entry ``t`` reads token ``t+1+i`` (clamped past the end)."""
    B, S = input_ids.shape
    E, dev = S - 1, input_ids.device
    attn = head.midlayer.self_attn
    entries = torch.arange(E, device=dev)
    causal = (entries[None, :] <= entries[:, None])[None]  # [1, E, E]
    kv0: list[tuple[torch.Tensor, torch.Tensor]] = []

    def attend0(q, k, v):
        kv0.append((k, v))
        return ttt_attention(q, k, v, causal, [], attn.expand_kv)

    normed0, hidden, _ = head.layer(
        embed(input_ids[:, 1:]), head.fuse(features[:, :E]), entries[None].expand(B, E), attend0
    )
    ((k0, v0),) = kv0
    key_mask = entries[None, None, :] <= anchors[:, :, None]  # [B, N, E]
    index = anchors[:, :, None].expand(-1, -1, hidden.shape[-1])
    hidden = hidden.gather(1, index)  # [B, N, H]
    diagonal: list[tuple[torch.Tensor, torch.Tensor]] = []
    outs = []
    for i in range(1, steps):
        tokens = input_ids.gather(1, (anchors + 1 + i).clamp(max=S - 1))

        def attend(q, k, v):
            return ttt_attention(q, k0, v0, key_mask, [*diagonal, (k, v)], attn.expand_kv)

        normed, hidden, kv = head.layer(embed(tokens), hidden, anchors + i, attend)
        diagonal.append(kv)
        outs.append(normed)
    return normed0, outs


# ------------------------------------------------------------------------------------------------ cache


class Eagle3Cache:
    """K/V (after RoPE) of a batch of rows' entries: ``[B, Hkv, L, D]``, with ``valid [B, L]`` and the
    entries' positions ``pos [B, L]``. Rows join (right-padded), leave, and are compacted when holes pile up."""

    def __init__(self, batch: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device):
        self.k = torch.zeros(batch, num_kv_heads, 0, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=device)
        self.pos = torch.zeros(batch, 0, dtype=torch.long, device=device)

    @property
    def length(self) -> int:
        return int(self.valid.shape[1])

    def append(self, k, v, positions, valid) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Add ``T`` entries per row -> all keys, values and the mask ``[B, T, L]`` (valid and causal)."""
        self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        self.valid = torch.cat([self.valid, valid], dim=1)
        self.pos = torch.cat([self.pos, positions], dim=1)
        mask = self.valid[:, None, :] & (self.pos[:, None, :] <= positions[:, :, None])
        return self.k, self.v, mask

    def crop(self, length: int) -> None:
        self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]
        self.valid, self.pos = self.valid[:, :length], self.pos[:, :length]

    def select_rows(self, rows: torch.Tensor) -> None:
        self.k, self.v, self.valid, self.pos = self.k[rows], self.v[rows], self.valid[rows], self.pos[rows]

    def extend_rows(self, other: Eagle3Cache) -> None:
        L = max(self.length, other.length)

        def pad(t, n, dim):
            shape = list(t.shape)
            shape[dim] = n - t.shape[dim]
            return torch.cat([t, t.new_zeros(shape)], dim=dim)

        self.k = torch.cat([pad(self.k, L, 2), pad(other.k, L, 2)])
        self.v = torch.cat([pad(self.v, L, 2), pad(other.v, L, 2)])
        self.valid = torch.cat([pad(self.valid, L, 1), pad(other.valid, L, 1)])
        self.pos = torch.cat([pad(self.pos, L, 1), pad(other.pos, L, 1)])

    def compact(self, slack: int = 32) -> None:
        """Move each row's valid entries left once more than ``max(slack, L/4)`` columns are wasted."""
        L = self.length
        if self.valid.shape[0] == 0 or L - int(self.valid.sum(1).max()) <= max(slack, L // 4):
            return
        index, self.valid = compaction_index(self.valid)
        idx = index[:, None, :, None].expand(-1, self.k.shape[1], -1, self.k.shape[3])
        self.k, self.v = self.k.gather(2, idx), self.v.gather(2, idx)
        self.pos = self.pos.gather(1, index)


# ------------------------------------------------------------------------------------------- checkpoint

_REQUIRED = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size")
_OWN_KEYS = {f.name for f in fields(Eagle3Config)} - {
    "extra",
    "aux_layer_ids",
    "num_target_layers",
    "num_speculative_tokens",
    "dtype",
} | {
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
    for name in _REQUIRED:
        if raw.get(name) is None:
            raise UserError(
                f"{source}: required field {name!r} is missing; add it (see an EAGLE-3 config.json)"
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
    known = {f.name for f in fields(Eagle3Config)} - {
        "extra",
        "aux_layer_ids",
        "num_target_layers",
        "num_speculative_tokens",
        "dtype",
    }
    kwargs = {k: raw[k] for k in known if raw.get(k) is not None}
    try:
        cfg = Eagle3Config(
            **kwargs,
            aux_layer_ids=ids,
            num_target_layers=ours.get("num_target_layers"),
            num_speculative_tokens=int(ours.get("num_speculative_tokens", 5)),
            dtype=str(raw.get("torch_dtype") or raw.get("dtype") or "bfloat16"),
            extra={k: v for k, v in raw.items() if k not in _OWN_KEYS},
        )
    except (TypeError, ValueError) as exc:
        raise UserError(f"{source}: {exc}") from None
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


def tiny_eagle3(
    target,
    *,
    k: int = 3,
    seed: int = 0,
    init_std: float = 0.2,
    draft_vocab_size: int | None = None,
    aux_layer_ids: list[int] | None = None,
    intermediate_size: int | None = None,
) -> Eagle3Model:
    """A random head that fits ``target`` (tests, micro-benchmarks); with ``draft_vocab_size`` smaller than the
    target's vocabulary, a random subset of target ids is the draft vocabulary."""
    tc = target.config
    L = target.num_layers
    cfg = Eagle3Config(
        hidden_size=target.hidden_size, intermediate_size=intermediate_size or 2 * target.hidden_size,
        num_attention_heads=tc.num_attention_heads, num_key_value_heads=tc.num_key_value_heads,
        head_dim=target.hidden_size // tc.num_attention_heads, vocab_size=target.vocab_size,
        draft_vocab_size=draft_vocab_size, aux_layer_ids=aux_layer_ids or spread_aux_layer_ids(L),
        num_target_layers=L, num_speculative_tokens=k, rope_theta=10000.0,
        dtype=dtype_name(target.dtype))  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    head = Eagle3Model(cfg)
    head.reset_parameters(std=init_std, generator=gen)
    if cfg.draft_vocab_size < cfg.vocab_size:
        head.set_draft_vocab(torch.randperm(cfg.vocab_size, generator=gen)[: cfg.draft_vocab_size].tolist())
    return head.to(device=target.device, dtype=target.dtype).eval()
