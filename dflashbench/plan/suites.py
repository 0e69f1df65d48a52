"""Suite files: what to run, declared in ``suites/*.toml``.

A suite names a backend, the decoding methods, the target model and its drafts, the concurrency list, the
sampling settings and one or more workloads. The schema is strict: an unknown key or a value of the wrong
type is an error that names the file and the key. ``include = "base.toml"`` (or a list of files, resolved
relative to the including file) pulls in shared settings; the including file wins, tables merge key by key,
lists are replaced whole. Command-line flags win over everything
(:func:`dflashbench.plan.suite_overrides.apply_overrides`).

Where suites are found (:func:`suite_dirs`): the ``suites/`` folder of a source checkout, else the copy
shipped inside the installed package (``dflashbench/suites_builtin``, put there at build time by
:mod:`dflashbench._build`). ``DFLASHBENCH_SUITES`` (a folder) is searched first when set.

The published figures in ``suites/published/*.toml`` are read by :mod:`dflashbench.plan.published`.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from dflashbench.errors import UserError
from dflashbench.launchers.cluster_spec import ClusterSpec
from dflashbench.methods import record
from dflashbench.types import Method
from dflashbench.workloads.spec import StrictModel, WorkloadSpec

DEFAULT_SUITE = "demo"
SUITES_ENV = "DFLASHBENCH_SUITES"
INCLUDE_DIR = "include"  # partial suite files live in suites/include/ and are not listed as suites
PUBLISHED_DIR = "published"  # published figures, beside the suites (dflashbench.plan.published reads them)

_SOURCE_SUITES = Path(__file__).resolve().parents[2] / "suites"  # dflashbench/plan/ -> the checkout
_BUILTIN_SUITES = Path(__file__).resolve().parents[1] / "suites_builtin"


EMBEDDED = "embedded"  # the bundled tiny pair, as a model or draft value
RANDOM_PREFIX = "random:"  # random weights made by `dflashbench serve` (dflashbench.reference.random_pair.PREFIX)


def _finite_positive_unique(key: str, value: list[float], unit: str) -> list[float]:
    """A list of finite values above 0, each once; the error names ``key`` and what a value means (``unit``)."""
    if any(not 0 < v < math.inf for v in value):
        raise ValueError(f"{key} values must be finite and above 0 {unit}, got {value}")
    if len(set(value)) != len(value):
        raise ValueError(f"{key} has duplicates: {value}")
    return value


# A suite's name starts its run directory's name (results/<name>-<time>-<tag>): one path component, portable.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")

# Upper bounds, each with the reason a larger value is a mistake rather than a plan (said in the error).
MAX_CONCURRENCY = 16384
MAX_REQUEST_RATE_PER_S = 10_000.0
# Lower bounds, the same way: a rate or a trace speed below these makes one point take hours or forever (a rate of
# 1e-12 was accepted, and the sweep waited, saying an ETA of 105 million days).
MIN_REQUEST_RATE_PER_S = 0.01
MIN_TRACE_SPEED = 0.01
LIMIT_REASONS = {
    "concurrency": f"at most {MAX_CONCURRENCY}: each stream holds an open connection (a file descriptor) in this "
                   "one process, and no engine runs that many requests at once (vLLM's default is 256-1024 per GPU)",
    "num_prompts": "every prompt is read into memory and sent at least once per point",
    "requests_per_stream": "a point sends concurrency x this many requests",
    "repeats": "every point is measured this many times, a server launched per method per round",
    "warmup_requests": "warm-up requests are sent before every point and not measured",
    "max_tokens": "no model's context window holds more",
    "timeout_s": "a request that runs a day is a hung request",
    "request_rate": f"at most {MAX_REQUEST_RATE_PER_S:,.0f} requests per second: arrivals 0.1 ms apart are finer than "
                    "the client's event loop keeps time (a point records its loop lag, loop_lag_ms, in milliseconds), "
                    "so the requests would leave together, a closed loop in all but name: for that use concurrency",
    "ready_timeout_s": "a server that takes a day to load is not loading",
    "request_rate_min": f"at least {MIN_REQUEST_RATE_PER_S:g} requests per second (one every "
                        f"{1 / MIN_REQUEST_RATE_PER_S:g} s): an open-loop point sends at least its share of "
                        "requests per stream, usually dozens, so a slower rate keeps one point waiting for hours; "
                        "for a server with one request at a time use concurrency 1",
    "trace_speed_min": f"at least {MIN_TRACE_SPEED:g} (the trace's time {1 / MIN_TRACE_SPEED:g} times slower): a "
                       "slower replay keeps one point waiting for hours; take a shorter --trace-window instead",
}  # fmt: skip


class Suite(StrictModel):  # the strict base every table of a suite shares (workloads.spec)
    """A resolved suite: every include merged, every default filled in."""

    name: str = Field(min_length=1)
    description: str = ""
    version: int = Field(1, ge=1)
    source_file: str = ""
    backend: str = "reference"
    methods: list[Method] = Field(min_length=1)
    model: str = Field(min_length=1, description='HF id or local path; "embedded" = the bundled pair')
    drafts: dict[Method, str] = Field(default_factory=dict, description='method -> draft; "embedded" allowed')
    concurrency: list[int] = Field(description="closed-loop levels; empty only with a trace (its points alone)")
    num_prompts: int | None = Field(None, ge=1, le=1_000_000)
    seed: int = 0
    warmup_requests: int = Field(1, ge=0, le=10_000)
    temperature: float = Field(0.0, ge=0.0)
    max_tokens: int = Field(256, ge=1, le=1_048_576)
    tp: int | None = Field(None, ge=1, description="unset: from the model registry's size and the visible GPUs, else 1")
    dp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    num_gpus: int | None = Field(None, ge=0, description="GPUs in use for per-GPU figures; tp*dp when unset")
    num_speculative_tokens: dict[Method, int] = Field(default_factory=dict)
    schedules: dict[str, list[list[int]]] = Field(default_factory=dict, description="a method (or a named arm, "
                                                 "dflash-tuned) -> its draft length by batch size, [[lo, hi, K], ...] "
                                                 "as vLLM's num_speculative_tokens_per_batch_size")  # fmt: skip
    extra_args: dict[str, list[str]] = Field(default_factory=dict, description='per method, or "all"')
    engine_config: dict[str, Any] = Field(default_factory=dict, description="TRT-LLM: extra keys of its YAML config")
    notes: list[str] = Field(default_factory=list, description="what resolving the command line changed, said once")
    workloads: list[WorkloadSpec] = Field(min_length=1)
    thinking_slice: bool = Field(False, description="run every workload twice, thinking on and off "
                                 "(chat_template_kwargs.enable_thinking), for a model whose registry entry has that "
                                 "switch: tau and the speedups read against the setting its drafter was trained with")
    published: list[str] = Field(default_factory=list, description="ids of suites/published/*.toml")
    timeout_s: float = Field(600.0, gt=0, le=86400, description="per request (per turn), whole stream included; "
                             "--request-timeout")
    ready_timeout_s: float = Field(1800.0, gt=0, le=86400, description="how long a launched server may take to "
                                   "answer its health check; --ready-timeout")  # fmt: skip
    telemetry_interval_s: float = Field(0.1, gt=0, le=60, description="NVML sampling interval during a point")
    requests_per_stream: int = Field(4, ge=1, le=1000, description="a point sends at least concurrency x this many requests")
    repeats: int = Field(1, ge=1, le=100, description="each point measured this many times, in rounds across methods "
                         "(dflashbench.measure.repeats); launched servers are relaunched each round")
    precision: float | None = Field(None, gt=0, lt=1, description="a closed-loop point stops once the 95 % "
                                    "intervals of its key figures are within this relative half-width (0.05: ±5 %; "
                                    "docs/metrics.md, 'Sizing a point'); its prompts are then sent in a seeded order "
                                    "stratified by category. Unset: every prompt is sent")  # fmt: skip
    budget: str | float | None = Field(None, description="a time budget for the whole sweep (2h, 90m, or seconds): "
                                       "the tightest precision whose planned duration fits it is used (looser than "
                                       "`precision` where both are given), from the per-user rate of a published "
                                       "figure or --assume-user-tok-per-s (dflashbench.run.budget)")  # fmt: skip
    max_error_rate: float = Field(0.1, ge=0, le=1, description="a point with a larger share of failed requests is "
                                  "marked degraded, and the sweep exits 1")  # fmt: skip
    # Load shape (dflashbench.load.loadgen_procs, dflashbench.load.arrivals, dflashbench.measure.goodput).
    client_processes: int | Literal["auto"] = Field("auto", description="client processes a point's streams are split "
                                                    "over; auto: one per loadgen_procs.AUTO_STREAMS_PER_PROCESS streams")
    engine_cpus: str = Field("auto", description="CPUs of a launched engine, the client keeping the rest: auto (split "
                             "when the engine computes on the CPU), none, a CPU list such as 0-2, or one per server "
                             "such as ar=0,dflash=1 (dflashbench.plan.cpus)")  # fmt: skip
    interleave: Literal["auto", "side", "turns", "point", "off"] = Field(
        "auto", description="how the methods of one load share the minutes (dflashbench.plan.placement): side (each on "
        "its own GPUs or cores, started together), turns (one device, wave by wave), point (point by point; 'on' "
        "before), off (one method's server at a time); auto: side where every method gets its own devices, turns "
        "for CPU servers, else off")  # fmt: skip
    request_rate: list[float] = Field(default_factory=list, description="open-loop points (requests per second) "
                                      "beside the concurrency points")  # fmt: skip
    arrivals: Literal["poisson", "constant"] = Field("poisson", description="open-loop arrival process (seeded)")
    burstiness: float = Field(1.0, gt=0, description="poisson arrivals: gamma shape, as vllm bench serve (1 = Poisson)")
    max_concurrency: int | None = Field(None, ge=1, le=MAX_CONCURRENCY, description="open loop: cap on requests "
                                        "in flight")  # fmt: skip
    slo: str | None = Field(None, description="latency percentile bounds a point is read against, as report --slo "
                            "takes them (tpot_p90=20ms,ttft_p99=2s): recorded in the manifest, read by report, and "
                            "every closed-loop point sends what its highest percentile needs (p99: 1,000 requests)")
    goodput: dict[Literal["ttft_s", "tpot_s", "e2e_s"], float] = Field(
        default_factory=dict, description="SLO targets in seconds: goodput = requests meeting all of them per second")
    # Trace replay (dflashbench.plan.trace_plan, dflashbench.workloads.trace_content, docs/traces.md): a public
    # trace's arrivals and lengths, sent with real content from the workloads above.
    trace: str | None = Field(None, description="a shipped trace (azure-code, azure-conv, mooncake-conv) or the path "
                              "of an Azure CSV or Mooncake JSONL trace; its points run beside (or, with an empty "
                              "concurrency list, instead of) the others")
    trace_window: str | float | None = Field(None, description="the trace's first stretch to replay: 10m, 90s, 1h, or "
                                             "seconds (unset: all of it)")
    trace_speed: list[float] = Field(default_factory=lambda: [1.0], description="time runs this many times faster "
                                     "than the trace's (2: arrivals twice as dense); one point per speed")
    trace_content: list[Literal["workloads", "random"]] = Field(
        default_factory=lambda: ["workloads"], description="workloads: real prompts from the workloads; random: "
        "random tokens of the same lengths (what peer tools send); both: one point each")
    trace_input_scale: float = Field(1.0, gt=0, le=1000, description="trace input lengths times this (small models)")
    trace_output_scale: float = Field(1.0, gt=0, le=1000, description="trace output lengths times this")
    trace_fill: Literal["none", "context"] = Field("none", description="context: real text before a prompt shorter "
                                                   "than its trace length, shared where the trace's prefixes are")
    trace_over_context: Literal["clip", "skip"] = Field("clip", description="requests over the model's context")
    trace_context_tokens: int | None = Field(None, ge=1, le=16_777_216, description="the model's context length; "
                                             "unset: the target's config.json max_position_embeddings")
    trace_ignore_eos: bool = Field(True, description="send ignore_eos where the engine takes it, so outputs are as "
                                   "long as the trace says")
    cluster: ClusterSpec = Field(default_factory=ClusterSpec, description="where the servers run: this machine "
                                 "(local), Slurm jobs (slurm) or Kubernetes objects (k8s), and what the scheduler is "
                                 "told (docs/cluster.md)")

    @field_validator("client_processes")
    @classmethod
    def _processes(cls, value: int | str) -> int | str:
        if value != "auto" and not 1 <= int(value) <= 256:
            raise ValueError(f"client_processes must be 1 to 256 or \"auto\", got {value}")
        return value

    @field_validator("engine_cpus")
    @classmethod
    def _engine_cpus(cls, value: str) -> str:
        from dflashbench.plan.cpus import check_setting

        return check_setting(value)

    @field_validator("interleave", mode="before")
    @classmethod
    def _interleave(cls, value):  # "on", before issue #55 (a resumed run's suite_config may say it): point by point
        return "point" if value == "on" else value

    @field_validator("request_rate")
    @classmethod
    def _rates(cls, value: list[float]) -> list[float]:
        # inf: every request at once, which is the closed loop
        value = _finite_positive_unique("request_rate", value, "requests per second (for every request at once use "
                                        "concurrency)")  # fmt: skip
        big = [r for r in value if r > MAX_REQUEST_RATE_PER_S]
        if big:
            raise ValueError(f"request_rate {big[0]:g} is too large: {LIMIT_REASONS['request_rate']}")
        small = [r for r in value if r < MIN_REQUEST_RATE_PER_S]
        if small:
            raise ValueError(f"request_rate {small[0]:g} is too small: {LIMIT_REASONS['request_rate_min']}")
        return value

    @field_validator("trace_speed")
    @classmethod
    def _speeds(cls, value: list[float]) -> list[float]:
        if not value:
            raise ValueError("trace_speed needs at least one speed (1 = the trace's own pace)")
        value = _finite_positive_unique("trace_speed", value, "(1 = the trace's own pace)")
        small = [v for v in value if v < MIN_TRACE_SPEED]
        if small:
            raise ValueError(f"trace_speed {small[0]:g} is too slow: {LIMIT_REASONS['trace_speed_min']}")
        return value

    @field_validator("trace_content")
    @classmethod
    def _contents(cls, value: list[str]) -> list[str]:
        if not value or len(set(value)) != len(value):
            raise ValueError(f"trace_content takes workloads, random or both, once each, got {value}")
        return value

    @field_validator("budget")
    @classmethod
    def _budget(cls, value: str | float | None) -> str | float | None:
        if value is not None:
            from dflashbench.workloads.traces import parse_duration

            try:
                parse_duration(value, "budget")
            except UserError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("trace_window")
    @classmethod
    def _window(cls, value: str | float | None) -> str | float | None:
        if value is not None:
            from dflashbench.workloads.traces import parse_duration

            try:
                parse_duration(value)
            except UserError as exc:
                raise ValueError(str(exc).replace("--trace-window ", "trace_window ")) from None
        return value

    @field_validator("slo")
    @classmethod
    def _percentiles(cls, value: str | None) -> str | None:
        if value is not None:
            from dflashbench.measure.slo import parse_slo

            if not value.strip():
                raise ValueError("slo is empty: give bounds such as tpot_p90=20ms,ttft_p99=2s, or leave the key out")
            parse_slo(value)  # a bad term is a clear error naming it
        return value

    @field_validator("goodput")
    @classmethod
    def _slo(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [k for k, v in value.items() if not v > 0]
        if bad:
            raise ValueError(f"goodput.{bad[0]} must be above 0 seconds")
        return value

    @field_validator("concurrency")
    @classmethod
    def _positive_unique(cls, value: list[int]) -> list[int]:
        bad = [c for c in value if c < 1]
        if bad:
            raise ValueError(f"concurrency must be 1 or more, got {bad[0]}")
        big = [c for c in value if c > MAX_CONCURRENCY]
        if big:
            raise ValueError(f"concurrency {big[0]} is too large: {LIMIT_REASONS['concurrency']}")
        if len(set(value)) != len(value):
            raise ValueError(f"concurrency has duplicates: {value}")
        return value

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not SAFE_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a safe suite name: it names the run directory, so it takes letters, "
                             "digits, '.', '_' and '-' only, starts with a letter or digit, at most 80 characters")
        return value

    @field_validator("methods")
    @classmethod
    def _unique_methods(cls, value: list[Method]) -> list[Method]:
        if len(set(value)) != len(value):
            raise ValueError(f"methods has duplicates: {[m.value for m in value]}")
        for method in value:
            if method.variant is not None and method.base is Method.AR:
                raise ValueError(f"{method.value}: ar drafts nothing, so it has no draft-length arms")
        return value

    @field_validator("schedules")
    @classmethod
    def _schedules_parse(cls, value: dict[str, list[list[int]]]) -> dict[str, list[list[int]]]:
        from dflashbench.reference.draft_length import DraftSchedule

        out = {}
        for key, ranges in value.items():
            try:
                method = Method.parse(key)
            except ValueError as exc:
                raise ValueError(f"schedules.{key}: {exc}") from None
            if method.base is Method.AR or method.arm_k is not None:
                raise ValueError(f"schedules.{key}: {'ar drafts nothing' if method.base is Method.AR else 'a -kN arm has one K'}; "
                                 "a schedule belongs to a method or a named arm (dflash-tuned)")  # fmt: skip
            try:
                out[method.value] = DraftSchedule.parse(ranges).to_list()
            except ValueError as exc:
                raise ValueError(f"schedules.{key}: {exc}") from None
        return out

    @field_validator("num_speculative_tokens")
    @classmethod
    def _positive_spec_tokens(cls, value: dict[Method, int]) -> dict[Method, int]:
        for method, n in value.items():
            if method is Method.AR:
                raise ValueError("ar drafts nothing: remove it from num_speculative_tokens")
            if n < 1:
                raise ValueError(f"num_speculative_tokens.{method.value} must be 1 or more, got {n}")
        return value

    @field_validator("extra_args")
    @classmethod
    def _extra_args_keys(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        allowed = {"all", *(m.value for m in Method)}
        for key in value:
            if key not in allowed:
                raise ValueError(f"extra_args key {key!r} is neither a method nor 'all' ({', '.join(sorted(allowed))})")
        return value

    @model_validator(mode="after")
    def _drafts_and_defaults(self) -> Suite:
        if not self.concurrency and not self.trace:
            raise ValueError("concurrency must list at least one level (it may be empty only beside a trace)")
        self._check_arms()
        for method in self.drafts:
            if not record(method).needs_draft:
                raise ValueError(f"drafts.{method.value}: {record(method).label} takes no draft checkpoint "
                                 f"({record(method).about}); remove it")  # fmt: skip
        # A method without a draft here takes the model registry's (dflashbench.plan.pairing resolves the pair);
        # a model the registry does not know must name its drafts.
        missing = self.methods_without_draft()
        if missing and self.model != EMBEDDED and not self.model.startswith(RANDOM_PREFIX):
            from dflashbench.plan.models import lookup

            if lookup(self.model) is None:
                each = " and ".join(f'drafts.{m} = "<HF id or path>"' for m in missing)
                need = "needs a draft" if len(missing) == 1 else "need a draft each"
                raise ValueError(f"{self.model} is not in the model registry, so {', '.join(missing)} {need}: "
                                 f"add {each} (on the command line: --draft "
                                 f"{','.join(f'{m}=<HF id or path>' for m in missing)}), or run --method ar")  # fmt: skip
        if self.thinking_slice:  # each workload on both sides (a side already made is kept: a resumed run's)
            sides = [w for w in self.workloads if w.thinking_slice]
            sides += [w.model_copy(update={"thinking": on, "thinking_slice": True})
                      for w in self.workloads if not w.thinking_slice for on in (True, False)]  # fmt: skip
            object.__setattr__(self, "workloads", sides)
        # A workload without its own max_tokens / num_prompts takes the suite's.
        filled = [
            w.model_copy(update={
                "max_tokens": w.max_tokens or self.max_tokens,
                "num_prompts": w.num_prompts if w.num_prompts is not None else self.num_prompts,
            })
            for w in self.workloads
        ]  # fmt: skip
        object.__setattr__(self, "workloads", filled)
        return self

    def _check_arms(self) -> None:
        """A named arm (``dflash-tuned``) has its schedule; a schedule belongs to a method the suite runs."""
        labels = {m.value for m in self.methods}
        for keyed in (self.drafts, self.num_speculative_tokens):
            arm = next((m for m in keyed if m.variant is not None), None)
            if arm is not None:
                raise ValueError(f"{arm.value}: an arm runs its method's draft and sets its own draft length; key the "
                                 f"setting by the method, {arm.base.value}")  # fmt: skip
        for method in self.methods:
            if method.variant is not None and method.arm_k is None and method.value not in self.schedules:
                raise ValueError(f"{method.value} names no schedule: add schedules.\"{method.value}\" = [[1, 1, K], ...] "
                                 f"to the suite (or sweep --schedule FILE), or use {method.base.value}-kN for one K")  # fmt: skip
        for key in self.schedules:
            if key not in labels:
                raise ValueError(f"schedules.{key}: the suite runs no method {key!r} (methods: {', '.join(sorted(labels))})")

    def draft_schedule(self, method: Method | str):
        """The :class:`~dflashbench.reference.draft_length.DraftSchedule` ``method`` runs with, else ``None``."""
        from dflashbench.reference.draft_length import DraftSchedule

        ranges = self.schedules.get(Method.parse(str(method)).value)
        return DraftSchedule.parse(ranges) if ranges else None

    def draft_tokens(self, method: Method | str) -> int | None:
        """The one K ``method`` runs with where the suite says: an arm's own (``-k3``), else ``num_speculative_tokens``
        of its method; ``None``: its drafter's (or recipe's) default."""
        method = Method.parse(str(method))
        return method.arm_k if method.arm_k is not None else self.num_speculative_tokens.get(method.base)

    @property
    def requests_per_stream_sent(self) -> int:
        """Requests per stream a closed-loop point has to send: the suite's, and for a point sized by precision at
        least the rule's floor of rounds (:data:`dflashbench.measure.sequential.MIN_ROUNDS`)."""
        if self.precision is None:
            return self.requests_per_stream
        from dflashbench.measure.sequential import MIN_ROUNDS

        return max(self.requests_per_stream, MIN_ROUNDS)

    @property
    def slo_requests(self) -> int:
        """Requests a closed-loop point sends at least for the suite's ``slo``: what its highest percentile needs
        (:func:`dflashbench.measure.slo.needs`); 0 without one."""
        if not self.slo:
            return 0
        from dflashbench.measure.slo import needs, parse_slo

        return max(needs(t) for t in parse_slo(self.slo))

    def requests_per_stream_at(self, concurrency: int) -> int:
        """Requests per stream a closed-loop point at ``concurrency`` sends: :attr:`requests_per_stream_sent`, and
        with an ``slo`` enough for its highest percentile (prompts cycle to fill them)."""
        c = max(concurrency, 1)
        return max(self.requests_per_stream_sent, -(-self.slo_requests // c))

    @property
    def gpu_count(self) -> int:
        """GPUs the engine uses: ``num_gpus`` when given, else tp x dp."""
        return self.num_gpus if self.num_gpus is not None else (self.tp or 1) * self.dp

    def methods_without_draft(self) -> list[str]:
        """Speculative methods this suite names no draft for (the model registry may have one)."""
        return list(dict.fromkeys(m.base.value for m in self.methods if record(m).needs_draft and not self.drafts.get(m.base)))

    def draft_for(self, method: Method | str) -> str | None:
        return self.drafts.get(Method.parse(str(method)).base)

    def args_for(self, method: Method | str) -> list[str]:
        """Extra engine arguments for ``method``: the "all" entry, then the method's own."""
        key = Method.parse(str(method)).base.value  # an arm takes its method's
        return [*self.extra_args.get("all", []), *self.extra_args.get(key, [])]


# --- finding and reading suite files ------------------------------------------------------------------


def suite_dirs() -> list[Path]:
    """Folders searched for suites by name, first match wins."""
    dirs = []
    if os.environ.get(SUITES_ENV):
        dirs.append(Path(os.environ[SUITES_ENV]))
    # A source checkout (also an editable install): the repository's suites/ beside the package.
    if (_SOURCE_SUITES.parent / "pyproject.toml").is_file() and _SOURCE_SUITES.is_dir():
        dirs.append(_SOURCE_SUITES)
    if _BUILTIN_SUITES.is_dir():
        dirs.append(_BUILTIN_SUITES)
    return dirs


def find_suite_file(name_or_path: str) -> Path:
    """``"demo"`` -> the demo suite's file; a path (anything ending in .toml or containing a /) -> itself."""
    text = str(name_or_path)
    if text.endswith(".toml") or os.sep in text or "/" in text:
        path = Path(text).expanduser()
        if not path.is_file():
            raise UserError(f"suite file {text} does not exist")
        return path
    for folder in suite_dirs():
        candidate = folder / f"{text}.toml"
        if candidate.is_file():
            return candidate
    known = sorted(suite_files())
    close = difflib.get_close_matches(text, known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise UserError(
        f"unknown suite {text!r}.{hint} Known suites: {', '.join(known) or '(none found)'}; "
        "or give the path of a .toml file"
    )


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file's table; a :class:`UserError` naming the file when it is not valid TOML or unreadable."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` wins; tables merge key by key, everything else (lists included) is replaced whole."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _resolve_includes(path: Path, stack: tuple[Path, ...] = ()) -> dict[str, Any]:
    path = path.resolve()
    if path in stack:
        chain = " -> ".join(str(p) for p in (*stack, path))
        raise UserError(f"{stack[-1]}: key 'include': include cycle {chain}")
    data = read_toml(path)
    includes = data.pop("include", [])
    if isinstance(includes, str):
        includes = [includes]
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise UserError(f"{path}: key 'include': expected a file name or a list of file names")
    merged: dict[str, Any] = {}
    for name in includes:
        target = (path.parent / name).resolve()
        if not target.is_file():
            raise UserError(f"{path}: key 'include': included file {name} not found (looked for {target})")
        merged = _merge(merged, _resolve_includes(target, (*stack, path)))
    return _merge(merged, data)


def _location(loc: tuple[Any, ...], data: dict[str, Any]) -> str:
    """A pydantic error location as a TOML key path: ``workloads[1].max_tokens``."""
    parts: list[str] = []
    node: Any = data
    for item in loc:
        if item == "[key]":  # pydantic's marker for "the key itself", e.g. a bad method name in drafts
            continue
        if isinstance(item, int):
            # workloads is an array of tables: say which one by its name where it has one.
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node) and isinstance(node[item], dict):
                wname = node[item].get("name")
                label = f"[{item}]" + (f" ({wname})" if isinstance(wname, str) else "")
            parts[-1:] = [(parts[-1] if parts else "") + label]
            node = node[item] if isinstance(node, list) and item < len(node) else None
        else:
            parts.append(str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return ".".join(p for p in parts if p) or "(top level)"


def _validation_error(source: str, exc: ValidationError, data: dict[str, Any]) -> UserError:
    lines = []
    for err in exc.errors():
        loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and x.startswith("function-")))
        key = _location(loc, data)
        kind = err["type"]
        if kind == "extra_forbidden":
            msg = "unknown key"
        elif kind == "missing":
            msg = "required key is missing"
        elif kind == "enum":
            msg = f"{err['input']!r} is not a method; choose one of: {', '.join(m.value for m in Method)}"
        elif kind == "value_error":
            msg = err["msg"].removeprefix("Value error, ")
        elif kind == "less_than_equal":
            field = next((x for x in reversed(loc) if isinstance(x, str)), "")
            reason = LIMIT_REASONS.get(field)
            msg = f"{err['msg']} (got {err['input']!r})" + (f": {reason}" if reason else "")
        else:
            msg = f"{err['msg']} (got {err['input']!r})"
        lines.append(f"key '{key}': {msg}")
    return UserError(f"{source}: " + "; ".join(lines))


def parse_suite(data: dict[str, Any], *, source: str, default_name: str = "") -> Suite:
    """Validate a merged suite table. Errors name ``source`` and the offending key."""
    if "source_file" in data:
        raise UserError(f"{source}: key 'source_file': set by dflashbench, not by suite files")
    data = {"name": default_name, **data, "source_file": source}
    try:
        return Suite.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(source, exc, data) from None


def load_suite(name_or_path: str = DEFAULT_SUITE) -> Suite:
    """Load a suite by name (``"demo"``) or path (``"suites/demo.toml"``), includes resolved, validated."""
    path = find_suite_file(name_or_path)
    data = _resolve_includes(path)
    return parse_suite(data, source=str(path), default_name=path.stem)


def suite_files() -> dict[str, Path]:
    """Suite name -> file, for every suite found by name (first folder of :func:`suite_dirs` wins)."""
    found: dict[str, Path] = {}
    for folder in suite_dirs():
        for path in sorted(folder.glob("*.toml")):
            found.setdefault(path.stem, path)
    return dict(sorted(found.items()))


def list_suites() -> list[Suite]:
    """Every suite found by name, sorted by name."""
    return [load_suite(str(path)) for path in suite_files().values()]


# --- showing -------------------------------------------------------------------------------------------


def describe_suite(suite: Suite) -> str:
    """The resolved suite as a person reads it (``dflashbench suites show``)."""
    methods = ", ".join(m.value for m in suite.methods)
    lines = [
        f"{suite.name} (version {suite.version}) - {suite.source_file}",
        f"  {suite.description}" if suite.description else "",
        f"  backend      {suite.backend}",
        f"  model        {suite.model}",
        f"  methods      {methods}",
    ]
    for method in suite.methods:
        if record(method).needs_draft:
            n, schedule = suite.draft_tokens(method), suite.draft_schedule(method)
            spec = (f" (draft length by batch size: {schedule.describe()})" if schedule else
                    f" ({n} speculative tokens)" if n else " (speculative tokens: from the draft's config)")  # fmt: skip
            lines.append(f"  draft        {method.value}: {suite.drafts[method.base]}{spec}")
    lines += [
        f"  concurrency  {', '.join(str(c) for c in suite.concurrency)}",
        f"  sampling     temperature {suite.temperature}, max_tokens {suite.max_tokens}, seed {suite.seed}, "
        f"warm-up {suite.warmup_requests} request(s), timeout {suite.timeout_s:g} s",
        f"  parallelism  tp {suite.tp or 'auto'}, dp {suite.dp}, ep {suite.ep}, {suite.gpu_count} GPU(s) for per-GPU figures",
    ]
    for key, args in suite.extra_args.items():
        lines.append(f"  extra args   {key}: {' '.join(args)}")
    lines.append("  workloads")
    for w in suite.workloads:
        extras = [f"{w.num_prompts} prompts" if w.num_prompts else "all prompts", f"max_tokens {w.max_tokens}"]
        extras += [f"split {w.split}"] if w.split else []
        extras += [f"data {w.data}"] if w.data else []
        extras += [] if w.thinking is None else [f"thinking {'on' if w.thinking else 'off'}"]
        extras += ["placeholder rows skipped"] if w.on_placeholder == "skip" else []
        lines.append(f"    - {w.label}: {', '.join(extras)}")
    if suite.published:
        lines.append(f"  published    {', '.join(suite.published)} (suites/published/)")
    return "\n".join(line for line in lines if line) + "\n"
