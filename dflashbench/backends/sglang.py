"""SGLang: ``sglang serve`` for AR, EAGLE-3 and DFlash; tau from its Prometheus counters.

- every method: ``sglang serve --model-path MODEL --host H --port P --tp-size N --enable-metrics`` (the
  metrics flag turns on ``/metrics``, where the acceptance counters live);
- DFlash: ``--speculative-algorithm DFLASH --speculative-draft-model-path DRAFTER
  --speculative-num-draft-tokens B`` (the block size; SGLang forces one step and top-k 1 for DFlash);
- EAGLE-3: ``--speculative-algorithm EAGLE3 --speculative-draft-model-path HEAD --speculative-num-steps k
  --speculative-eagle-topk 1 --speculative-num-draft-tokens k+1`` (a chain of k drafts, as on vLLM).

Parallelism: ``--tp-size``, ``--dp-size``, ``--ep-size``. The user's extra arguments come last, verbatim.
Cache reset between points: ``POST /flush_cache``. The flags are checked against SGLang's own parser by
the ``engines`` nox session (tests/engines/check_argv.py).
"""

from __future__ import annotations

from dflashbench.backends._engine import (
    check_parallelism,
    get_text,
    num_speculative_tokens,
    post_ok,
    require_draft,
)
from dflashbench.backends.base import LaunchPlan, ServerSpec
from dflashbench.backends.counters import parse_sglang_prometheus
from dflashbench.types import AcceptCounters, Method


def speculative_args(spec: ServerSpec) -> list[str]:
    """SGLang's speculative-decoding flags for ``spec.method`` (none for AR)."""
    if spec.method is Method.AR:
        return []
    draft = require_draft(spec, "sglang")
    k = num_speculative_tokens(spec)
    if spec.method is Method.DFLASH:
        return [
            "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft,
            "--speculative-num-draft-tokens", str(k + 1),
        ]  # fmt: skip
    return [
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft,
        "--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", str(k + 1),
    ]  # fmt: skip


class SglangBackend:
    """SGLang's OpenAI-compatible server, launched by dflashbench or already running (``--endpoint``)."""

    name = "sglang"

    def launch_plan(self, spec: ServerSpec) -> LaunchPlan:
        check_parallelism(spec)
        argv = ["sglang", "serve", "--model-path", spec.model, "--host", spec.host, "--port", str(spec.port)]
        if spec.served_model_name:
            argv += ["--served-model-name", spec.served_model_name]
        argv += ["--tp-size", str(spec.tp)]
        if spec.dp > 1:
            argv += ["--dp-size", str(spec.dp)]
        if spec.ep > 1:
            argv += ["--ep-size", str(spec.ep)]
        argv += ["--enable-metrics", *speculative_args(spec), *spec.extra_args]
        return LaunchPlan(argv=tuple(argv), env=dict(spec.env))

    def health_path(self) -> str:
        return "/health"

    async def read_counters(self, session, base_url: str) -> AcceptCounters | None:
        """Cumulative counters from ``/metrics``; ``None`` for AR or a server without the counters."""
        text = await get_text(session, f"{base_url}/metrics")
        return parse_sglang_prometheus(text) if text is not None else None

    async def reset_cache(self, session, base_url: str) -> None:
        """``POST /flush_cache`` (SGLang refuses while requests are running; the sweep calls it between points)."""
        await post_ok(session, f"{base_url}/flush_cache")
