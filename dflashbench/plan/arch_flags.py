"""Engine flags that run on one GPU architecture only, why, and which of them a plan keeps.

The registry puts such flags in ``[models.recipes.<engine>.gpu.<arch>]``; this module knows which flags are
architecture-bound (each with the engine source that says so), checks that the registry never gives them to
every GPU, and explains a plan: which bound flags are in for the architecture planned for, which are out.
"""

from __future__ import annotations

from dataclasses import dataclass

from dflashbench.plan.gpus import Arch
from dflashbench.plan.models import ModelEntry, Recipe


@dataclass(frozen=True)
class Bound:
    arches: tuple[Arch, ...]
    why: str


# (flag, value) -> where it runs, with the short reason a plan prints. Read from SGLang's wheels 0.5.9 to 0.5.23
# (sglang/srt/server_args.py and, from 0.5.20, sglang/srt/arg_groups/*.py) and sgl-kernel:
# - fa3: sgl-kernel's is_fa3_supported() is compute capability 8.x/9.x and flash_attn_with_kvcache raises
#   NotImplementedError elsewhere (sgl-kernel python/sgl_kernel/flash_attn.py); SGLang picks fa3 itself only on
#   Hopper (get_default_attn_backend, sglang/srt/arg_groups/model_override_base.py, 0.5.23).
# - trtllm_mha: 0.5.18 and older refuse its prefill outside SM100 (server_args.py: "TRTLLM MHA backend for prefill
#   is only supported on Blackwell GPUs (SM100)"); 0.5.19+ also take SM90 (arg_groups/attention_hook.py), but SGLang
#   picks it itself only on SM100/SM103 (get_default_attn_backend) and z-lab published it for Blackwell.
# - fa4 as the DFlash drafter's backend: z-lab published it for Blackwell; SGLang's own DFlash drafter fallback is
#   fa4 only on SM100 (_resolve_dflash_draft_attention_backend, arg_groups/speculative_hook.py, 0.5.23); elsewhere
#   the drafter takes the target's backend.
_FA3 = Bound(("hopper",), "sgl-kernel builds FlashAttention 3 for SM80-SM90 only")
ARCH_BOUND: dict[str, dict[tuple[str, str], Bound]] = {
    "sglang": {
        ("--attention-backend", "fa3"): _FA3,
        ("--speculative-draft-attention-backend", "fa3"): _FA3,
        ("--attention-backend", "trtllm_mha"): Bound(
            ("blackwell",), "SGLang 0.5.18 and older refuse its prefill outside SM100; SGLang picks it only on SM100/SM103"
        ),
        ("--speculative-draft-attention-backend", "fa4"): Bound(
            ("blackwell",), "published for Blackwell; SGLang's DFlash drafter falls back to it only on SM100"
        ),
    },
}


def bound_pairs(engine: str, args: list[str]) -> list[tuple[str, str]]:
    """The architecture-bound ``(flag, value)`` pairs among ``args``."""
    known = ARCH_BOUND.get(engine, {})
    return [(a, b) for a, b in zip(args, args[1:], strict=False) if (a, b) in known]


def recipe_problems(engine: str, recipe: Recipe) -> list[str]:
    """What is wrong with a recipe's architecture binding: a bound flag given to every GPU, or put under an
    architecture it does not run on."""
    out = [f"{a} {b} runs on {'/'.join(ARCH_BOUND[engine][(a, b)].arches)} only: move it under gpu.<arch>"
           for a, b in bound_pairs(engine, recipe.flat())]  # fmt: skip
    for arch, flags in recipe.gpu.items():
        for a, b in bound_pairs(engine, flags.flat()):
            if arch not in ARCH_BOUND[engine][(a, b)].arches:
                out.append(f"gpu.{arch} has {a} {b}, which runs on {'/'.join(ARCH_BOUND[engine][(a, b)].arches)} only")
    return out


def plan_lines(entry: ModelEntry | None, engine: str, arch: Arch | None) -> list[str]:
    """Why each architecture-bound recipe flag is in or out of the plan for ``arch``: one line per table."""
    recipe = entry.recipes.get(engine) if entry else None  # type: ignore[call-overload]
    if recipe is None or not recipe.gpu:
        return []
    lines = []
    for bound_arch, flags in recipe.gpu.items():
        listed = "; ".join(f"{m}: {' '.join(getattr(flags, m))}" for m in ("all", "ar", "eagle3", "dflash")
                           if getattr(flags, m))  # fmt: skip
        if bound_arch == arch:
            lines.append(f"in  {listed} (the {bound_arch} recipe)")
            continue
        whys = dict.fromkeys(ARCH_BOUND.get(engine, {})[p].why for p in bound_pairs(engine, flags.flat()))
        lines.append(f"out {listed} ({bound_arch} only: {'; '.join(whys) or flags.source})")
    return lines
