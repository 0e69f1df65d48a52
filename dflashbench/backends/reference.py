"""The reference backend: dflashbench's own DFlash decoder behind ``dflashbench serve``.

It launches ``python -m dflashbench serve`` (same interpreter, so the same installed dflashbench and torch),
which speaks the OpenAI API and exposes vLLM-named spec-decode counters on ``/metrics``; so the counters are
read with the very parser that reads vLLM, and the whole HTTP path of a real engine is exercised offline.
The reference decoder runs on one device (``--device``/``--dtype`` go in ``extra_args``); it implements AR,
DFlash and (with an EAGLE-3 head) EAGLE-3, and has no prefix cache to reset. The number of draft tokens is the
drafter checkpoint's (DFlash: block_size - 1) unless ``ServerSpec.num_speculative_tokens`` sets it
(``--num-speculative-tokens``; DFlash verifies the first K of its block, at most block_size - 1), and a
``ServerSpec.draft_schedule`` goes as vLLM's key of the same name, ``--num-speculative-tokens-per-batch-size``
(K by the batch size of each step). ``dflashbench serve`` decodes at most ``--max-batch-size`` requests
together (default :data:`SERVE_DEFAULT_MAX_BATCH_SIZE`) and queues the rest; ``ServerSpec.max_running_requests``
above that default raises it. A suite's ``--api-key KEY`` goes to the server in its environment
(:data:`~dflashbench.reference.serving.config.API_KEY_ENV`), never on its command line.
"""

from __future__ import annotations

import sys

from dflashbench.backends._engine import (
    VllmHttpApi,
    last_int_flag,
    local_block_size,
    max_running_requests,
    require_draft,
)
from dflashbench.backends.base import LaunchPlan, ServerSpec, lift_api_key
from dflashbench.errors import UserError
from dflashbench.methods import record, records
from dflashbench.reference.serving.config import API_KEY_ENV
from dflashbench.types import Method

# What dflashbench serve runs: the methods whose record lists the reference engine.
SUPPORTED_METHODS = tuple(m for m, r in records().items() if r.runs_on("reference"))
SERVE_DEFAULT_MAX_BATCH_SIZE = 8  # dflashbench serve --max-batch-size (reference/serving/config.py)


class ReferenceBackend(VllmHttpApi):
    """``dflashbench serve`` over the reference decoder."""

    name = "reference"

    def launch_plan(self, spec: ServerSpec) -> LaunchPlan:
        if spec.method not in SUPPORTED_METHODS:
            supported = ", ".join(m.value for m in SUPPORTED_METHODS)
            raise UserError(f"the reference backend implements {supported}, not {spec.method.value}")
        if spec.num_gpus > 1 or spec.ep > 1 or spec.nnodes > 1:
            raise UserError("the reference backend runs on one device: use --tp 1 (and no dp/ep, one node)")
        argv = [sys.executable, "-m", "dflashbench", "serve", "--model", spec.model, "--method", spec.method.value]
        if record(spec.method).needs_draft:
            draft = require_draft(spec, "reference")
            self._check_num_speculative_tokens(spec, draft)
            argv += ["--draft", draft]
        if spec.method is not Method.AR:
            argv += draft_length_argv(spec)
        argv += ["--host", spec.host, "--port", str(spec.port)]
        if spec.served_model_name:
            argv += ["--served-model-name", spec.served_model_name]
        cap = max_running_requests(spec)
        if cap is not None and cap > SERVE_DEFAULT_MAX_BATCH_SIZE:
            argv += ["--max-batch-size", str(cap)]
        extra, key = lift_api_key(spec.extra_args)  # dflashbench serve reads its key from the environment only
        argv += extra
        return LaunchPlan(argv=tuple(argv), env={"PYTHONUNBUFFERED": "1", **spec.env, **({API_KEY_ENV: key} if key else {})})

    @staticmethod
    def _check_num_speculative_tokens(spec: ServerSpec, draft: str) -> None:
        """A DFlash drafter verifies at most its block size - 1 tokens: more is an error here, before a server loads
        (the server says the same of a drafter whose block is not known here)."""
        wanted = max([k for k in (spec.num_speculative_tokens, spec.draft_schedule and spec.draft_schedule.max_k)
                      if k is not None], default=None)  # fmt: skip
        block = local_block_size(draft) if spec.method is Method.DFLASH and wanted is not None else None
        if block is not None and wanted > block - 1:
            raise UserError(f"the DFlash drafter {draft} drafts at most block_size - 1 = {block - 1} tokens per step; "
                            f"a draft length of {wanted} cannot be honoured")  # fmt: skip

    def concurrency_cap(self, spec: ServerSpec) -> int | None:
        """``--max-batch-size``: the user's, else dflashbench's, else ``dflashbench serve``'s default."""
        flag = last_int_flag(spec.extra_args, "--max-batch-size")
        if flag is not None:
            return flag
        cap = max_running_requests(spec)
        return max(cap or 0, SERVE_DEFAULT_MAX_BATCH_SIZE)

    async def reset_cache(self, session, base_url: str) -> None:
        """Nothing to reset: the reference decoder keeps no cache across requests."""


def draft_length_argv(spec: ServerSpec) -> list[str]:
    """``dflashbench serve``'s draft-length flags: the one K, and the schedule under vLLM's own key name."""
    argv = []
    if spec.num_speculative_tokens is not None:
        argv += ["--num-speculative-tokens", str(spec.num_speculative_tokens)]
    if spec.draft_schedule is not None:
        argv += ["--num-speculative-tokens-per-batch-size", spec.draft_schedule.to_json()]
    return argv
