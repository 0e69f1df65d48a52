"""The Qwen3/Llama building blocks both drafter families are made of (plain torch): RMSNorm, rotary position
embedding, the SwiGLU MLP and a Qwen3-style random init. DFlash (:mod:`~dflashbench.reference.dflash.network`)
and EAGLE-3 (:mod:`~dflashbench.reference.eagle3.network`) assemble their own attention from these."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dflashbench.errors import UserError

_ACTIVATIONS = {"silu": F.silu, "swish": F.silu, "gelu": F.gelu, "relu": F.relu}


@torch.no_grad()
def init_qwen_style(module: nn.Module, std: float = 0.02, generator: torch.Generator | None = None) -> None:
    """Random init, Qwen3 style: normal(0, std) weights, unit norms, zero biases."""
    for name, p in module.named_parameters():
        if name.endswith("norm.weight"):
            p.fill_(1.0)
        elif name.endswith(".bias"):
            p.zero_()
        else:
            p.normal_(0.0, std, generator=generator)


class RMSNorm(nn.Module):
    """Qwen3 RMSNorm: normalise in float32, scale in the input dtype."""

    def __init__(self, size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


class RotaryEmbedding(nn.Module):
    """Neox-style RoPE (rotate-half), ``rope_theta`` from the config; ``llama3`` scaling supported.

    ``inv_freq`` is a plain float32 attribute, not a buffer, so casting the model to bf16 keeps RoPE exact.
    """

    def __init__(self, head_dim: int, theta: float, scaling: dict[str, Any] | None = None):
        super().__init__()
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float64, device="cpu") / head_dim
        inv_freq = 1.0 / (theta**exponents)
        rope_type = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
        if rope_type == "llama3":
            inv_freq = _llama3_inv_freq(inv_freq, scaling or {})
        elif rope_type not in ("default", None):
            raise UserError(f"draft config: rope_scaling type {rope_type!r} is not supported; use none or llama3")
        self.inv_freq = inv_freq.float()

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions ``[B, T]`` -> cos, sin ``[B, 1, T, D]`` (broadcast over heads)."""
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.float()[..., None] * self.inv_freq  # [B, T, D/2]
        emb = torch.cat([freqs, freqs], dim=-1)[:, None]  # [B, 1, T, D]
        return emb.cos().to(dtype), emb.sin().to(dtype)


def _llama3_inv_freq(inv_freq: torch.Tensor, s: dict[str, Any]) -> torch.Tensor:
    factor, low, high = s["factor"], s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old_len = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    mid = (wavelen <= old_len / low) & (wavelen >= old_len / high)
    return torch.where(mid, smoothed, out)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x ``[B, heads, T, D]``, cos/sin ``[B, 1, T, D]``."""
    return x * cos + _rotate_half(x) * sin


class SwiGLU(nn.Module):
    """The Qwen3/Llama MLP: ``down(act(gate(x)) * up(x))``, no biases."""

    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str = "silu"):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        if hidden_act not in _ACTIVATIONS:
            raise UserError(f"draft config: hidden_act {hidden_act!r} is not supported; use silu")
        self.act = _ACTIVATIONS[hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
