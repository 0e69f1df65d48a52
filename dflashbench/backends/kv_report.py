"""What a launched engine says of its own KV cache, its model runner and its speculative method, read from its log.

Each pattern matches a line the engine prints from a format string in its own source; the release and line where
each was read are beside it. Pure text in, a :class:`KvReport` out: the sweep reads the server's log once the server
is ready, and the manifest keeps the engine's figures beside the memory plan's (dflashbench.run.capacity).

vLLM (vllm@v0.20.0, vllm@v0.32.0 (the CPU build the tests run), vllm@v0.33.0):

- ``"Available KV cache memory: %s GiB"``: vllm/v1/worker/gpu_worker.py#L441 (0.20.0), #L760 (0.32.0), #L773 (0.33.0);
- with ``--kv-cache-memory-bytes``: ``f"Initial free memory {..} GiB, reserved {..} GiB memory for KV Cache as
  specified by kv_cache_memory_bytes config and skipped memory profiling. ..."``: gpu_worker.py#L350-L351 (0.20.0),
  #L658-L659 (0.32.0), #L665-L666 (0.33.0);
- the CPU build: ``f"Explicitly set ({..}/{..}) GiB for KV cache on node {..}."`` (``VLLM_CPU_KVCACHE_SPACE`` or the
  bytes option) and ``f"Auto set ({..}/{..}) GiB for KV cache on node {..}, with ..."``:
  vllm/v1/worker/cpu_worker.py#L230-L232 and #L252-L254 (0.32.0);
- ``"GPU KV cache size: %s tokens"`` and ``"Maximum concurrency for %s tokens per request: %.2fx"``:
  vllm/v1/core/kv_cache_utils.py#L1711 and #L1717 (0.20.0); from some release on one line,
  ``"%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"`` with ``%s`` the pool
  ("GPU", "CPU"): kv_cache_utils.py#L2328-L2329 (0.32.0), #L1148-L1149 (0.33.0);
- the model runner: ``"Using V2 Model Runner"`` whenever V2 runs (gpu_worker.py#L272 (0.20.0), #L518 (0.32.0), #L513
  (0.33.0); cpu_worker.py#L162 (0.32.0)); ``"Model Runner V2 requires Triton; using the V1 model runner instead."``
  and ``"Model Runner V2 does not yet support %s; using the V1 model runner instead."`` (vllm/config/vllm.py#L726 and
  #L731-L732, 0.32.0). Without any of these in a log that has the engine's INFO lines, V1 ran. Not the engine
  core's ``"Initializing a V1 LLM engine (v%s) with config: %s"`` (vllm/v1/engine/core.py#L110 (0.20.0), #L134
  (0.32.0), #L140 (0.33.0)), which names the engine version and the speculative config it loaded:
  ``speculative_config=SpeculativeConfig(method='dflash', model='...', num_spec_tokens=15)``;
- ``"Resolved architecture: %s"`` (vllm/config/model.py#L555 (0.20.0), #L733 (0.32.0), #L744 (0.33.0)): the
  target's, then the draft's (``DFlashDraftModel``; a DFlash2 checkpoint names ``DFlash2DraftModel``).

SGLang (sglang@0.5.23): ``f"max_total_num_tokens={..}, chunked_prefill_size={..}, max_prefill_tokens={..},
max_running_requests={..}, context_len={..}, available_gpu_mem={..:.2f} GB"`` (sglang/srt/managers/scheduler.py
#L1269-L1275) and ``f"KV Cache is allocated. dtype: {..}, #tokens: {..}, K size: {..:.2f} GB, V size: {..:.2f} GB"``
(sglang/srt/mem_cache/memory_pool.py#L2088-L2091).

TensorRT-LLM: ``"[MemUsageChange] Allocated %0.2f GiB for max tokens in paged KV cache (%d)."``
(NVIDIA/TensorRT-LLM cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp, read at
b35ac1b64368513d215c57d2ed01d62d910df8da) and ``"Peak memory during memory usage profiling (torch + non-torch): %.2f
GiB, available KV cache memory when calculating max tokens: %.2f GiB, ..."`` (tensorrt_llm/_torch/pyexecutor/_util.py
KvCacheCreator, read at 0004396720054fd8e205cbf616f21f0b57c6b412).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

_NUM = r"([-0-9][0-9,]*(?:\.[0-9]+)?)"

VLLM = {
    "kv_gib": re.compile(r"Available KV cache memory: " + _NUM + r" GiB"),
    "kv_gib_given": re.compile(r"reserved " + _NUM + r" GiB memory for KV Cache as specified by kv_cache_memory_bytes"),
    "kv_gib_cpu": re.compile(r"(?:Explicitly|Auto) set \(" + _NUM + r"/" + _NUM + r"\) GiB for KV cache on node"),
    "tokens": re.compile(r"(?:^|\] |\s)(GPU|CPU|[A-Z]+(?: \+ host)?) KV cache size: " + _NUM + r" tokens"),
    "concurrency": re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: " + _NUM + r"x"),
    "v2": re.compile(r"Using V2 Model Runner"),
    "v1": re.compile(r"Model Runner V2 (?:requires Triton|does not yet support .*?); using the V1 model runner instead"),
    "engine": re.compile(r"Initializing a V1 LLM engine \(v([^)]+)\) with config: "),
    # model=None for the draft-free methods (ngram, suffix): vllm/config/speculative.py#L1990-L2004 (0.32.0)
    "spec": re.compile(r"speculative_config=SpeculativeConfig\(method='([^']+)', model=(?:'([^']*)'|None)"
                       r"(?:, num_spec_tokens=(\d+))?"),  # fmt: skip
    "arch": re.compile(r"Resolved architecture: (\S+)"),
}
SGLANG = {
    "tokens": re.compile(r"max_total_num_tokens=(\d+), .*?max_running_requests=(\d+)"),
    # the server's arguments as resolved, logged at start: a dict from 0.5.23 (``f"server_args={..}"`` of
    # ServerArgs.resolved_dict(), sglang/srt/entrypoints/engine.py#L311), a dataclass repr before (``f"{server_args=}"``,
    # 0.5.9 engine.py#L156)
    "spec": re.compile(r"\bspeculative_algorithm'?(?:=|: )(?:'([A-Z0-9_]+)'|None)"),
    "draft": re.compile(r"\bspeculative_draft_model_path'?(?:=|: )'([^']*)'"),
    "kv": re.compile(r"KV Cache is allocated\. dtype: \S+, #tokens: (\d+), K size: " + _NUM + r" GB, V size: "
                     + _NUM + r" GB"),  # fmt: skip
}
TRTLLM = {
    "tokens": re.compile(r"\[MemUsageChange\] Allocated " + _NUM + r" GiB for max tokens in paged KV cache \((\d+)\)"),
    "peak": re.compile(r"Peak memory during memory usage profiling \(torch \+ non-torch\): " + _NUM
                       + r" GiB, available KV cache memory when calculating max tokens: " + _NUM + r" GiB"),  # fmt: skip
}


def _num(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(frozen=True)
class KvReport:
    """What the engine's log says; ``None`` where it did not say it. GiB and tokens are per GPU (a worker's)."""

    engine: str
    kv_gib: float | None = None  # the KV cache's memory
    kv_tokens: int | None = None  # the engine's token figure (vLLM: as it defines it in that release)
    max_concurrency: float | None = None  # vLLM: requests of max_model_len tokens it holds
    max_model_len: int | None = None
    max_running_requests: int | None = None  # SGLang's own cap
    pool: str | None = None  # vLLM's "GPU" / "CPU"
    runner: str | None = None  # vLLM's model runner: "V1" or "V2"
    runner_line: str | None = None  # the line that said so (or why none was needed)
    engine_version: str | None = None
    spec_method: str | None = None  # the speculative method the engine loaded ("dflash", "eagle3"; None: none)
    spec_model: str | None = None
    spec_tokens: int | None = None
    architectures: tuple[str, ...] = field(default_factory=tuple)  # resolved: the target's, then the draft's
    spec_read: bool | None = None  # the line naming the speculative method was read (so spec_method None means none)

    @property
    def found(self) -> bool:
        """The engine reported its KV cache's size (memory or tokens)."""
        return self.kv_gib is not None or self.kv_tokens is not None

    def record(self) -> dict:
        """The engine's own figures, as the manifest keeps them (no ``None``)."""
        out = {k: v for k, v in asdict(self).items() if v not in (None, ()) and k != "spec_read"}
        if self.architectures:
            out["architectures"] = list(self.architectures)
        return out


def _last(pattern: re.Pattern, text: str) -> re.Match | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007 - the last one: a restarted worker logs again
        pass
    return found


def parse_vllm(text: str) -> KvReport:
    fields: dict = {"engine": "vllm"}
    for key in ("kv_gib", "kv_gib_given", "kv_gib_cpu"):
        if m := _last(VLLM[key], text):
            fields["kv_gib"] = _num(m.group(1))
    if m := _last(VLLM["tokens"], text):
        fields["pool"], fields["kv_tokens"] = m.group(1), int(_num(m.group(2)))
    if m := _last(VLLM["concurrency"], text):
        fields["max_model_len"], fields["max_concurrency"] = int(_num(m.group(1))), _num(m.group(2))
    if m := _last(VLLM["engine"], text):
        fields["engine_version"], fields["spec_read"] = m.group(1), True
    if m := _last(VLLM["spec"], text):
        fields["spec_method"], fields["spec_model"] = m.group(1), m.group(2)
        fields["spec_tokens"] = int(m.group(3)) if m.group(3) else None
    fields["architectures"] = tuple(dict.fromkeys(m.group(1) for m in VLLM["arch"].finditer(text)))
    if m := _last(VLLM["v2"], text):
        fields["runner"], fields["runner_line"] = "V2", m.group(0)
    elif m := _last(VLLM["v1"], text):
        fields["runner"], fields["runner_line"] = "V1", m.group(0)
    elif "engine_version" in fields:  # INFO lines are on, and no worker said "Using V2 Model Runner"
        fields["runner"] = "V1"
        fields["runner_line"] = "no 'Using V2 Model Runner' line (vLLM logs it whenever V2 runs)"
    return KvReport(**fields)


# SGLang resolves NEXTN to EAGLE before it logs its arguments (sgl-project/sglang@v0.5.23:python/sglang/srt/
# arg_groups/speculative_hook.py#L109-L116; to FROZEN_KV_MTP for a Gemma 4 assistant draft, which MTP here never is)
SGLANG_RESOLVES = {"NEXTN": "EAGLE"}


def loaded_problem(method: str, report: KvReport) -> str | None:
    """What the engine says it loaded against what ``method`` asked for, where the log says it (vLLM's engine config
    line and model-runner line): another speculative method, or a DFlash2 drafter (``DFlash2DraftModel`` among the
    resolved architectures) run by the V1 model runner, which drafts it as plain DFlash (its candidate selector runs
    on V2 only: vllm-project/vllm@v0.33.0:vllm/v1/worker/gpu/spec_decode/__init__.py#L42-L47; 0.28.0 does so without
    a word, vllm/config/vllm.py#L616-L643). ``None``: nothing to say."""
    from dflashbench.methods import record

    if not report.spec_read:
        return None
    if method == "ar":
        return f"the engine loaded speculative method {report.spec_method!r} for ar" if report.spec_method else None
    asked = record(method).on(report.engine).name
    asked = SGLANG_RESOLVES.get(asked, asked) if report.engine == "sglang" else asked
    if report.spec_method != asked:
        said = "vLLM's config line names" if report.engine == "vllm" else "SGLang's resolved server arguments name"
        return (f"{method}: {said} speculative method {report.spec_method!r}, not {asked!r} "
                "(what dflashbench passed)")  # fmt: skip
    if method == "dflash2" and report.runner == "V1":
        return (f"dflash2: vLLM ran the DFlash2 drafter on its V1 model runner ({report.runner_line}), which drafts it "
                "as plain DFlash: the figures are DFlash's, not DFlash2's")  # fmt: skip
    return None


def parse_sglang(text: str) -> KvReport:
    fields: dict = {"engine": "sglang"}
    if m := _last(SGLANG["spec"], text):
        fields["spec_method"], fields["spec_read"] = m.group(1), True  # None: no speculative decoding
        if d := _last(SGLANG["draft"], text):
            fields["spec_model"] = d.group(1)
    if m := _last(SGLANG["tokens"], text):
        fields["kv_tokens"], fields["max_running_requests"] = int(m.group(1)), int(m.group(2))
    if m := _last(SGLANG["kv"], text):
        fields.setdefault("kv_tokens", int(m.group(1)))
        fields["kv_gib"] = _num(m.group(2)) + _num(m.group(3))  # its "GB" are GiB: GB = 1024**3 (memory_pool.py#L116)
    return KvReport(**fields)


def parse_trtllm(text: str) -> KvReport:
    fields: dict = {"engine": "trtllm"}
    if m := _last(TRTLLM["tokens"], text):
        fields["kv_gib"], fields["kv_tokens"] = _num(m.group(1)), int(m.group(2))
    elif m := _last(TRTLLM["peak"], text):
        fields["kv_gib"] = _num(m.group(2))
    return KvReport(**fields)


PARSERS = {"vllm": parse_vllm, "sglang": parse_sglang, "trtllm": parse_trtllm}


def parse(engine: str, text: str) -> KvReport | None:
    """The engine's KV report from its log text; ``None`` for a backend whose log is not parsed (the reference)."""
    parser = PARSERS.get(engine)
    return parser(text) if parser else None
