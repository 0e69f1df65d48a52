"""Tiny random-weight targets and drafters of both families (tests, micro-benchmarks, fixtures of other parts).

``tiny_target`` builds a real transformers Qwen3 or Llama model from a config; ``write_tiny_pair`` saves a
target (with a small word-level tokenizer and a chat template) and a matching DFlash drafter to disk, so every
command that takes ``--model``/``--draft`` can run on them offline in a second.
"""

from __future__ import annotations

from pathlib import Path

import torch

from dflashbench.reference.dflash.network import DFlashDraftConfig, DFlashDraftModel
from dflashbench.reference.eagle3.config import Eagle3Config, spread_aux_layer_ids
from dflashbench.reference.eagle3.network import Eagle3Model
from dflashbench.reference.target import Target
from dflashbench.reference.weights import dtype_name

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|> {% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)
SPECIALS = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>"]


def tiny_target(arch: str = "qwen3", *, vocab_size: int = 64, hidden_size: int = 32, num_layers: int = 4,
                num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int | None = None, seed: int = 0,
                init_std: float = 0.2, dtype: torch.dtype = torch.float32, device: str = "cpu",
                eos_token_id: int | None = 1) -> Target:
    """A random transformers model. ``init_std`` is large enough that next-token distributions are peaked
    (so greedy choices are not numerical near-ties)."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    common = dict(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
                  num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                  intermediate_size=intermediate_size or 2 * hidden_size, max_position_embeddings=4096,
                  initializer_range=init_std, tie_word_embeddings=False, eos_token_id=eos_token_id,
                  bos_token_id=None, pad_token_id=None, attn_implementation="sdpa")
    if arch == "qwen3":
        cfg = Qwen3Config(head_dim=hidden_size // num_heads, rope_theta=10000.0, **common)
    elif arch == "llama":
        cfg = LlamaConfig(rope_theta=10000.0, **common)
    else:
        raise ValueError(f"unknown tiny architecture {arch!r}; use qwen3 or llama")
    torch.manual_seed(seed)
    with torch.device(device):  # build in place: large shapes on a GPU never touch host memory
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    return Target(model)


def tiny_draft(target: Target, *, block_size: int = 4, num_layers: int = 2, seed: int = 0,
               mask_token_id: int | None = None, target_layer_ids: list[int] | None = None,
               init_std: float = 0.2, intermediate_size: int | None = None) -> DFlashDraftModel:
    """A random drafter that fits ``target`` (same hidden size, its layers, its vocabulary)."""
    tc = target.config
    cfg = DFlashDraftConfig(
        hidden_size=target.hidden_size, intermediate_size=intermediate_size or 2 * target.hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=tc.num_attention_heads, num_key_value_heads=tc.num_key_value_heads,
        head_dim=target.hidden_size // tc.num_attention_heads, num_target_layers=target.num_layers,
        mask_token_id=target.vocab_size - 1 if mask_token_id is None else mask_token_id, block_size=block_size,
        target_layer_ids=target_layer_ids, rope_theta=10000.0, vocab_size=target.vocab_size,
        dtype=str(target.dtype).removeprefix("torch."))
    model = DFlashDraftModel(cfg)
    model.reset_parameters(std=init_std, generator=torch.Generator().manual_seed(seed))
    return model.to(device=target.device, dtype=target.dtype).eval()


def _tokenizer(words: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIALS + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    from tokenizers import decoders

    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", additional_special_tokens=SPECIALS[2:])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def write_tiny_pair(out_dir: str | Path, *, arch: str = "qwen3", vocab_size: int = 64, block_size: int = 4,
                    seed: int = 0, **target_kw) -> tuple[Path, Path]:
    """Save a tiny target (+ tokenizer with chat template) and a fitting drafter -> (target_dir, draft_dir)."""
    from dflashbench.reference.dflash.checkpoint import save_draft

    out = Path(out_dir)
    words = [f"w{i}" for i in range(vocab_size - len(SPECIALS))]
    tok = _tokenizer(words)
    target = tiny_target(arch, vocab_size=vocab_size, seed=seed, eos_token_id=tok.eos_token_id, **target_kw)
    target.model.save_pretrained(out / "target")
    tok.save_pretrained(out / "target")
    draft = tiny_draft(target, block_size=block_size, seed=seed + 1, mask_token_id=SPECIALS.index("<|MASK|>"))
    save_draft(draft, out / "draft")
    return out / "target", out / "draft"


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
