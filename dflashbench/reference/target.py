"""The target: any transformers causal LM (Qwen3, Llama, ...) loaded from a local directory.

:class:`Target` wraps the model and its tokenizer and exposes what DFlash shares with the drafter (the input
embedding and the LM head). :class:`TargetKV` runs the target over a batch of rows with one transformers
``DynamicCache`` and per-row lengths: rolling a row back after verification is a ``crop`` when every row keeps
the same number of tokens (always so for a single stream) and otherwise marks the surplus columns as holes
that an explicit attention mask hides, compacting the cache when holes pile up.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dflashbench.errors import UserError
from dflashbench.reference.weights import parse_dtype


@dataclass
class Target:
    """A causal LM plus (optionally) its tokenizer; the drafter shares its embedding and LM head."""

    model: Any  # transformers PreTrainedModel
    tokenizer: Any = None
    path: str | None = None

    @property
    def config(self) -> Any:
        return self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") \
            else self.model.config

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_input_embeddings().weight.shape[0])

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.get_input_embeddings().weight.dtype

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.get_input_embeddings()(ids)

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.get_output_embeddings()(hidden)

    def stop_token_ids(self) -> list[int]:
        """End-of-sequence ids from the generation config and the tokenizer (what ends a chat turn)."""
        ids: list[int] = []
        gen = getattr(self.model, "generation_config", None)
        for source in (getattr(gen, "eos_token_id", None), getattr(self.config, "eos_token_id", None),
                       getattr(self.tokenizer, "eos_token_id", None)):
            for i in source if isinstance(source, list | tuple) else [source]:
                if isinstance(i, int) and i not in ids:
                    ids.append(i)
        return ids


def load_target(path: str | Path, device: str | torch.device = "cpu", dtype: str | torch.dtype | None = None,
                tokenizer: bool = True, attn_implementation: str = "sdpa") -> Target:
    """Load a local transformers causal LM (and its tokenizer); ``dtype=None`` keeps the stored dtype."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(path)
    if not (p / "config.json").is_file():
        raise UserError(f"target model: {p} has no config.json; pass a local transformers model directory")
    _check_device(device)
    from transformers.utils import logging as hf_logging

    torch_dtype = parse_dtype(dtype) or "auto"
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a library call prints nothing
    try:
        model = AutoModelForCausalLM.from_pretrained(str(p), dtype=torch_dtype, attn_implementation=attn_implementation,
                                                     local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"target model: cannot load {p}: {str(exc).splitlines()[0]}") from None
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    model = model.to(device).eval()
    tok = None
    if tokenizer:
        try:
            tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise UserError(f"target model: cannot load the tokenizer in {p}: {str(exc).splitlines()[0]}") from None
    return Target(model, tok, str(p))


def _check_device(device: str | torch.device) -> None:
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device {device!r} requested but CUDA is not available; use --device cpu")


# ------------------------------------------------------------------------------------------- KV management


def extract_context_feature(hidden_states: Sequence[torch.Tensor], layer_ids: Sequence[int]) -> torch.Tensor:
    """Concatenate the outputs of target layers ``layer_ids`` -> ``[B, T, n*H]``.

    ``hidden_states`` is transformers' ``output_hidden_states`` tuple, whose element 0 is the embedding
    output, so layer id ``k`` is ``hidden_states[k + 1]``.
    """
    return torch.cat([hidden_states[k + 1] for k in layer_ids], dim=-1)


def _kv_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if hasattr(cache, "layers"):  # transformers >= 4.56
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))  # pragma: no cover - older transformers


def _new_cache(kv: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None) -> Any:
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=list(kv)) if kv else DynamicCache()


def crop_cache(cache: Any, remove: int) -> None:
    """Drop the last ``remove`` columns (``crop(-n)`` means the same in every transformers version)."""
    if remove > 0:
        cache.crop(-remove)


def compaction_index(valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """valid ``[B, L]`` -> (index ``[B, L']``, new valid ``[B, L']``): each row's valid columns moved left, in
    order; ``L'`` = the most valid columns of any row. RoPE is applied before caching, so moving K/V columns
    changes nothing as long as the mask moves with them."""
    counts = valid.sum(1)
    width = int(counts.max()) if valid.numel() else 0
    order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)[:, :width]  # valid columns first
    new_valid = torch.arange(width, device=valid.device)[None] < counts[:, None]
    return torch.where(new_valid, order, torch.zeros_like(order)), new_valid


def _cache_keyword(model: Any) -> str:
    """The name a transformers model's ``forward`` takes its KV cache by (and its output returns it by):
    ``cache`` from the release that renamed it (transformers 5.24.0 models/qwen3/modeling_qwen3.py:
    ``@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")``, the output's field ``cache``), else
    ``past_key_values``, which releases before it take and 5.40.0 removes."""
    cached = getattr(model, "_dflashbench_cache_kw", None)
    if cached is None:
        params = inspect.signature(model.forward).parameters
        cached = "cache" if "cache" in params else "past_key_values"
        model._dflashbench_cache_kw = cached  # read once per model: forward runs every decode step
    return cached


class TargetKV:
    """The target's KV cache for a batch of rows, each at its own position.

    ``valid[r, c]`` says whether physical column ``c`` holds a committed token of row ``r``; ``pos[r]`` is row
    ``r``'s next position (= its committed length). :meth:`forward` appends the same number ``T`` of tokens to
    every row; :meth:`commit` then keeps the first ``keep[r]`` of them.
    """

    def __init__(self, target: Target):
        self.target = target
        dev = target.device
        self.cache = _new_cache()
        self.valid = torch.zeros(0, 0, dtype=torch.bool, device=dev)
        self.pos = torch.zeros(0, dtype=torch.long, device=dev)
        self._pending = 0

    @property
    def batch_size(self) -> int:
        return int(self.pos.shape[0])

    @property
    def length(self) -> int:
        return int(self.valid.shape[1])

    @torch.no_grad()
    def prefill(self, prompts: Sequence[Sequence[int]], layer_ids: Sequence[int] | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Start a fresh cache with one row per prompt, all in one target pass -> (each row's last logits
        ``[B, 1, V]``, features ``[B, P, n*H]``, valid up to each prompt's length).

        Prompts are right-padded to the longest ``P``: under the causal mask no prompt token sees a pad, and
        :meth:`commit` then keeps each row's own length, leaving the pads as holes that later passes mask out.
        """
        if self.batch_size:
            raise ValueError("prefill starts a fresh cache; merge rows with extend()")
        if not prompts or not all(prompts):
            raise ValueError("prefill needs at least one prompt, and no empty one")
        dev = self.target.device
        lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=dev)
        ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(list(p), dtype=torch.long, device=dev) for p in prompts],
                                              batch_first=True, padding_value=0)  # pad id 0: never seen
        self.valid = torch.zeros(len(prompts), 0, dtype=torch.bool, device=dev)
        self.pos = torch.zeros(len(prompts), dtype=torch.long, device=dev)
        last = lengths - 1
        kept = torch.unique(last)  # sorted: logits only where some row's prompt ends, never [B, P, V]
        logits, feats = self.forward(ids, layer_ids, logits_to_keep=kept)  # [B, len(kept), V]
        rows = torch.arange(len(prompts), device=dev)
        logits = logits[rows, torch.searchsorted(kept, last)][:, None]  # [B, 1, V]
        self.commit(lengths)
        return logits, feats

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, layer_ids: Sequence[int] | None = None,
                logits_to_keep: int | torch.Tensor = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
        """tokens ``[B, T]`` at each row's next positions -> logits ``[B, T, V]`` (or only the last
        ``logits_to_keep`` / at those indices, transformers' meaning), features ``[B, T, n*H]``."""
        B, T = tokens.shape
        L = self.length
        positions = self.pos[:, None] + torch.arange(T, device=tokens.device)  # [B, T]
        mask = None
        if not bool(self.valid.all()):  # holes: say exactly which keys each query may see
            causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
            mask = torch.cat([self.valid[:, None, :].expand(B, T, L), causal.expand(B, T, T)], dim=2)[:, None]
        cache_kw = _cache_keyword(self.target.model)
        out = self.target.model(input_ids=tokens, position_ids=positions, attention_mask=mask,
                                **{cache_kw: self.cache}, use_cache=True,
                                output_hidden_states=layer_ids is not None, logits_to_keep=logits_to_keep)
        self.cache = getattr(out, cache_kw)
        self.valid = torch.cat([self.valid, torch.zeros(B, T, dtype=torch.bool, device=tokens.device)], dim=1)
        self._pending = T
        feats = extract_context_feature(out.hidden_states, layer_ids) if layer_ids is not None else None
        return out.logits, feats

    def commit(self, keep: torch.Tensor) -> None:
        """Keep the first ``keep[r]`` of the ``T`` tokens the last :meth:`forward` appended to row ``r``."""
        T, L = self._pending, self.length
        crop_cache(self.cache, T - int(keep.max()))  # columns no row keeps
        self.valid = self.valid[:, : L - (T - int(keep.max()))]
        new = torch.arange(int(keep.max()), device=keep.device)[None] < keep[:, None]
        self.valid[:, L - T:] = new
        self.pos = self.pos + keep
        self._pending = 0
        self._maybe_compact()

    def extend(self, other: TargetKV) -> None:
        """Add ``other``'s rows (right-padding the shorter side with hole columns)."""
        if not self.batch_size:
            self.cache, self.valid, self.pos = other.cache, other.valid, other.pos
            return
        length = max(self.length, other.length)
        pad = torch.nn.functional.pad
        kv = [(torch.cat([pad(k1, (0, 0, 0, length - k1.shape[2])), pad(k2, (0, 0, 0, length - k2.shape[2]))]),
               torch.cat([pad(v1, (0, 0, 0, length - v1.shape[2])), pad(v2, (0, 0, 0, length - v2.shape[2]))]))
              for (k1, v1), (k2, v2) in zip(_kv_tensors(self.cache), _kv_tensors(other.cache), strict=True)]
        self.cache = _new_cache(kv)
        self.valid = torch.cat([pad(self.valid, (0, length - self.length)), pad(other.valid, (0, length - other.length))])
        self.pos = torch.cat([self.pos, other.pos])

    def select(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (indices), in that order."""
        if rows.numel() == 0:
            self.__init__(self.target)
            return
        self.cache = _new_cache([(k[rows], v[rows]) for k, v in _kv_tensors(self.cache)])
        self.valid, self.pos = self.valid[rows], self.pos[rows]
        self._maybe_compact()

    def _maybe_compact(self, slack: int = 32) -> None:
        waste = self.length - int(self.valid.sum(1).max()) if self.batch_size else 0
        if waste <= max(slack, self.length // 4):
            return
        index, self.valid = compaction_index(self.valid)
        kv = []
        for k, v in _kv_tensors(self.cache):
            idx = index[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
            kv.append((k.gather(2, idx), v.gather(2, idx)))
        self.cache = _new_cache(kv)
