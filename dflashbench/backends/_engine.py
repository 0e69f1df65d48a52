"""What the three engine backends (vLLM, SGLang, TensorRT-LLM) share: draft settings and HTTP reads.

Speculation length, one number per method so that every engine runs the same drafter the same way:
DFlash drafts ``block_size - 1`` tokens per step (the block is the anchor plus that many masks); EAGLE-3
drafts a chain of ``k`` tokens. ``ServerSpec.num_speculative_tokens`` wins; otherwise DFlash reads
``block_size`` from a local draft checkpoint's ``config.json`` and falls back to the released drafters'
block of 16; EAGLE-3 falls back to 3.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dflashbench.backends.base import ServerSpec
from dflashbench.backends.counters import parse_vllm_prometheus
from dflashbench.errors import UserError
from dflashbench.types import AcceptCounters, Method

DEFAULT_DFLASH_BLOCK_SIZE = 16  # z-lab's released -b16 drafters
DEFAULT_EAGLE3_DRAFT_LEN = 3


def require_draft(spec: ServerSpec, backend: str) -> str:
    """The draft checkpoint of a speculative method; a clear error when it is missing."""
    if not spec.draft:
        what = "a DFlash drafter" if spec.method is Method.DFLASH else "an EAGLE-3 head"
        raise UserError(
            f"{backend} {spec.method.value} needs {what}: pass --draft (or set drafts.{spec.method.value} "
            "in the suite file)."
        )
    return spec.draft


def draft_block_size(draft: str) -> int | None:
    """``block_size`` of a local DFlash checkpoint (top level or under ``dflash_config``), else ``None``.

    A hub id (``z-lab/Qwen3-8B-DFlash-b16``) is not looked up: nothing is downloaded to build a command.
    """
    config = Path(draft).expanduser() / "config.json"
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    for holder in (data, data.get("dflash_config") or {}):
        value = holder.get("block_size") if isinstance(holder, dict) else None
        if isinstance(value, int) and value > 1:
            return value
    return None


def num_speculative_tokens(spec: ServerSpec) -> int:
    """Draft tokens per verification step for a speculative method (see the module docstring)."""
    if spec.num_speculative_tokens is not None:
        if spec.num_speculative_tokens < 1:
            raise UserError(f"num_speculative_tokens must be >= 1, got {spec.num_speculative_tokens}")
        return spec.num_speculative_tokens
    if spec.method is Method.DFLASH:
        block = draft_block_size(spec.draft) if spec.draft else None
        return (block or DEFAULT_DFLASH_BLOCK_SIZE) - 1
    return DEFAULT_EAGLE3_DRAFT_LEN


def check_parallelism(spec: ServerSpec) -> None:
    for name in ("tp", "dp", "ep"):
        if getattr(spec, name) < 1:
            raise UserError(f"--{name} must be >= 1, got {getattr(spec, name)}")


# --- HTTP reads shared by the backends (``session`` is an aiohttp.ClientSession) ---


async def get_text(session, url: str) -> str | None:
    """Body of ``GET url``, or ``None`` when the server answers with an error status (e.g. 404)."""
    async with session.get(url) as resp:
        if resp.status != 200:
            return None
        return await resp.text()


async def get_json(session, url: str) -> Any | None:
    text = await get_text(session, url)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


async def post_ok(session, url: str) -> bool:
    """``POST url`` with no body; whether the server answered 2xx."""
    async with session.post(url) as resp:
        await resp.read()
        return 200 <= resp.status < 300


class VllmHttpApi:
    """vLLM's readiness and counter endpoints: ``/health`` and vLLM-named spec-decode counters on ``/metrics``.

    vLLM serves them, and so does dflashbench's own reference server, so both backends share this.
    """

    def health_path(self) -> str:
        return "/health"

    async def read_counters(self, session, base_url: str) -> AcceptCounters | None:
        """Cumulative counters from ``/metrics``; ``None`` for a server without speculative decoding (AR)."""
        text = await get_text(session, f"{base_url}/metrics")
        return parse_vllm_prometheus(text) if text is not None else None
