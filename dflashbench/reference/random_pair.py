"""Random-weight models in the shapes of released checkpoints, made on the spot (no download, no disk).

``random:SHAPE`` names one wherever a model or draft directory is accepted by ``dflashbench serve`` (and so by
the reference backend of a sweep): the target is a real transformers Qwen3 model of that shape with random
weights and a word-level tokenizer of its vocabulary size; the draft is a DFlash drafter or an EAGLE-3 head
of the released checkpoints' shape for that target. Random weights make tau meaningless (drafts are almost
never accepted) and outputs nonsense; what they give is the real cost of every pass at full size, so the GPU
path (launch, memory, kernels, ``/metrics``, NVML telemetry, energy per token) runs at the scale of the real
model. Targets have no end-of-sequence token: every request runs to its ``max_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dflashbench.errors import UserError

PREFIX = "random:"


@dataclass(frozen=True)
class Shape:
    """A target's shape and the layer counts of the drafters released for it."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    dflash_layers: int
    eagle3_layers: int = 1

    def target_kwargs(self) -> dict:
        return dict(vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_layers=self.num_layers,
                    num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                    intermediate_size=self.intermediate_size)  # fmt: skip


# Qwen3-0.6B and Qwen3-8B: their config.json (28 / 36 layers, hidden 1024 / 4096, GQA 16/8 and 32/8, head 128
# for 8B, intermediate 3072 / 12288, vocabulary 151936). DFlash drafters: z-lab's Qwen3 drafters have 5 layers
# with the target's intermediate size (z-lab/Qwen3-4B-DFlash-b16 config.json, ../shared reference notes);
# EAGLE-3 heads have one layer.
SHAPES: dict[str, Shape] = {
    "tiny": Shape(2048, 128, 4, 4, 2, 384, dflash_layers=2),
    "small": Shape(8192, 512, 8, 8, 4, 1536, dflash_layers=2),
    "qwen3-0.6b": Shape(151936, 1024, 28, 16, 8, 3072, dflash_layers=3),
    "qwen3-8b": Shape(151936, 4096, 36, 32, 8, 12288, dflash_layers=5),
}


def is_random(spec: str | None) -> bool:
    return spec is not None and str(spec).startswith(PREFIX)


def shape_of(spec: str) -> Shape:
    """``random:qwen3-8b`` -> its :class:`Shape`; a one-line error naming the shapes otherwise."""
    name = str(spec).removeprefix(PREFIX)
    if name not in SHAPES:
        raise UserError(f"unknown random model shape {name!r} in {spec!r}; choose one of: "
                        f"{', '.join(PREFIX + s for s in SHAPES)}")  # fmt: skip
    return SHAPES[name]


def random_target(spec: str, *, device: str = "cpu", dtype: torch.dtype | None = None, seed: int = 0):
    """A random-weight Qwen3 target of ``spec``'s shape with a word-level tokenizer of its vocabulary
    (prompt words it does not know are ``<unk>``, so prompts keep their length in words)."""
    from dflashbench.reference.target import _check_device
    from dflashbench.reference.tiny import SPECIALS, _tokenizer, tiny_target

    shape = shape_of(spec)
    _check_device(device)
    dtype = dtype or (torch.bfloat16 if str(device).startswith("cuda") else torch.float32)
    target = tiny_target(seed=seed, dtype=dtype, device=device, init_std=0.02, eos_token_id=None,
                         **shape.target_kwargs())  # fmt: skip
    target.tokenizer = _tokenizer([f"w{i}" for i in range(shape.vocab_size - len(SPECIALS))])
    target.path = spec
    return target


def random_drafter(spec: str, method: str, target, *, seed: int = 1):
    """The drafter for ``method`` (dflash or eagle3) in the released shape for ``spec``'s target."""
    from dflashbench.reference.dflash.drafter import DFlashDrafter
    from dflashbench.reference.eagle3.drafter import Eagle3Drafter
    from dflashbench.reference.tiny import tiny_draft, tiny_eagle3

    shape = shape_of(spec)
    if (shape.hidden_size, shape.vocab_size) != (target.hidden_size, target.vocab_size):
        raise UserError(f"draft {spec} does not fit target {target.path}: use the same random shape for both")
    if method == "dflash":
        draft = tiny_draft(target, block_size=16, num_layers=shape.dflash_layers, seed=seed, init_std=0.02,
                           intermediate_size=shape.intermediate_size)  # fmt: skip
        return DFlashDrafter(draft, target)
    if method == "eagle3":
        head = tiny_eagle3(target, k=3, seed=seed, init_std=0.02, intermediate_size=shape.intermediate_size)
        return Eagle3Drafter(head, target)
    raise UserError(f"random drafters exist for dflash and eagle3, not {method!r}")
