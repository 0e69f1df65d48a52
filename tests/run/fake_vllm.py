"""A stand-in for ``vllm serve`` run as a real process: it prints the KV report lines vLLM 0.33.0 prints, built from
vLLM's own format strings, then becomes dflashbench's stand-in streaming server (:mod:`dflashbench.bench.standin`,
with vLLM-named speculative counters for a speculative method) on the port it was given.

The lines (vllm@v0.33.0):
- vllm/v1/engine/core.py#L140: ``"Initializing a V1 LLM engine (v%s) with config: %s"``;
- vllm/config/model.py#L744: ``"Resolved architecture: %s"``;
- vllm/v1/worker/gpu_worker.py#L773: ``"Available KV cache memory: %s GiB"`` with ``format_gib`` (vllm/utils/mem_utils.py
  #L30-L31: ``f"{round(b / GiB_bytes, 2)}"``), or with ``--kv-cache-memory-bytes`` #L664-L675: ``f"Initial free memory
  {..} GiB, reserved {..} GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory
  profiling. ..."``;
- vllm/v1/core/kv_cache_utils.py#L1147-L1149: ``"%s KV cache size: %s tokens, Maximum concurrency for %s tokens per
  request: %.2fx"``.

``FAKE_VLLM_KV_GIB`` is the KV memory it reports when not capped (what the profiling would have left);
``FAKE_VLLM_BYTES_PER_TOKEN`` turns memory into its token figure.
"""

from __future__ import annotations

import json
import os
import sys
import time

GIB = 1 << 30
MAX_MODEL_LEN = 40960


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def line(where: str, fmt: str, *args) -> None:
    """One line as vLLM's logger prints it: ``(EngineCore pid=N) INFO mm-dd hh:mm:ss [file.py:line] message``."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"(EngineCore pid={os.getpid()}) INFO {stamp} [{where}] " + (fmt % args if args else fmt), flush=True)


def main(argv: list[str]) -> None:
    assert argv[0] == "serve", argv
    model = argv[1]
    spec = json.loads(flag(argv, "--speculative-config") or "null")
    method = spec["method"] if spec else "ar"
    spec_repr = (f"SpeculativeConfig(method='{spec['method']}', model='{spec['model']}', "
                 f"num_spec_tokens={spec['num_speculative_tokens']})" if spec else "None")  # fmt: skip
    line("core.py:140", "Initializing a V1 LLM engine (v%s) with config: %s", "0.33.0",
         f"model='{model}', speculative_config={spec_repr}, tokenizer='{model}', skip_tokenizer_init=False")
    line("model.py:744", "Resolved architecture: %s", "Qwen3ForCausalLM")
    if spec:
        line("model.py:744", "Resolved architecture: %s", "DFlashDraftModel" if method == "dflash" else "Eagle3LlamaForCausalLM")
    given = flag(argv, "--kv-cache-memory-bytes")
    if given is not None:
        kv_bytes = int(given)
        line("gpu_worker.py:676", f"Initial free memory {round(70 * GIB / GIB, 2)} GiB, reserved {round(kv_bytes / GIB, 2)} "
             "GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This "
             "does not respect the gpu_memory_utilization config.")  # fmt: skip
    else:
        kv_bytes = int(float(os.environ["FAKE_VLLM_KV_GIB"]) * GIB)
        line("gpu_worker.py:773", "Available KV cache memory: %s GiB", f"{round(kv_bytes / GIB, 2)}")
    tokens = kv_bytes // int(os.environ.get("FAKE_VLLM_BYTES_PER_TOKEN", "147456"))
    line("kv_cache_utils.py:1147", "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx",
         "GPU", f"{tokens:,}", f"{MAX_MODEL_LEN:,}", tokens / MAX_MODEL_LEN)
    serve = [sys.executable, "-m", "dflashbench.bench.standin", "serve", "--model", model, "--pace-ms", "1",
             "--host", flag(argv, "--host") or "127.0.0.1", "--port", flag(argv, "--port") or "8000",
             *(["--spec-tau", "2"] if spec else [])]  # fmt: skip
    os.execv(sys.executable, serve)


if __name__ == "__main__":
    main(sys.argv[1:])
