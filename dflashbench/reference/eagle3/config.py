"""The ``config.json`` fields of an EAGLE-3 head, as a dataclass, and which target layers it reads.

Target layers: ``aux_layer_ids`` use vLLM's convention, id ``k`` = the residual stream *entering* target layer
``k`` = transformers' ``hidden_states[k]`` (the output of layer ``k-1``), so :attr:`Eagle3Config.feature_layer_ids`
(``k-1``) are the ids :func:`~dflashbench.reference.target.extract_context_feature` takes. With none in the
config, vLLM's default ``(2, L//2, L-3)`` applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dflashbench.errors import UserError


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
