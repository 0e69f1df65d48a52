"""One generation on the reference decoder, timed from the outside (``dflashbench generate``)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from dflashbench.errors import UserError


@dataclass
class GenerateRecord:
    text: str
    token_ids: list[int]
    tau: float | None  # 1 + accepted / steps that drafted (vLLM's rule, the server's /metrics)
    num_steps: int
    tok_per_s: float
    model: str
    draft: str | None
    method: str
    finish_reason: str
    prompt_tokens: int
    seconds: float
    num_drafts: int = 0  # verification steps that drafted (n-gram drafting skips steps with no match)
    tokens_per_step: float | None = None  # tokens committed per verification step, every step counted

    def to_dict(self) -> dict:
        return asdict(self)


def prompt_ids(tokenizer, prompt: str) -> list[int]:
    """The prompt as the model expects it: through its chat template when it has one."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt)["input_ids"])


def generate_once(model: str | Path, draft: str | Path | None, prompt: str, *, method: str = "dflash",
                  temperature: float = 0.0, max_new_tokens: int = 256, device: str = "cpu", dtype: str | None = None,
                  seed: int | None = None) -> GenerateRecord:
    from dflashbench.reference.decode import ar_decode, dflash_decode
    from dflashbench.reference.dflash.checkpoint import check_draft_fits, load_draft, read_config
    from dflashbench.reference.target import load_target

    if method not in ("ar", "dflash", "ngram"):
        raise UserError(f"--method must be ar, dflash or ngram, not {method!r}")
    if max_new_tokens < 1:
        raise UserError("--max-new-tokens must be at least 1")
    if temperature < 0:
        raise UserError("--temperature must be >= 0")
    if method == "dflash" and draft is None:
        raise UserError("--method dflash needs --draft DIR (a DFlash drafter checkpoint)")
    for label, path in (("model", model), ("draft", draft if method == "dflash" else None)):
        if path is not None and not Path(path).is_dir():
            raise UserError(f"--{label} {path}: no such directory")
    if method == "dflash":
        read_config(draft)  # a broken drafter config fails before the target is loaded
    target = load_target(model, device=device, dtype=dtype)
    drafter = None
    if method == "dflash":
        check_draft_fits(read_config(draft), target)
        drafter = load_draft(draft, device=target.device, dtype=target.dtype)
    elif method == "ngram":
        from dflashbench.reference.ngram import NgramDrafter

        drafter = NgramDrafter()  # vLLM's documented defaults (dflashbench/data/methods.toml)
    if target.tokenizer is None:
        raise UserError(f"{model} has no tokenizer; generate needs one to encode --prompt")
    ids = prompt_ids(target.tokenizer, prompt)
    if not ids:
        raise UserError("--prompt encodes to no tokens")
    if seed is not None:
        torch.manual_seed(seed)
    stops = target.stop_token_ids()
    t0 = time.perf_counter()
    if drafter is None:
        gen = ar_decode(target, ids, max_new_tokens=max_new_tokens, temperature=temperature, stop_token_ids=stops,
                        seed=seed)
    else:
        gen = dflash_decode(target, drafter, ids, max_new_tokens=max_new_tokens, temperature=temperature,
                            stop_token_ids=stops, seed=seed)
    if target.device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return GenerateRecord(
        text=target.tokenizer.decode(gen.token_ids, skip_special_tokens=True), token_ids=gen.token_ids,
        tau=gen.tau if gen.num_steps else None, num_steps=gen.num_steps, num_drafts=gen.num_drafts,
        tokens_per_step=gen.tokens_per_step if gen.num_steps else None,
        tok_per_s=len(gen.token_ids) / seconds if seconds > 0 else float("nan"), model=str(model),
        draft=str(draft) if method == "dflash" else None, method=method, finish_reason=gen.finish_reason,
        prompt_tokens=len(ids), seconds=seconds)
