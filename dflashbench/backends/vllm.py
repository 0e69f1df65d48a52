"""vLLM: ``vllm serve`` for AR, EAGLE-3 and DFlash; spec-decode counters from its Prometheus ``/metrics``.

- AR: ``vllm serve MODEL --host H --port P --tensor-parallel-size N``.
- EAGLE-3: ``--speculative-config '{"method":"eagle3","model":HEAD,"num_speculative_tokens":k}'``.
- DFlash: ``--speculative-config '{"method":"dflash","model":DRAFTER,"num_speculative_tokens":B-1}'``
  plus ``--attention-backend flash_attn`` (the drafter attends non-causally within its block, which needs
  a backend that supports it).

Parallelism: ``--tensor-parallel-size``, ``--data-parallel-size``; vLLM has no expert-parallel size of its
own (``--enable-expert-parallel`` makes the MoE layers expert-parallel over all tp x dp GPUs), so ``ep`` must
be 1 or tp x dp. The user's extra arguments come last, verbatim. The exact flags are checked against vLLM's
own argument parser by the ``engines`` nox session (tests/engines/check_argv.py).
"""

from __future__ import annotations

import json

from dflashbench.backends._engine import (
    VllmHttpApi,
    check_parallelism,
    num_speculative_tokens,
    post_ok,
    require_draft,
)
from dflashbench.backends.base import LaunchPlan, ServerSpec
from dflashbench.errors import UserError
from dflashbench.types import Method

# vLLM serves /reset_prefix_cache only in its development mode.
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


def speculative_config(spec: ServerSpec) -> dict | None:
    """The ``--speculative-config`` object for ``spec.method`` (``None`` for AR)."""
    if spec.method is Method.AR:
        return None
    return {
        "method": "dflash" if spec.method is Method.DFLASH else "eagle3",
        "model": require_draft(spec, "vllm"),
        "num_speculative_tokens": num_speculative_tokens(spec),
    }


class VllmBackend(VllmHttpApi):
    """vLLM's OpenAI-compatible server, launched by dflashbench or already running (``--endpoint``)."""

    name = "vllm"

    def launch_plan(self, spec: ServerSpec) -> LaunchPlan:
        check_parallelism(spec)
        argv = ["vllm", "serve", spec.model, "--host", spec.host, "--port", str(spec.port)]
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
        config = speculative_config(spec)
        if config is not None:
            argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
            if spec.method is Method.DFLASH:
                argv += ["--attention-backend", "flash_attn"]
        argv += spec.extra_args
        return LaunchPlan(argv=tuple(argv), env={**DEV_MODE_ENV, **spec.env})

    async def reset_cache(self, session, base_url: str) -> None:
        """``POST /reset_prefix_cache`` (a no-op where the server does not offer it)."""
        await post_ok(session, f"{base_url}/reset_prefix_cache")
