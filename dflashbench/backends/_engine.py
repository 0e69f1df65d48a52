"""What the three engine backends (vLLM, SGLang, TensorRT-LLM) share: draft settings, flags and HTTP reads.

Speculation length, one number per method so that every engine runs the same drafter the same way:
DFlash drafts ``block_size - 1`` tokens per step (the block is the anchor plus that many masks); EAGLE-3
drafts a chain of ``k`` tokens. ``ServerSpec.num_speculative_tokens`` wins; otherwise DFlash takes the block
size from ``ServerSpec.draft_block_size`` (the model registry), then from a local draft checkpoint's
``config.json``. Where neither knows it (a hub id outside the registry) each engine decides: vLLM needs a
number and falls back to the released drafters' block of 16; SGLang is left to read the drafter itself;
TensorRT-LLM, which must match the checkpoint, refuses to guess. EAGLE-3 takes a local head's own default
(``dflashbench.num_speculative_tokens``, what the reference decoder drafts with it), else 3. DFlash2 drafts blocks as
DFlash does. MTP and the draft-free methods (n-gram) take the engine's documented default from their method record
(``dflashbench/data/methods.toml``, ``defaults.num_speculative_tokens``).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path
from typing import Any

from dflashbench.backends.base import ServerSpec
from dflashbench.backends.counters import Histogram, parse_latency_histograms, parse_vllm_prometheus
from dflashbench.errors import UserError
from dflashbench.methods import record
from dflashbench.model_files import draft_facts
from dflashbench.types import AcceptCounters, Method

DEFAULT_DFLASH_BLOCK_SIZE = 16  # z-lab's released -b16 drafters
DEFAULT_EAGLE3_DRAFT_LEN = 3
# The methods whose drafter predicts a block (anchor + masks): the draft length is the block size - 1.
BLOCK_DRAFTERS = (Method.DFLASH, Method.DFLASH2)


def installed_version(*dists: str) -> str | None:
    """The first of ``dists`` installed here (package metadata; the engine itself is never imported), else ``None``."""
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def at_least(version: str, minimum: str) -> bool:
    """``version >= minimum`` for release numbers (``0.21.0``, ``0.21.1.post1``, ``0.22.0+cu129``); a pre-release
    or dev build of ``minimum`` itself (``0.21.0rc1``, ``0.21.0.dev3``) is below it, since it may predate
    the change, and a ``minimum`` that is itself a pre-release (``1.3.0rc27``) is met by later pre-releases of the same
    numbers and by the release. Unparseable versions count as new (a source build of the current tree)."""
    ours, ours_pre = _release(version)
    wanted, wanted_pre = _release(minimum)
    if ours is None:
        return True
    if ours != wanted:
        return ours > wanted  # type: ignore[operator]
    if wanted_pre is None:
        return ours_pre is None
    return ours_pre is None or ours_pre >= wanted_pre


_PRE_ORDER = {"dev": 0, "a": 1, "alpha": 1, "b": 2, "beta": 2, "c": 3, "rc": 3}


def _release(text: str) -> tuple[tuple[int, ...] | None, tuple[int, int] | None]:
    """``"1.3.0rc27"`` -> ``((1, 3, 0, 0), (3, 27))``: the release numbers, and the pre-release kind and number
    (``None`` for a release; post and local builds count as the release)."""
    match = re.match(r"(\d+(?:\.\d+)*)(.*)", text.strip())
    if match is None:
        return None, None
    nums = [int(x) for x in match[1].split(".")]
    pre = re.match(r"\.?(rc|alpha|beta|dev|a|b|c)(\d*)", match[2])
    return tuple(nums + [0] * (4 - len(nums))), ((_PRE_ORDER[pre[1]], int(pre[2] or 0)) if pre else None)


def require_draft(spec: ServerSpec, backend: str) -> str:
    """The draft checkpoint of a speculative method; a clear error when it is missing."""
    if not spec.draft:
        what = record(spec.method).draft_words or "a draft"
        raise UserError(
            f"{backend} {spec.method.value} needs {what}: pass --draft (or set drafts.{spec.method.value} "
            "in the suite file)."
        )
    return spec.draft


def _local_config(draft: str) -> dict:
    """A local checkpoint's ``config.json``; ``{}`` for a hub id (nothing is downloaded to build a command) or
    an unreadable file."""
    try:
        data = json.loads((Path(draft).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def local_block_size(draft: str) -> int | None:
    """``block_size`` of a local DFlash checkpoint (top level or under ``dflash_config``), else ``None``.

    A hub id (``z-lab/Qwen3-8B-DFlash-b16``) is not looked up: nothing is downloaded to build a command.
    """
    data = _local_config(draft)
    return draft_facts(data).block_size if data else None


def local_eagle3_draft_len(draft: str) -> int | None:
    """The chain length a local EAGLE-3 head written by dflashbench drafts by default
    (``dflashbench.num_speculative_tokens`` in its ``config.json``; what the reference decoder drafts with it),
    else ``None``: so an engine drafts as many tokens with the same head as the reference backend does."""
    value = (_local_config(draft).get("dflashbench") or {}).get("num_speculative_tokens")
    return value if isinstance(value, int) and value >= 1 else None


def dflash_block_size(spec: ServerSpec) -> int | None:
    """The DFlash drafter's block size: ``spec.draft_block_size``, else a local checkpoint's, else ``None``."""
    if spec.draft_block_size is not None:
        if spec.draft_block_size < 2:
            raise UserError(f"a DFlash block holds the anchor and at least one mask: draft_block_size >= 2, "
                            f"got {spec.draft_block_size}")  # fmt: skip
        return spec.draft_block_size
    return local_block_size(spec.draft) if spec.draft else None


def explicit_speculative_tokens(spec: ServerSpec) -> int | None:
    """``spec.num_speculative_tokens``, checked; ``None`` when not given."""
    if spec.num_speculative_tokens is not None and spec.num_speculative_tokens < 1:
        raise UserError(f"num_speculative_tokens must be >= 1, got {spec.num_speculative_tokens}")
    return spec.num_speculative_tokens


def num_speculative_tokens(spec: ServerSpec) -> int:
    """Draft tokens per verification step for a speculative method (see the module docstring)."""
    explicit = explicit_speculative_tokens(spec)
    if explicit is not None:
        return explicit
    if spec.method in BLOCK_DRAFTERS:
        # Unknown block: z-lab's released drafters are -b16. Only for engines that take any length (vLLM
        # does not compare it with the drafter's block); SGLang and TensorRT-LLM handle the unknown case.
        return (dflash_block_size(spec) or DEFAULT_DFLASH_BLOCK_SIZE) - 1
    if spec.method is Method.EAGLE3:
        return (local_eagle3_draft_len(spec.draft) if spec.draft else None) or DEFAULT_EAGLE3_DRAFT_LEN
    return engine_default(spec, "num_speculative_tokens") or 1


def engine_default(spec: ServerSpec, key: str, engine: str | None = None) -> int | None:
    """The method record's default ``key`` for ``spec.method`` on ``engine`` (vLLM's where none is named: the
    engines document the draft-free methods there), else ``None``."""
    rec = record(spec.method)
    for name in (engine, "vllm"):
        found = rec.engines.get(name) if name else None  # type: ignore[call-overload]
        if found is not None and key in found.defaults:
            return found.defaults[key]
    return None


def reject_engine_config(spec: ServerSpec, backend: str) -> None:
    """``engine_config`` is TensorRT-LLM's YAML; elsewhere it would be silently dropped, so it is an error."""
    if spec.engine_config:
        keys = ", ".join(sorted(spec.engine_config))
        raise UserError(
            f"engine_config ({keys}) is merged into TensorRT-LLM's YAML only; {backend} takes options as "
            "extra arguments (args in the suite file)"
        )


def max_running_requests(spec: ServerSpec) -> int | None:
    """``spec.max_running_requests``, checked."""
    if spec.max_running_requests is not None and spec.max_running_requests < 1:
        raise UserError(f"max_running_requests must be >= 1, got {spec.max_running_requests}")
    return spec.max_running_requests


def flag_values(args, *names: str):
    """Each value given to ``--flag V`` / ``--flag=V`` among ``args`` for any of ``names``, in order (the user's extra
    arguments come after dflashbench's flags, and argparse and click both keep the last)."""
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in names:
            yield value if eq else (args[i + 1] if i + 1 < len(args) else "")


def last_number(args, kind: type, *names: str):
    """The last value of ``names`` among ``args`` that parses as ``kind`` (int or float), else ``None``."""
    found = None
    for value in flag_values(args, *names):
        try:
            found = kind(value)
        except ValueError:
            continue
    return found


def last_int_flag(args: tuple[str, ...], *names: str) -> int | None:
    """The value of the last ``--flag N`` / ``--flag=N`` among ``args``, or ``None``."""
    return last_number(args, int, *names)


def check_parallelism(spec: ServerSpec) -> None:
    for name in ("tp", "dp", "ep", "pp", "nnodes"):
        if getattr(spec, name) < 1:
            raise UserError(f"--{name} must be >= 1, got {getattr(spec, name)}")


def single_node(spec: ServerSpec, engine: str, why: str) -> None:
    """An engine dflashbench does not launch across nodes: a plan that spans them is refused, saying why."""
    if spec.nnodes > 1 or spec.pp > 1:
        raise UserError(f"{engine} is not launched across nodes or pipeline stages here ({why}): plan it on one node "
                        "(--gpu NxNAME), or serve it across nodes yourself and measure it with --endpoint URL")  # fmt: skip


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

    async def read_server_timing(self, session, base_url: str) -> dict[str, Histogram] | None:
        """The engine's own latency histograms on ``/metrics`` (:data:`~dflashbench.backends.counters.SERVER_TIMING`,
        cumulative; the sweep takes their deltas over a point); ``None`` where the page is not served."""
        text = await get_text(session, f"{base_url}/metrics")
        return parse_latency_histograms(text, "vllm:") if text is not None else None
