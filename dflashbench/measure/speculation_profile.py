"""Acceptance in and out as NVIDIA specdec_bench's ``speculation_profile.json``, and tau three ways.

The format is specdec_bench's, schema 1.0, read from its writer (NVIDIA/Model-Optimizer@095124e9d582ea52b3aeb636efc281919f3aa4db,
``examples/specdec_bench/specdec_bench/speculation_profile.py``, ``build_profile``): ``schema_version`` "1.0",
``measured``, ``method``, ``draft_checkpoint`` and ``target_model`` (objects), ``num_speculative_tokens`` (the K
measured), ``block_size``, ``max_supported_k``, ``verification_method`` ("longest_prefix"), ``conditional_accept_rates``
(P(draft i+1 accepted | the first i were), Dynamo's convention) and ``marginal_accept_rates`` (P(the first i+1 all
accepted), vLLM's synthetic sampler's), each exactly K long, ``mean_accept_length`` (per step: what the vectors
describe) and ``mean_accept_length_per_request``, ``accept_length_model`` ("chain_analytic" where the K-draft is a prefix
of the K+1-draft, so the vector extrapolates over K; else "measured_per_k"), ``accept_length_by_k`` ({"K": mean}),
``acceptance_length_histogram`` (steps by tokens emitted, the bonus included: length 1 = no draft accepted),
``per_category``, ``measurement_conditions``, and ``validation``: ``mean_consistency`` (1 + sum of the marginals
against the measured mean, tolerance 0.02) and ``marginal_monotonicity`` (a survival function cannot rise).

**tau three ways** (they differ by a few per cent: specdec_bench's own note measures 2.4733 per step against 2.5467 per
request): per request (the mean over requests of ``1 + accepted / steps``), pooled per step (``1 + sum(accepted) /
sum(steps)``: what the vectors describe, and what dflashbench reports as tau), token-weighted (each request's tau
weighted by its output tokens). The engine's counters also give ``1 + sum of the per-position rates``, which equals
the pooled tau wherever the counters are consistent: a data-parallel engine's per-position counters under-count
(vllm-project/speculators#1095), and then the two part; that is flagged, not hidden.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dflashbench.errors import UserError
from dflashbench.measure import tune_fit as tf
from dflashbench.types import RequestResult

SCHEMA_VERSION = "1.0"
CONSISTENCY_TOLERANCE = 0.02  # specdec_bench's _consistency_check default
CHAIN_METHODS = frozenset({"eagle", "eagle1", "eagle2", "eagle3", "draft_model"})  # its _CHAIN_DRAFTING_METHODS
REQUIRED = ("schema_version", "measured", "method", "num_speculative_tokens", "conditional_accept_rates",
            "marginal_accept_rates", "mean_accept_length", "accept_length_model")  # fmt: skip


# ----------------------------------------------------------------------------------------------- tau three ways
@dataclass(frozen=True)
class TauConventions:
    per_request: float | None
    pooled: float | None
    token_weighted: float | None
    from_positions: float | None  # 1 + the counters' per-position rates
    counters: float | None  # the point's tau from the engine's counters (1 + accepted / drafts)

    @property
    def invariant_gap(self) -> float | None:
        """``|tau from the counters - (1 + sum of per-position rates)|``: 0 where the counters are consistent."""
        if self.counters is None or self.from_positions is None:
            return None
        return abs(self.counters - self.from_positions)

    @property
    def broken(self) -> bool:
        gap = self.invariant_gap
        return gap is not None and gap > CONSISTENCY_TOLERANCE


def tau_conventions(results: Sequence[RequestResult], marginal: Sequence[float] = (),
                    counters_tau: float | None = None) -> TauConventions:  # fmt: skip
    """tau per request, pooled per step and token-weighted over ``results`` that report steps, and from the
    counters' per-position rates beside the counters' own tau (module docstring)."""
    rs = [r for r in results if r.ok and not r.warmup and r.spec_verify_steps and r.spec_accepted_tokens is not None]
    each = [(1.0 + r.spec_accepted_tokens / r.spec_verify_steps, r.output_tokens) for r in rs]
    steps = sum(r.spec_verify_steps for r in rs)
    tokens = sum(n for _, n in each)
    return TauConventions(
        per_request=sum(t for t, _ in each) / len(each) if each else None,
        pooled=1.0 + sum(r.spec_accepted_tokens for r in rs) / steps if steps else None,
        token_weighted=sum(t * n for t, n in each) / tokens if tokens else None,
        from_positions=1.0 + sum(marginal) if marginal else None,
        counters=counters_tau,
    )


# ------------------------------------------------------------------------------------------------------- writer
def checkpoint_id(path: str | None) -> str | None:
    """A checkpoint as ``org/model`` (its last two path parts), as specdec_bench publishes it: no machine's layout."""
    parts = [p for p in str(path or "").replace("\\", "/").split("/") if p]
    return "/".join(parts[-2:]) if parts else None


def build_profile(acc: tf.AcceptanceFit, cells: Sequence[tf.Cell], *, method: str, draft: str | None = None,
                  target: str | None = None, block_size: int | None = None, prefix_exact: bool = False,
                  per_request_tau: float | None = None, conditions: dict | None = None) -> dict:  # fmt: skip
    """The profile of ``acc`` (pooled over the cells' loads and Ks), K = its positions. ``prefix_exact``: a K-draft
    is a prefix of the K+1-draft here (a chain, or the reference decoder verifying the first K of a block), so the
    vector extrapolates over K ("chain_analytic"); else each K measured counts ("measured_per_k")."""
    k = acc.positions
    marginal = [round(float(a), 6) for a in acc.marginal]
    top = [c for c in cells if c.k == max(c.k for c in cells)] if cells else []
    steps = sum(c.drafts for c in top)
    top_tau = sum(c.tau * c.drafts for c in top if c.tau) / steps if steps else acc.tau(k)
    # steps by tokens emitted: length j + 1 where j drafts were accepted, j = 0..K
    survival = [1.0, *acc.marginal, 0.0]
    histogram = {str(j + 1): int(round(steps * (survival[j] - survival[j + 1]))) for j in range(k + 1)} if steps else None
    chain = prefix_exact or method.lower() in CHAIN_METHODS
    profile = {
        "schema_version": SCHEMA_VERSION,
        "measured": True,
        "method": method,
        "draft_checkpoint": {"id": checkpoint_id(draft)} if draft else None,
        "target_model": {"id": checkpoint_id(target)} if target else None,
        "num_speculative_tokens": k,
        "block_size": block_size,
        "max_supported_k": (block_size - 1) if block_size else k,
        "verification_method": "longest_prefix",
        "conditional_accept_rates": [round(float(c), 6) for c in acc.conditional],
        "marginal_accept_rates": marginal,
        "mean_accept_length": round(float(top_tau), 6),
        "mean_accept_length_per_request": round(per_request_tau, 6) if per_request_tau is not None else None,
        "accept_length_model": "chain_analytic" if chain else "measured_per_k",
        "accept_length_by_k": {str(kk): round(float(t), 6) for kk, t in sorted(acc.per_k.items())},
        "acceptance_length_histogram": histogram,
        "per_category": None,
        "measurement_conditions": conditions,
        "validation": validation(top_tau, marginal),
    }
    return profile


def validation(mean_accept_length: float, marginal: Sequence[float]) -> dict:
    """specdec_bench's two checks: the mean against 1 + the marginals, and the marginals never rising."""
    implied = 1.0 + float(sum(marginal))
    delta = abs(implied - float(mean_accept_length))
    rises = [{"position": i, "value": marginal[i], "previous": marginal[i - 1]}
             for i in range(1, len(marginal)) if marginal[i] > marginal[i - 1] + 1e-9]  # fmt: skip
    return {"mean_consistency": {"implied_mean_accept_length": round(implied, 6),
                                 "reported_mean_accept_length": round(mean_accept_length, 6),
                                 "abs_delta": round(delta, 6), "tolerance": CONSISTENCY_TOLERANCE,
                                 "passed": bool(delta <= CONSISTENCY_TOLERANCE)},
            "marginal_monotonicity": {"passed": not rises, "violations": rises}}  # fmt: skip


def write_profile(path: Path | str, profile: dict) -> Path:
    path = Path(path)
    path.write_text(json.dumps(profile, indent=2) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------------- reader
def read_profile(path: Path | str) -> dict:
    """A ``speculation_profile.json`` read and checked against the schema (:func:`check_profile`)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"speculation profile {path}: cannot read it as JSON ({exc})") from None
    return check_profile(data, str(path))


def check_profile(data: object, source: str = "speculation profile") -> dict:
    """The profile, or a :class:`UserError` naming what breaks specdec_bench's schema 1.0."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: a speculation profile is a JSON object")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise UserError(f"{source}: not a speculation_profile.json (schema {SCHEMA_VERSION}): missing {', '.join(missing)}")
    if str(data["schema_version"]) != SCHEMA_VERSION:
        raise UserError(f"{source}: schema_version {data['schema_version']!r}; this reader knows {SCHEMA_VERSION}")
    if data["measured"] is not True:
        raise UserError(f"{source}: measured is {data['measured']!r}: a placeholder profile predicts nothing")
    k = data["num_speculative_tokens"]
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise UserError(f"{source}: num_speculative_tokens must be a positive integer, got {k!r}")
    for key in ("marginal_accept_rates", "conditional_accept_rates"):
        rates = data[key]
        if not isinstance(rates, list) or len(rates) != k or not all(
                isinstance(x, int | float) and not isinstance(x, bool) and 0.0 <= x <= 1.0 for x in rates):  # fmt: skip
            raise UserError(f"{source}: {key} must hold {k} rates in [0, 1] (num_speculative_tokens), got {rates!r}")
    return data


def profile_acceptance(profile: dict) -> tf.AcceptanceFit:
    """The acceptance fit a profile stands for: its marginal rates, their standard errors from its histogram's step
    count (none without one), the K measured and each K's mean."""
    marginal = [float(x) for x in profile["marginal_accept_rates"]]
    histogram = profile.get("acceptance_length_histogram") or {}
    steps = float(sum(histogram.values())) if isinstance(histogram, dict) else 0.0
    se = [(a * (1 - a) / steps) ** 0.5 if steps else 0.0 for a in marginal]
    per_k = {int(k): float(v) for k, v in (profile.get("accept_length_by_k") or {}).items()}
    return tf.AcceptanceFit(str(profile.get("method") or ""), tuple(marginal), tuple(se), (steps,) * len(marginal),
                            tf.tail_ratio(marginal), per_k)  # fmt: skip
