"""Leaf data types shared by every layer of the harness.

Raw facts live here (integer-nanosecond timestamps, token counts, counter values); every derived number
(TTFT, TPOT, tau, ...) is computed by the pure functions in :mod:`dflashbench.measure.metrics`.
The field names of :class:`PointSummary` are a contract read by reports, ``compare`` and CI: add fields
freely, rename none without bumping :data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import tomllib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


# The method names come from the method records (dflashbench/data/methods.toml, read by dflashbench.methods), not
# from a list here: a method added there is a --method value everywhere. Only the names are read at this layer.
METHODS_FILE = Path(__file__).resolve().parent / "data" / "methods.toml"


# A method's arm: the method run with its own draft length, measured beside the method as a method of its own
# (``dflash-k3``: K 3; ``dflash-tuned``: a named schedule from the suite's ``schedules``).
ARM_SEP = "-"
_ARM_NAME = re.compile(r"(?=.{1,40}$)[a-z][a-z0-9_]*(?:-[a-z0-9_]+)*")
_FIXED_K = re.compile(r"k([1-9][0-9]{0,2})")


class _MethodBase(StrEnum):
    """Decoding method. The value is what users type and what run files store.

    Besides the methods of the records, an *arm* ``<method>-<variant>`` is a Method too (``Method("dflash-k3")``): the
    same method with its own draft length, so that the sweep runs it beside the method, and reports, ``compare`` and
    ``history`` keep it apart. Arms are made on first use (Enum's ``_missing_`` hook) and kept, so ``is`` holds; they are
    not listed by iterating ``Method``. :attr:`base` is the method an arm runs (a method's own base is itself)."""

    @classmethod
    def parse(cls, text: str) -> Method:
        try:
            return cls(text.strip().lower())  # type: ignore[return-value]
        except ValueError:
            choices = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown method {text!r}; choose one of: {choices} (or an arm of one: METHOD-kN for "
                             "draft length N, METHOD-NAME for a schedule the suite names)") from None

    @classmethod
    def _missing_(cls, value: object):
        if not isinstance(value, str) or ARM_SEP not in value:
            return None
        head, _, variant = value.partition(ARM_SEP)
        base = cls._value2member_map_.get(head)
        if base is None or ARM_SEP in head or not _ARM_NAME.fullmatch(variant):
            return None
        arm = str.__new__(cls, value)
        arm._name_, arm._value_ = value, value
        cls._value2member_map_[value] = arm  # the same object on every later lookup
        return arm

    @property
    def base(self) -> Method:
        """The method this runs: itself, or an arm's method (``dflash-k3`` -> ``dflash``)."""
        return type(self)(self.value.partition(ARM_SEP)[0])  # type: ignore[return-value]

    @property
    def variant(self) -> str | None:
        """An arm's variant (``k3``, ``tuned``); ``None`` for a method of the records."""
        return self.value.partition(ARM_SEP)[2] or None

    @property
    def arm_k(self) -> int | None:
        """The draft length a ``-kN`` arm fixes, else ``None``."""
        found = _FIXED_K.fullmatch(self.variant or "")
        return int(found[1]) if found else None


def _method_names() -> dict[str, str]:
    with METHODS_FILE.open("rb") as fh:
        names = [m["name"] for m in tomllib.load(fh)["methods"]]
    return {name.upper(): name for name in names}


Method = _MethodBase("Method", _method_names(), module=__name__, qualname="Method")


@dataclass(frozen=True, slots=True)
class Request:
    """One benchmark request, as a workload yields it.

    ``messages`` are OpenAI chat messages for the first turn; ``followup_turns`` are later user turns of a
    multi-turn conversation (MT-Bench, SPEED-Bench multiturn rows): the load generator sends them one by
    one, feeding the model's own answers back as history.
    """

    id: str
    workload: str
    category: str
    messages: tuple[dict[str, str], ...]
    max_tokens: int
    followup_turns: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_text(self) -> str:
        """The last user message: what a person would read as "the prompt"."""
        users = [m["content"] for m in self.messages if m.get("role") == "user"]
        return users[-1] if users else ""


def prompt_digest(req: Request, temperature: float | None = None) -> str:
    """SHA-256 (hex) of what identifies ``req`` as sent, whichever run sent it: its first turn's messages, its later
    user turns, its output cap, its own template settings and completion prompt (``metadata``'s
    ``chat_template_kwargs`` and ``prompt``) and the sampling ``temperature``, as canonical JSON. Not its id (a
    dataset's ids are its own numbering), not the model or the server."""
    what = {"messages": list(req.messages), "followup_turns": list(req.followup_turns), "max_tokens": req.max_tokens,
            "chat_template_kwargs": req.metadata.get("chat_template_kwargs"), "prompt": req.metadata.get("prompt"),
            "temperature": temperature}  # fmt: skip
    text = json.dumps(what, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class RequestResult:
    """What happened to one request: raw client-side timestamps and server-reported counts.

    Timestamps are ``time.perf_counter_ns()`` values: on Linux ``CLOCK_MONOTONIC``, one clock for every process
    of the machine, so results from several client processes share one time axis. ``chunk_ns[i]`` is the
    arrival time of the i-th SSE chunk that carried output text, and ``chunk_tokens[i]`` how many output
    tokens it carried (from the server's continuous usage stats where available, else estimated).

    The output itself (``dflashbench sweep --no-store-text`` keeps none of it): ``output_text`` is its first
    :data:`~dflashbench.load.outputs.TEXT_CAP_CHARS` characters, ``output_chars`` its full length and
    ``output_sha256`` the SHA-256 of the full text (so equality is exact even past the cap);
    ``output_token_ids`` the generated token ids where the server streams them (vLLM and the reference
    server with ``return_token_ids``), capped at :data:`~dflashbench.load.outputs.TOKEN_CAP`. ``answer`` and
    ``correct`` are the final answer found in the full text and whether it equals the workload's reference
    (:mod:`dflashbench.workloads.grading`); ``correct`` is ``None`` where there was nothing to grade.
    """

    run_id: str
    point_id: str
    request_id: str
    category: str
    concurrency: int
    ok: bool
    error: str | None
    queued_ns: int  # when the request became due (closed loop: when a stream slot freed up)
    sent_ns: int
    first_token_ns: int | None
    last_token_ns: int | None
    output_tokens: int
    output_tokens_source: str  # "server" | "client_tokenizer" | "chunks" | "streamed" (the server's disagreed)
    prompt_tokens: int | None = None
    chunk_ns: tuple[int, ...] = ()
    chunk_tokens: tuple[int, ...] = ()
    warmup: bool = False
    # Per-request speculative stats when the server reports them (reference backend, SGLang meta_info).
    spec_verify_steps: int | None = None
    spec_accepted_tokens: int | None = None
    turn: int = 0
    # True when ``chunk_tokens`` were estimated (server sent no continuous usage), so ITL is approximate.
    chunk_tokens_estimated: bool = False
    output_text: str | None = None
    output_chars: int | None = None
    output_sha256: str | None = None
    output_token_ids: tuple[int, ...] | None = None
    answer: str | None = None
    correct: bool | None = None
    repeat: int = 0  # which measurement of its point (sweep --repeats); its point_id says so too
    # Several endpoints (``--endpoint`` given more than once): the base URL that served this request; None =
    # the run's one server.
    endpoint: str | None = None
    # Whether its per-token timing was observable (dflashbench.measure.observability: at most half of its tokens after
    # the first arrived in bursts), and how many tokens did; None = no decode to observe, or a row from before.
    # Written for readers of requests.jsonl; the metrics recompute both from chunk_ns / chunk_tokens.
    timing_observable: bool | None = None
    burst_tokens: int | None = None
    # Sent with ignore_eos (a trace replay), where the server says so (the reference server's spec_decode.eos): the
    # 0-based index of the first end-of-sequence token among the output tokens (None: none came, or not reported),
    # and the speculative counts up to and including the step that committed it (None: not reported).
    eos_token_index: int | None = None
    spec_verify_steps_to_eos: int | None = None
    spec_accepted_tokens_to_eos: int | None = None
    # A trace replay's request (dflashbench.workloads.trace_content): its row in the trace, its arrival there
    # (seconds from the window's start, before the speed), the trace's input and output lengths, and the lengths
    # its content aimed at (the trace's, scaled and clipped to the context). None: not a trace request.
    trace_index: int | None = None
    trace_arrival_s: float | None = None
    trace_input_tokens: int | None = None
    trace_output_tokens: int | None = None
    trace_target_input_tokens: int | None = None
    trace_target_output_tokens: int | None = None  # what it asked for (max_tokens: the trace's, scaled)
    # The server's count checked against the stream (dflashbench.load.usage_check): the output tokens the client
    # counted in what was streamed (content and reasoning alike), and how: "token_ids" (the chunks' own ids, where the
    # server sent them on every output chunk), "tokenizer" (the target's tokenizer on the streamed text) or "chunks"
    # (output chunks: a lower bound, with the text's UTF-8 bytes as the upper one); None: not checked (a failed
    # request, a warm-up, or a row from before). ``server_output_tokens``: the server's usage.completion_tokens
    # where it disagreed with the stream beyond the tolerance: the request is flagged, and ``output_tokens`` holds
    # the streamed count (``output_tokens_source`` "streamed"); None where it agreed or was not checked.
    streamed_tokens: int | None = None
    streamed_tokens_source: str | None = None
    server_output_tokens: int | None = None
    # The server's usage.completion_tokens where it was no integer (``"abc"``, 12.5, ``null`` is none): its JSON,
    # capped. The usage is read as missing (``output_tokens`` counted from the stream) and the request flagged.
    server_usage_invalid: str | None = None
    # What was asked, as a digest (written whether or not the text is stored, so ``--no-store-text`` runs pair too):
    # SHA-256 of the request's messages, later turns, output cap, per-request template settings and the sampling
    # temperature (:func:`prompt_digest`). Two runs' requests with the same digest, occurrence (``<id>~<k>``) and turn
    # are the same request (docs/compare.md); None: a row from before the digest, or a request not sent.
    prompt_sha256: str | None = None

    @property
    def usage_mismatch(self) -> bool:
        """Whether the server's token count disagreed with what it streamed (and was replaced by the stream's)."""
        return self.server_output_tokens is not None

    def to_dict(self) -> dict[str, Any]:
        """The record as ``requests.jsonl`` holds it. Every field is a number, a string or a tuple of numbers, so a
        shallow copy is ``dataclasses.asdict``'s result without its deep copy of every timestamp (which cost the
        sweep about 0.5 ms per request: issue #44)."""
        return {name: getattr(self, name) for name in _REQUEST_FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestResult:
        """A record from a ``requests.jsonl`` row, or a row of a DataFrame of them, where pandas wrote a missing
        value as NaN: NaN is read back as ``None`` (no field stores a NaN), whole numbers pandas turned into floats
        (a column with a gap) back into ints, so every reader gets the record as it was written."""
        kwargs = {k: _field_value(k, v) for k, v in data.items() if k in _REQUEST_FIELD_SET}
        for name in ("chunk_ns", "chunk_tokens"):
            kwargs[name] = tuple(kwargs.get(name, ()))
        if isinstance(kwargs.get("output_token_ids"), list):
            kwargs["output_token_ids"] = tuple(kwargs["output_token_ids"])
        return cls(**kwargs)


_REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(RequestResult))
_REQUEST_FIELD_SET = frozenset(_REQUEST_FIELDS)
# Integer fields a DataFrame turns into floats where some rows lack them (the timestamps, the counts).
_REQUEST_INT_FIELDS = frozenset(f.name for f in dataclasses.fields(RequestResult) if str(f.type).startswith("int"))


def _field_value(name: str, value: Any) -> Any:
    if isinstance(value, float):
        if value != value:  # NaN: pandas' missing value
            return None
        if name in _REQUEST_INT_FIELDS and value.is_integer():
            return int(value)
    return value


@dataclass(frozen=True, slots=True)
class AcceptCounters:
    """Cumulative speculative-decoding counters read from a server at one instant.

    Names follow vLLM: a *draft* is one verification step of one request; ``draft_tokens`` are the tokens
    proposed; ``accepted_tokens`` those accepted (bonus token excluded). ``accepted_per_pos[i]`` counts
    acceptances at draft position i. Engines reporting other quantities are mapped onto these by their
    backend (e.g. SGLang: drafts = spec_verify_ct, accepted = completion_tokens - spec_verify_ct).
    """

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: tuple[int, ...] = ()
    # Which server (process) these counters belong to, e.g. its process start time and the counters' own
    # ``_created`` timestamps; ``None`` = unknown. Not part of equality: two reads compare by their counts.
    server_id: str | None = field(default=None, compare=False)

    def minus(self, earlier: AcceptCounters) -> AcceptCounters:
        """Counter delta over a window. Raises ``CounterResetError`` when the two reads come from different
        servers (``server_id`` changed: a restart, even one whose new counters already exceed the old) or when
        any counter, per-position ones included, went backwards."""
        if self.server_id is not None and earlier.server_id is not None and self.server_id != earlier.server_id:
            raise CounterResetError(
                f"the server restarted during the window (its identity changed: {earlier.server_id} -> "
                f"{self.server_id}); its counters mix two servers"
            )
        width = max(len(self.accepted_per_pos), len(earlier.accepted_per_pos))
        now = self.accepted_per_pos + (0,) * (width - len(self.accepted_per_pos))
        then = earlier.accepted_per_pos + (0,) * (width - len(earlier.accepted_per_pos))
        if (
            self.drafts < earlier.drafts
            or self.draft_tokens < earlier.draft_tokens
            or self.accepted_tokens < earlier.accepted_tokens
            or any(a < b for a, b in zip(now, then, strict=True))
        ):
            raise CounterResetError(
                f"speculative-decoding counters went backwards ({earlier} -> {self}); "
                "the server restarted or reset its metrics during the window"
            )
        return AcceptCounters(
            drafts=self.drafts - earlier.drafts,
            draft_tokens=self.draft_tokens - earlier.draft_tokens,
            accepted_tokens=self.accepted_tokens - earlier.accepted_tokens,
            accepted_per_pos=tuple(a - b for a, b in zip(now, then, strict=True)),
            server_id=self.server_id,
        )


class CounterResetError(RuntimeError):
    """A cumulative counter decreased inside a measurement window."""


POINT_CONTRACT_FIELDS: tuple[str, ...] = (
    "schema_version", "run_id", "backend", "method", "model", "draft", "workload", "category",
    "concurrency", "num_gpus", "num_requests", "num_errors", "duration_s", "output_tokens",
    "throughput_tok_per_s", "throughput_tok_per_s_per_gpu", "per_user_tok_per_s_mean",
    "per_user_tok_per_s_p50", "per_user_tok_per_s_p10", "ttft_s_p50", "ttft_s_p99", "tpot_s_p50",
    "tpot_s_p99", "itl_s_p50", "itl_s_p99", "e2e_s_p50", "e2e_s_p99", "tau", "acceptance_rate",
    "energy_j_per_tok",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class PointKey:
    """A grid point's identity, which its id spells: ``<backend>:<method>:<workload>:<load>``, and ``/r<round>``
    (0-based) when the run has repeats: ``reference:dflash:synthetic:c4/r1``. ``load`` is ``c<streams>`` for a closed
    loop, ``r<rate>`` for an open loop (:func:`dflashbench.load.arrivals.rate_label`), or a trace's own label. The
    category is not part of it: a point's rows, one per category, share its id. One ``str()`` makes ids
    (:func:`dflashbench.plan.grid.build_grid`) and one parser, :meth:`parse`, reads them back from stored rows."""

    backend: str
    method: str
    workload: str
    load: str
    round: int | None = None  # the repeat round; None in a run without repeats (its ids carry no suffix)

    def __str__(self) -> str:
        base = f"{self.backend}:{self.method}:{self.workload}:{self.load}"
        return base if self.round is None else f"{base}/r{self.round}"

    @classmethod
    def parse(cls, point_id: str) -> PointKey | None:
        """The key an id spells, or ``None`` for an id of another shape (a hand-made row). A workload label may
        hold ``:``; the backend and method come first and the load last."""
        text, round_ = cls.split_round(point_id)
        parts = text.split(":")
        if len(parts) < 4 or not all(parts):
            return None
        return cls(parts[0], parts[1], ":".join(parts[2:-1]), parts[-1], round_)

    @staticmethod
    def split_round(point_id: str) -> tuple[str, int | None]:
        """``(id without its round, round)``: ``x:c1/r2`` -> ``("x:c1", 2)``; an id without one -> ``(id, None)``.
        Any id, of this shape or not (hand-made rows carry their own)."""
        head, sep, tail = point_id.rpartition("/r")
        return (head, int(tail)) if sep and tail.isdigit() else (point_id, None)

    @property
    def base(self) -> PointKey:
        """The point its repeats share: this key without its round."""
        return dataclasses.replace(self, round=None)

    @property
    def streams(self) -> int | None:
        """A closed-loop point's concurrency, ``None`` for an open loop or a trace replay."""
        return int(self.load[1:]) if self.load[:1] == "c" and self.load[1:].isdigit() else None


@dataclass(frozen=True, slots=True)
class PointSummary:
    """One row per backend x method x workload x category x concurrency. ``None`` = not measured."""

    run_id: str
    backend: str
    method: str
    model: str
    draft: str | None
    workload: str
    category: str  # "all" for a point covering every category of the workload
    concurrency: int
    num_gpus: int
    num_requests: int
    num_errors: int
    duration_s: float | None
    output_tokens: int
    throughput_tok_per_s: float | None
    throughput_tok_per_s_per_gpu: float | None
    per_user_tok_per_s_mean: float | None
    per_user_tok_per_s_p50: float | None
    per_user_tok_per_s_p10: float | None
    ttft_s_p50: float | None
    ttft_s_p99: float | None
    tpot_s_p50: float | None
    tpot_s_p99: float | None
    itl_s_p50: float | None
    itl_s_p99: float | None
    e2e_s_p50: float | None
    e2e_s_p99: float | None
    tau: float | None
    acceptance_rate: float | None
    energy_j_per_tok: float | None
    schema_version: int = SCHEMA_VERSION
    # Extras (free to add): not part of the frozen contract above.
    point_id: str = ""
    status: str = "ok"  # "ok" | "failed"
    failure_reason: str | None = None
    icl_s_p50: float | None = None
    icl_s_p99: float | None = None
    ttft_s_mean: float | None = None
    tpot_s_mean: float | None = None
    queue_s_p50: float | None = None
    queue_s_p99: float | None = None
    accepted_per_pos_rate: tuple[float, ...] = ()
    output_tokens_source: str = "server"
    mean_power_w: float | None = None
    gpu_util_pct_mean: float | None = None
    # The steady window (dflashbench.measure.steady): all streams busy; None where there was none.
    steady_throughput_tok_per_s: float | None = None
    steady_share: float | None = None  # of the whole run; under steady.MIN_SHARE the point is ramp-dominated
    # Task accuracy (workloads with reference answers): correct / graded over the point's finished requests.
    accuracy: float | None = None
    num_graded: int = 0
    num_correct: int = 0
    repeat: int = 0  # which measurement of the point (sweep --repeats; dflashbench.measure.repeats): 0, 1, ...
    # Per-user rate robust to a few tiny TPOTs: tokens after the first / decode time, pooled over the observed
    # requests (metrics.per_user_tok_per_s_pooled); what the verdict's per-user readings use.
    per_user_tok_per_s_pooled: float | None = None
    # Observable timing (dflashbench.measure.observability): of the successful requests with a decode, how many the
    # client could time per token, that share, and the share of their tokens that did not arrive in bursts.
    # Below observability.MIN_OBSERVED_SHARE the per-token latency figures (TPOT, ITL, ICL, per-user tok/s) are
    # None and latency_not_measured_reason says why. None everywhere = a row from before this was recorded.
    timing_requests: int | None = None
    timing_observed_requests: int | None = None
    timing_observed_share: float | None = None
    timing_observed_tokens_share: float | None = None
    latency_not_measured_reason: str | None = None
    # The servers' token counts checked against the stream (dflashbench.load.usage_check): successful requests
    # checked, and of them those whose usage.completion_tokens disagreed beyond the tolerance (their figures use the
    # streamed count). None = a row from before this was recorded.
    usage_checked_requests: int | None = None
    usage_mismatch_requests: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    # The row's figures in groups, for code that reads one kind at a time; the stored field names stay flat
    # (points.jsonl, the committed runs and every older run load unchanged).
    @property
    def latency(self) -> dict[str, float | None]:
        """Per-request latency (seconds): TTFT, TPOT, ITL, ICL, E2E, queueing; p50, p99 and means."""
        return _group(self, ("ttft_s_p50", "ttft_s_p99", "ttft_s_mean", "tpot_s_p50", "tpot_s_p99", "tpot_s_mean",
                             "itl_s_p50", "itl_s_p99", "icl_s_p50", "icl_s_p99", "e2e_s_p50", "e2e_s_p99",
                             "queue_s_p50", "queue_s_p99"))  # fmt: skip

    @property
    def throughput(self) -> dict[str, float | None]:
        """Tokens per second: the system's (per GPU, in the steady window) and per user."""
        return _group(self, ("throughput_tok_per_s", "throughput_tok_per_s_per_gpu", "steady_throughput_tok_per_s",
                             "per_user_tok_per_s_mean", "per_user_tok_per_s_p50", "per_user_tok_per_s_p10",
                             "per_user_tok_per_s_pooled"))  # fmt: skip

    @property
    def speculation(self) -> dict[str, Any]:
        """What the drafter achieved: tau, the acceptance rate, the acceptance per draft position."""
        return _group(self, ("tau", "acceptance_rate", "accepted_per_pos_rate"))

    @property
    def load(self) -> dict[str, Any]:
        """The load the point carried and how it went: streams, requests, errors, duration, tokens, the steady
        window's share, the repeat."""
        return _group(self, ("concurrency", "num_requests", "num_errors", "duration_s", "output_tokens",
                             "steady_share", "repeat"))  # fmt: skip

    @property
    def telemetry(self) -> dict[str, float | None]:
        """What the GPUs drew: energy per token, mean power, mean utilisation."""
        return _group(self, ("energy_j_per_tok", "mean_power_w", "gpu_util_pct_mean"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PointSummary:
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        if "accepted_per_pos_rate" in kwargs:
            kwargs["accepted_per_pos_rate"] = tuple(kwargs["accepted_per_pos_rate"] or ())
        return cls(**kwargs)


def _group(row: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(row, name) for name in names}


@dataclass(frozen=True, slots=True)
class ProbeReading:
    """One reading of the machine's speed probe (:mod:`dflashbench.run.probe`): a fixed piece of work timed a few
    times, at a moment of the sweep (``at``: ``"start"``, ``"before <point id>"``, ``"end"``). The noise rule
    (docs/metrics.md, "The noise rule") reads the machine's drift from how these move.

    ``kind`` is ``"cpu"`` (a fixed single-threaded matmul) or ``"gpu"`` (a fixed GEMM and a device copy);
    ``trials_s`` the time of each trial and ``seconds`` their median; ``gpu`` NVML's clocks, power and throttle
    reasons at the reading (GPU probes only); ``settle_s`` and ``engine_cores`` what the wait for the launched
    engines to go quiet found (an ``engine_cores`` at or above ``engine_quiet.IDLE_CORES``: the wait ran out and
    the reading shares its CPU with the engine)."""

    kind: str
    at: str
    t_ns: int  # perf_counter_ns when the reading was taken (CLOCK_MONOTONIC, as request timestamps)
    seconds: float
    trials_s: tuple[float, ...] = ()
    work: str = ""  # what was timed, e.g. "matmul 256x256 fp32 x24, 1 thread"
    cpus: str | None = None  # the CPUs it ran on ("0-1")
    gpu: dict[str, Any] = field(default_factory=dict)
    # the wait for the launched engines to go quiet first (dflashbench.run.engine_quiet); None: no engine to wait for
    settle_s: float | None = None  # how long the probe waited
    engine_cores: float | None = None  # the engines' CPU use (cores) over the last window before the reading

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeReading:
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["trials_s"] = tuple(kwargs.get("trials_s") or ())
        kwargs["gpu"] = dict(kwargs.get("gpu") or {})
        return cls(**kwargs)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """``(0, 1, 2, 5)`` -> ``"0-2,5"``."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


@dataclass(frozen=True)
class CpuPartition:
    """The CPUs this machine lets the sweep use, split between the launched engine and the client: the manifest's
    ``cpus`` record, planned by :mod:`dflashbench.plan.cpus`.

    ``engine`` is empty when the engine is not pinned (it runs where the OS puts it: on every CPU)."""

    available: tuple[int, ...]
    engine: tuple[int, ...]  # every engine's CPUs (with per-server sets: their union)
    client: tuple[int, ...]
    setting: str
    reason: str
    servers: dict[str, tuple[int, ...]] = field(default_factory=dict)  # per server (--engine-cpus ar=0,dflash=1)

    @property
    def split(self) -> bool:
        return bool(self.engine)

    @property
    def client_shares(self) -> bool:
        """The client runs on an engine's cores (every core is an engine's: on 2 cores, two engines side by side)."""
        return self.split and bool(set(self.client) & set(self.engine))

    @property
    def client_mask(self) -> tuple[int, ...] | None:
        """The CPUs to pin the client to; ``None`` when it runs unpinned."""
        return self.client if self.split else None

    def describe(self, why: bool = True) -> str:
        """For the console (with ``why``) and the report's "measured on" line."""
        if self.servers:
            engines = ", ".join(f"{name} on CPU {format_cpu_list(c)}" for name, c in self.servers.items())
            shared = " (shared with the engines)" if self.client_shares else ""
            text = f"engines: {engines}; client on CPU {format_cpu_list(self.client)}{shared}"
        elif self.split:
            text = f"engine on CPU {format_cpu_list(self.engine)}, client on CPU {format_cpu_list(self.client)}"
        else:
            text = f"client and engine shared CPU {format_cpu_list(self.available)}"
        return f"{text} ({self.reason})" if why and self.reason else text

    def record(self) -> dict:
        """What the manifest keeps (``cpus``)."""
        return asdict(self)


# -- the shape of a stored row ----------------------------------------------------------------------------------
# The JSON types a field's annotation allows (the records' annotations are strings: ``from __future__ import
# annotations``); an annotation not named here is not checked.
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "None": (type(None),),
    "tuple": (list, tuple), "dict": (dict,), "Any": (object,),
}  # fmt: skip
_TYPE_WORDS = {"str": "a string", "int": "a whole number", "float": "a number", "bool": "true or false",
               "None": "null", "tuple": "a list", "dict": "an object"}  # fmt: skip


def _allowed(annotation: str) -> tuple[str, ...]:
    """``"float | None"`` -> ``("float", "None")``; ``"tuple[int, ...]"`` -> ``("tuple",)``."""
    return tuple(part.strip().split("[", 1)[0] for part in str(annotation).split("|"))


@functools.cache
def _field_checks(cls: type) -> tuple[tuple[str, tuple[str, ...], tuple[type, ...], bool, bool], ...]:
    """Per field of ``cls`` that is checked: (name, kinds, the Python types JSON gives them, whether a whole float
    counts as an int, whether true/false does): made once per record type, rows are many."""
    out = []
    for f in dataclasses.fields(cls):
        kinds = _allowed(f.type)
        if any(k not in _JSON_TYPES or k == "Any" for k in kinds):
            continue  # an annotation not named here: not checked
        types = tuple(t for k in kinds for t in _JSON_TYPES[k])
        out.append((f.name, kinds, types, "int" in kinds and "float" not in kinds, "bool" in kinds))
    return tuple(out)


def _fits(value: Any, types: tuple[type, ...], whole_float: bool, boolean: bool) -> bool:
    if isinstance(value, bool):
        return boolean  # JSON's true is no number
    if isinstance(value, types):
        return True
    return whole_float and isinstance(value, float) and value.is_integer()  # written with a point (pandas)


def row_problem(cls: type, row: Any, required: Iterable[str] = ()) -> str | None:
    """Why ``row``, one JSON line of a run's file, cannot be read as a ``cls`` record (:class:`PointSummary`,
    :class:`RequestResult`, ...): not an object, a ``required`` field missing, or a field of the record holding a
    value of another JSON type (``"concurrency": "two"``), said with the field's name; ``None`` when it fits.
    Fields the record does not know are left alone (a newer writer's extras)."""
    if not isinstance(row, dict):
        return f"a {type(row).__name__} where a JSON object was expected"
    missing = [name for name in required if name not in row]
    if missing:
        return f"field {missing[0]!r} is missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
    for name, kinds, types, whole_float, boolean in _field_checks(cls):
        if name in row and not _fits(row[name], types, whole_float, boolean):
            want = " or ".join(_TYPE_WORDS.get(k, k) for k in kinds)
            return f"field {name!r} is {_shown(row[name])}, expected {want}"
    return None


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, dict | list) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."

