"""SGLang: ``sglang serve`` for AR, EAGLE-3 and DFlash; tau from its Prometheus counters.

- every method: ``sglang serve --model-path MODEL --host H --port P --tp-size N --enable-metrics`` (the
  metrics flag turns on ``/metrics``, where the acceptance counters live);
- DFlash: ``--speculative-algorithm DFLASH --speculative-draft-model-path DRAFTER
  --speculative-num-draft-tokens B`` (the block size; SGLang forces one step and top-k 1 for DFlash). With
  the block size unknown (a hub id outside the model registry) the flag is left out: SGLang then reads it
  from the drafter's config (``_handle_dflash`` in sglang/srt/arg_groups/speculative_hook.py, 0.5.23);
- EAGLE-3: ``--speculative-algorithm EAGLE3 --speculative-draft-model-path HEAD --speculative-num-steps k
  --speculative-eagle-topk 1 --speculative-num-draft-tokens k+1`` (a chain of k drafts, as on vLLM);
- DFlash2: DFlash's flags with a DFlash2 drafter (SGLang loads it by its architecture, 0.5.19 on);
- MTP: ``--speculative-algorithm NEXTN --speculative-num-steps k --speculative-eagle-topk 1
  --speculative-num-draft-tokens k+1`` and no draft path: the draft worker then loads the target's own checkpoint as
  its MTP layer (model_config.py ``model_path or cfg.model_path``, 0.5.23);
- n-gram: ``--speculative-algorithm NGRAM`` and SGLang's own defaults (12 draft tokens, a trie over all requests:
  not vLLM's prompt lookup, so tau is not comparable across the two engines);
- every speculative method: each request asks for its acceptance (``return_spec_tokens_details``, 0.5.19 on; older
  releases ignore the field), read back from ``sglext.spec_tokens_details`` (:meth:`SglangBackend.request_fields`);
- every method, when ``ServerSpec.max_running_requests`` is set: ``--max-running-requests N``. SGLang caps
  DFLASH and EAGLE3 servers at 48 running requests unless told otherwise (``_handle_dflash`` and
  ``_handle_eagle_family``, same file), which would leave AR alone above 48 and compare a queue with an
  engine; AR's default comes from the KV-cache size, known only once the server runs.

- DFlash and EAGLE-3: the environment variable ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``. The draft worker
  takes the target's context length, longer than the drafter's own, and SGLang raises a ValueError unless the variable
  is set (``_derive_context_length``, sglang/srt/configs/model_config.py:1291-1315, 0.5.23); z-lab's README and the
  registry's drafter cards export it;
- every method, on a hybrid-Mamba target (Qwen3.5/3.6, Qwen3-Coder-Next) and SGLang 0.5.13 or older:
  ``--mamba-scheduler-strategy extra_buffer`` (see :func:`mamba_args` for what each release does);

A draft-length schedule (K by batch size) has no SGLang form: its one draft-length knob that moves at run time,
``--speculative-adaptive``, "dynamically adjusts num_steps based on acceptance rate" (ServerArgs.speculative_adaptive,
sgl-project/sglang@469c63e54e7d94591617ef9590c6aa26d54dc1bb, python/sglang/srt/server_args.py), not by batch size. So
a schedule is refused at launch, and its SGLang form is the fixed K per load range (:func:`schedule_ranges`: a
server's speculative flags per range of concurrency), which ``tune`` writes beside vLLM's and TensorRT-LLM's.

Parallelism: ``--tp-size``, ``--dp-size``, ``--ep-size``. The user's extra arguments come last, verbatim.
Cache reset between points: ``POST /flush_cache``. The flags are checked against SGLang's own parser by
the ``engines`` nox session (tests/engines/check_argv.py).
"""

from __future__ import annotations

from dflashbench.backends._engine import (
    BLOCK_DRAFTERS,
    at_least,
    check_parallelism,
    dflash_block_size,
    explicit_speculative_tokens,
    get_text,
    installed_version,
    last_int_flag,
    max_running_requests,
    num_speculative_tokens,
    post_ok,
    reject_engine_config,
    require_draft,
)
from dflashbench.backends.base import LaunchPlan, ServerSpec, api_key_argv_note
from dflashbench.backends.counters import Histogram, parse_latency_histograms, parse_sglang_prometheus
from dflashbench.errors import UserError
from dflashbench.methods import record
from dflashbench.types import AcceptCounters, Method

# A draft's context shorter than the target's is refused unless this is set (model_config.py _derive_context_length,
# "To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", 0.5.23).
CONTEXT_ENV = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}

# SGLang's max_running_requests for speculative servers when not given (speculative_hook.py, 0.5.23). It is per
# data-parallel replica: DataParallelController.launch_dp_schedulers hands every replica the same server args
# (managers/data_parallel_controller.py); only attention-DP ranks split it (model_executor/pool_configurator.py).
SPECULATIVE_DEFAULT_MAX_RUNNING_REQUESTS = 48

# The hybrid-Mamba radix cache, read from SGLang's wheels 0.5.9 to 0.5.23:
# - up to 0.5.13 the option is --mamba-scheduler-strategy {auto,no_buffer,extra_buffer}, and `auto` becomes no_buffer
#   (server_args.py __post_init__: 'self.mamba_scheduler_strategy = "no_buffer"'); with no_buffer a speculative
#   server on these targets stops ('Speculative decoding for {arch} is not compatible with radix cache when using
#   --mamba-scheduler-strategy no_buffer ... please use --mamba-scheduler-strategy extra_buffer',
#   _handle_mamba_radix_cache), and an AR server loses its overlap schedule;
# - 0.5.14 renames it --mamba-radix-cache-strategy, keeping the old name as a deprecated alias through 0.5.19
#   (DeprecatedAliasStoreAction, server_args.py); 0.5.20 drops the alias (arg_groups/fields/exec_.py);
# - from 0.5.14 `auto` becomes extra_buffer when the overlap schedule is on (the default, DFLASH included) or
#   page_size > 1, on an architecture that supports it (server_args.py _handle_mamba_radix_cache in 0.5.14,
#   arg_groups/overrides.py _mamba_radix_cache_resolution from 0.5.16).
# So dflashbench passes the old name up to 0.5.13 and nothing from 0.5.14, to every method alike.
MAMBA_AUTO_EXTRA_BUFFER_SINCE = "0.5.14"
MAMBA_NEW_NAME_SINCE = "0.5.14"
MAMBA_OLD_NAME_DROPPED = "0.5.20"
MAMBA_OLD_NAME = "--mamba-scheduler-strategy"
MAMBA_NEW_NAME = "--mamba-radix-cache-strategy"
# Targets SGLang handles with the hybrid-Mamba radix cache and extra_buffer (0.5.13 server_args.py
# _handle_mamba_radix_cache(support_mamba_cache_extra_buffer=True); 0.5.23 overrides.py _MAMBA_EXTRA_BUFFER_ARCHS).
MAMBA_EXTRA_BUFFER_ARCHS = frozenset({
    "Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
})  # fmt: skip


def mamba_option_names(version: str) -> list[str]:
    """The mamba radix-cache option names SGLang ``version``'s parser accepts."""
    names = [] if at_least(version, MAMBA_OLD_NAME_DROPPED) else [MAMBA_OLD_NAME]
    return names + ([MAMBA_NEW_NAME] if at_least(version, MAMBA_NEW_NAME_SINCE) else [])


def installed_sglang_version() -> str | None:
    return installed_version("sglang")


def mamba_args(architecture: str | None, version: str | None) -> tuple[list[str], str | None]:
    """The mamba radix-cache flag for a target of ``architecture`` on SGLang ``version`` (``None``: not installed
    here, planned for the current releases), and a line saying why; ``([], None)`` for other targets."""
    if architecture not in MAMBA_EXTRA_BUFFER_ARCHS:
        return [], None
    if version is not None and not at_least(version, MAMBA_AUTO_EXTRA_BUFFER_SINCE):
        return [MAMBA_OLD_NAME, "extra_buffer"], (
            f"{MAMBA_OLD_NAME} extra_buffer: SGLang {version} turns 'auto' into no_buffer, which a speculative "
            f"server on {architecture} refuses; passed to every method alike")
    which = f"on SGLang {version}" if version else f"SGLang is not installed here, planned for {MAMBA_AUTO_EXTRA_BUFFER_SINCE}+:"
    return [], (f"no mamba radix-cache flag: {which} 'auto' resolves to extra_buffer for {architecture} (with SGLang "
                f"older than {MAMBA_AUTO_EXTRA_BUFFER_SINCE} dflashbench passes {MAMBA_OLD_NAME} extra_buffer)")


def speculative_args(spec: ServerSpec) -> list[str]:
    """SGLang's speculative-decoding flags for ``spec.method`` (none for AR)."""
    if spec.method is Method.AR:
        return []
    rec = record(spec.method)
    algorithm = rec.on("sglang").name
    if spec.method in BLOCK_DRAFTERS:
        draft = require_draft(spec, "sglang")
        explicit = explicit_speculative_tokens(spec)
        block = explicit + 1 if explicit is not None else dflash_block_size(spec)
        args = ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", draft]
        if block is not None:  # unknown: SGLang reads the drafter's own block size
            args += ["--speculative-num-draft-tokens", str(block)]
        return args
    if spec.method is Method.NGRAM:
        k = explicit_speculative_tokens(spec)  # unset: SGLang's own default (12 draft tokens)
        return ["--speculative-algorithm", algorithm] + (["--speculative-num-draft-tokens", str(k + 1)] if k else [])
    k = num_speculative_tokens(spec)
    draft = ["--speculative-draft-model-path", require_draft(spec, "sglang")] if rec.needs_draft else []
    return [
        "--speculative-algorithm", algorithm, *draft,
        "--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", str(k + 1),
    ]  # fmt: skip


def schedule_ranges(spec: ServerSpec) -> list[tuple[int, int, list[str]]]:
    """SGLang's form of ``spec.draft_schedule``: each load range with the speculative flags of a server at its fixed K
    (SGLang has no K by batch size: module docstring). Empty without a schedule."""
    if spec.draft_schedule is None:
        return []
    import dataclasses

    return [(lo, hi, speculative_args(dataclasses.replace(spec, draft_schedule=None, num_speculative_tokens=k)))
            for lo, hi, k in spec.draft_schedule.ranges if k >= 1]  # fmt: skip


def nodes_args(spec: ServerSpec) -> list[str]:
    """A server across nodes: tp over every GPU of every node, each node ``--nnodes N --node-rank R --dist-init-addr
    LEADER:PORT`` (sgl-project/sglang@0351c1fafe4c docs/references/multi_node_deployment/multi_node.md, "Run 405B
    (fp16) on Two Nodes": ``--tp 16 --dist-init-addr ... --nnodes 2 --node-rank 0|1``; its Slurm example passes the
    allocation's first host and each node's rank the same way; kubernetes-sigs/lws@v0.9.0
    docs/examples/sglang/lws.yaml, the same flags with $(LWS_LEADER_ADDRESS) and $(LWS_WORKER_INDEX)). A follower
    (rank above 0) runs its share of the model and serves no HTTP. Pipeline stages: --pp-size where a plan asks."""
    out = ["--pp-size", str(spec.pp)] if spec.pp > 1 else []
    if spec.nnodes > 1:
        out += ["--nnodes", str(spec.nnodes), "--node-rank", str(spec.node_rank), "--dist-init-addr",
                f"{spec.leader_host}:{spec.dist_port}"]  # fmt: skip
    return out


class SglangBackend:
    """SGLang's OpenAI-compatible server, launched by dflashbench or already running (``--endpoint``)."""

    name = "sglang"

    def __init__(self, version: str | None = None) -> None:
        self.version = version if version is not None else installed_sglang_version()

    def launch_plan(self, spec: ServerSpec) -> LaunchPlan:
        check_parallelism(spec)
        reject_engine_config(spec, "sglang")
        if spec.draft_schedule is not None:
            raise UserError(f"SGLang takes no draft length by batch size (its --speculative-adaptive follows the "
                            f"acceptance rate, not the batch): run {spec.method.value} at one K per load range instead, "
                            f"{spec.method.value}-kN arms at each range's loads ({spec.draft_schedule.describe()})")  # fmt: skip
        argv = ["sglang", "serve", "--model-path", spec.model, "--host", spec.host, "--port", str(spec.port)]
        if spec.served_model_name:
            argv += ["--served-model-name", spec.served_model_name]
        argv += ["--tp-size", str(spec.tp), *nodes_args(spec)]
        if spec.dp > 1:
            argv += ["--dp-size", str(spec.dp)]
        if spec.ep > 1:
            argv += ["--ep-size", str(spec.ep)]
        cap = max_running_requests(spec)
        if cap is not None:
            argv += ["--max-running-requests", str(cap)]
        mamba, why = mamba_args(spec.target_architecture, self.version)
        argv += ["--enable-metrics", *speculative_args(spec), *mamba, *spec.extra_args]
        env = {**(CONTEXT_ENV if spec.method is not Method.AR else {}), **spec.env}
        notes = tuple(n for n in (why, api_key_argv_note(spec.extra_args, "SGLang")) if n)
        return LaunchPlan(argv=tuple(argv), env=env, notes=notes)

    def request_fields(self, method: Method) -> dict:
        """Fields every request to a ``method`` server carries: a speculative method's per-request acceptance
        (``return_spec_tokens_details``: sgl-project/sglang@v0.5.23:python/sglang/srt/entrypoints/openai/protocol.py
        #L961, answered as ``sglext.spec_tokens_details`` with ``spec_verify_ct`` and ``spec_num_correct_drafts``,
        serving_chat.py#L2703-L2729; added in 0.5.19, and older releases ignore an unknown field)."""
        return {"return_spec_tokens_details": True} if method is not Method.AR else {}

    def concurrency_cap(self, spec: ServerSpec) -> int | None:
        """``--max-running-requests`` (the user's, else dflashbench's, else 48 for a speculative method) x dp;
        ``None`` for AR left to its default, which SGLang sizes from free KV-cache memory at start-up."""
        per_replica = last_int_flag(spec.extra_args, "--max-running-requests")
        if per_replica is None:
            per_replica = max_running_requests(spec)
        if per_replica is None and spec.method is not Method.AR:
            per_replica = SPECULATIVE_DEFAULT_MAX_RUNNING_REQUESTS
        return None if per_replica is None else per_replica * spec.dp

    def health_path(self) -> str:
        return "/health"

    async def read_counters(self, session, base_url: str) -> AcceptCounters | None:
        """Cumulative counters from ``/metrics``; ``None`` for AR or a server without the counters."""
        text = await get_text(session, f"{base_url}/metrics")
        return parse_sglang_prometheus(text) if text is not None else None

    async def read_server_timing(self, session, base_url: str) -> dict[str, Histogram] | None:
        """SGLang's own latency histograms on ``/metrics`` (``sglang:`` names; needs ``--enable-metrics``)."""
        text = await get_text(session, f"{base_url}/metrics")
        return parse_latency_histograms(text, "sglang:") if text is not None else None

    async def reset_cache(self, session, base_url: str) -> None:
        """``POST /flush_cache`` (SGLang refuses while requests are running; the sweep calls it between points)."""
        await post_ok(session, f"{base_url}/flush_cache")
