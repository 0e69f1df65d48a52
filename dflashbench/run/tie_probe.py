"""The lossless check's probe: where a greedy method's output first differs from AR's, ask the target alone (an AR
server) for its top log-probabilities at that position, and write what it says to ``ties.jsonl`` as it comes.

For each divergence not probed yet (:func:`dflashbench.measure.lossless.compared_pairs`; one needs both outputs'
token ids, which vLLM and the reference server stream):

1. the prompt's token ids, exactly as the server tokenises it: the request AR answered is sent again (the same body:
   its messages, chat template arguments and fields) for one token, with ``return_token_ids``, and the server's own
   ``prompt_token_ids`` are read back (vllm-project/vllm@v0.32.0: vllm/entrypoints/openai/chat_completion/protocol.py
   #L146 on a chat completion, completion/protocol.py#L669 on a completion's choice). Tokenising here with the
   target's tokenizer could differ from the server's template handling; the server's own ids cannot;
2. one token on ``/v1/completions`` with the prompt given as token ids, those prompt ids followed by AR's output ids
   up to the divergence, greedy, with ``logprobs: k`` and ``return_tokens_as_token_ids`` (tokens named
   ``token_id:N``, vllm/entrypoints/openai/completion/protocol.py#L163, so no token string is ambiguous); never
   re-tokenised text.

The margin (:func:`dflashbench.measure.lossless.margin_nats`) is AR's token's log-probability minus the method's;
an engine that serves no log-probabilities or no prompt ids gets its row with why, and the report calls that
divergence a plain difference. The probe reads the target on its prefill path, a third kernel path beside AR's decode
and the method's verify pass: a near-tie is small on any of them.

It runs while an AR server is up: the one a round placed beside the others (:func:`probe` with ``ar``), or, at the
sweep's end, one launched for it (``launch``) when divergences are left and AR's own server is gone (``--interleave
off`` runs one server at a time), once; nothing is launched when nothing diverged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import aiohttp

from dflashbench.load.loadgen import LoadGenConfig, build_body
from dflashbench.measure import lossless
from dflashbench.measure.analysis import finite_number as _number
from dflashbench.measure.quality import request_key
from dflashbench.plan.grid import SweepContext
from dflashbench.run.manifest import now_iso
from dflashbench.run.store import RunStore, load_run
from dflashbench.types import Method, Request

Echo = Callable[[str], None]
TOP_K = 5  # log-probabilities asked for at the divergence (vLLM serves up to --max-logprobs, 20 by default)
LOG_NAME = "ar-probe"  # the launched server's log: server-<backend>-ar-probe.log


def pending(store: RunStore) -> tuple[list[lossless.Pair], Any]:
    """The divergences of the run with a token to probe and no probe row yet, and the run as read."""
    run = load_run(store.run_dir)
    raw = run.repeat_points if run.repeat_points is not None else run.points
    if raw.empty:
        return [], run
    ok = raw[raw["status"].fillna("ok") == "ok"] if "status" in raw.columns else raw
    rows = {lossless.tie_key(r): r for r in run.ties}
    todo = [p for p in lossless.compared_pairs(ok, run.requests)
            if not p.same and p.position is not None and p.ar_token is not None and p.method_token is not None
            and not _probed(p, rows)]  # fmt: skip
    return todo, run


def _probed(pair: lossless.Pair, rows: Mapping[tuple, Mapping]) -> bool:
    return lossless.probe_row(pair, rows) is not None


def when_done(ctx: SweepContext, store: RunStore, echo: Echo, ar) -> Callable[..., bool]:
    """An exit callback for the ``ExitStack`` that holds a round's servers (``stack.push``): when the round ends
    without an error, :func:`probe` on ``ar``, AR's server (``None``: none up, nothing to do), before the servers
    stop."""

    def exit_(kind, exc, tb) -> bool:
        if kind is None and ar is not None:
            probe(ctx, store, echo, ar)
        return False  # an error goes on as it was

    return exit_


def probe(ctx: SweepContext, store: RunStore, echo: Echo, ar=None, *, launch: bool = False,
          ready_timeout_s: float | None = None) -> int:  # fmt: skip
    """Probe every divergence of the run not probed yet on ``ar`` (a running AR server's
    :class:`~dflashbench.run.point.ServerTarget`), or with ``launch`` on an AR server started for it (the sweep's
    end); the rows written. Nothing for a sampled run, a run without AR, or a server someone else runs. A probe that
    fails is said in one line and leaves the divergences as plain differences: it never fails the sweep."""
    from dflashbench.errors import Interrupted
    from dflashbench.run.store import StoreWriteError

    try:
        return _probe(ctx, store, echo, ar, launch, ready_timeout_s)
    except (StoreWriteError, Interrupted, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - the measurements are written; the probe only adds to them
        echo(f"note: the lossless probe failed ({type(exc).__name__}: {exc}); the divergences it did not read are "
             "reported as plain differences")  # fmt: skip
        return 0


def _probe(ctx: SweepContext, store: RunStore, echo: Echo, ar, launch: bool, ready_timeout_s: float | None) -> int:
    if ctx.suite.temperature > 0 or Method.AR not in ctx.suite.methods:
        return 0
    if ar is None and (not launch or ctx.endpoint or Method.AR not in ctx.launches):
        return 0  # no AR server to ask, and none to start
    todo, run = pending(store)  # reads the run's requests: once a round and once at the end
    if not todo:
        return 0
    if ar is not None:
        return _probe_all(ctx, store, echo, ar.base_url, ar.lg, todo, run, "ar")
    return _launch_and_probe(ctx, store, echo, todo, run, ready_timeout_s or ctx.suite.ready_timeout_s)


def _launch_and_probe(ctx: SweepContext, store: RunStore, echo: Echo, todo, run, ready_timeout_s: float) -> int:
    from dflashbench.backends import get_backend
    from dflashbench.backends.process import ServerStartError
    from dflashbench.plan.grid import launch_on_free_port
    from dflashbench.run.launching import launcher_of, request_for
    from dflashbench.run.point import loadgen_config

    backend = get_backend(ctx.backend_name)
    launch, _ = launch_on_free_port(ctx.launches[Method.AR], backend)
    log = store.server_log_path(ctx.backend_name, LOG_NAME)
    echo(f"lossless check: {len(todo)} output(s) differ from AR's; starting AR's server once to read the target's "
         "margin there")  # fmt: skip
    request = request_for(ctx, launch, LOG_NAME, log, store.run_id)
    with launcher_of(ctx).start(request) as server:  # where the sweep's own servers run (dflashbench.launchers)
        try:
            server.wait_ready(backend.health_path(), timeout_s=ready_timeout_s, progress=False, echo=echo)
        except ServerStartError as exc:
            echo(f"note: the lossless probe's AR server did not start ({str(exc).splitlines()[0]}): the divergences "
                 "are reported as plain differences, their margins not read")  # fmt: skip
            store.update_manifest(lossless_probe={"launched": True, "started": False, "log": log.name})
            return 0
        fields = backend.request_fields(Method.AR) if hasattr(backend, "request_fields") else None
        base_url = server.base_url
        lg = loadgen_config(ctx, base_url, _model_name(ctx, base_url), False, fields)
        written = _probe_all(ctx, store, echo, base_url, lg, todo, run, LOG_NAME)
    store.update_manifest(lossless_probe={"launched": True, "started": True, "log": log.name, "rows": written})
    return written


def _model_name(ctx: SweepContext, base_url: str) -> str:
    """The name the launched server serves the target under, chosen as the sweep chooses it for its own servers (the
    manifest keeps a portable path, not this machine's, so its ``model_sent`` is not what the server answers to)."""
    from dflashbench.backends.endpoint import check_endpoint, pick_model_name

    served = check_endpoint(base_url, ctx.api_key)
    return pick_model_name(served, [ctx.suite.model, ctx.pair.target], base_url, named=False)[0]


# -- one divergence ---------------------------------------------------------------------------------------------------
def _probe_all(ctx: SweepContext, store: RunStore, echo: Echo, base_url: str, lg: LoadGenConfig,
               todo: Sequence[lossless.Pair], run, server: str) -> int:  # fmt: skip
    requests = requests_by_id(ctx)
    records = _ar_records(run.requests, todo)
    rows = asyncio.run(_probe_async(base_url, lg, todo, requests, records, store, server, ctx.suite.timeout_s))
    kinds = [r["class"] for r in rows]
    margins = [abs(r["margin_nats"]) for r in rows if r["class"] == lossless.NEAR_TIE]
    unread = sum(r["margin_nats"] is None for r in rows)
    said = f"{kinds.count(lossless.NEAR_TIE)} near-tie" + (f" (margin ≤ {max(margins):.2f} nats)" if margins else "")
    echo(f"lossless check: {len(rows)} divergence(s) from AR read on the AR server: {said}, "
         f"{kinds.count(lossless.DIFFERENT)} different" + (f" ({unread} margin(s) not readable)" if unread else ""))
    return len(rows)


async def _probe_async(base_url: str, lg: LoadGenConfig, todo: Sequence[lossless.Pair], requests: Mapping[str, Request],
                       records: Mapping[tuple, dict], store: RunStore, server: str, timeout_s: float) -> list[dict]:  # fmt: skip
    out = []
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for pair in todo:
            row = {**_identity(pair), "server": server, "at": now_iso(), "top_k": TOP_K}
            try:
                found = await _one(session, base_url, lg, pair, requests, records)
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                found = {"why": f"the AR server did not answer the probe: {type(exc).__name__}: {exc}"[:300]}
            row.update(found)
            margin = row.get("margin_nats")
            row["class"] = lossless.classify(margin)
            row["tolerance_nats"] = lossless.NEAR_TIE_NATS
            row.setdefault("margin_nats", None)
            store.append_tie(row)
            out.append(row)
    return out


def _identity(pair: lossless.Pair) -> dict:
    return {"run_id": pair.run_id, "point_id": pair.point_id, "ar_point_id": pair.ar_point_id, "method": pair.method,
            "concurrency": pair.concurrency, "round": pair.round, "request_id": pair.request_id, "turn": pair.turn,
            "occurrence": pair.occurrence, "position": pair.position, "ar_token_id": pair.ar_token,
            "method_token_id": pair.method_token}  # fmt: skip


async def _one(session: aiohttp.ClientSession, base_url: str, lg: LoadGenConfig, pair: lossless.Pair,
               requests: Mapping[str, Request], records: Mapping[tuple, dict]) -> dict:  # fmt: skip
    """The probe's fields for one divergence: the margin, the target's top-k there, or why not."""
    req = requests.get(pair.request_id)
    if req is None:
        return {"why": f"request {pair.request_id} is not in this run's plan (was --data changed?)"}
    ar_record = records.get((pair.ar_point_id, pair.request_id, pair.turn, pair.round, pair.occurrence))
    ids = (ar_record or {}).get("output_token_ids")
    if not isinstance(ids, list | tuple) or len(ids) <= pair.position:
        return {"why": "AR's output token ids up to the divergence are not stored"}
    messages, why = conversation(req, pair, records)
    if messages is None:
        return {"why": why}
    prompt, why = await _prompt_ids(session, base_url, lg, req, messages)
    if prompt is None:
        return {"why": why}
    body = {"model": lg.model, "prompt": [*prompt, *(int(t) for t in ids[: pair.position])], "max_tokens": 1,
            "temperature": 0, "logprobs": TOP_K, "return_tokens_as_token_ids": True}  # fmt: skip
    status, answer = await _post(session, base_url.rstrip("/") + "/v1/completions", lg, body)
    if status != 200:
        return {"why": f"the AR server serves no log-probabilities here (HTTP {status}: {_message(answer)})"}
    top, why = top_logprobs(answer)
    if top is None:
        return {"why": why}
    margin, why = lossless.margin_nats(pair.ar_token, pair.method_token, top)
    best = max(top, key=top.get)
    return {"margin_nats": margin, "why": why, "ar_logprob": top.get(pair.ar_token),
            "method_logprob": top.get(pair.method_token), "probe_top1": best, "prompt_tokens": len(prompt),
            "top_logprobs": [[t, lp] for t, lp in sorted(top.items(), key=lambda kv: -kv[1])]}  # fmt: skip


def conversation(req: Request, pair: lossless.Pair, records: Mapping[tuple, dict]
                 ) -> tuple[list[dict] | None, str | None]:  # fmt: skip
    """The messages AR's request at ``pair.turn`` carried: the request's own, then each earlier turn's answer (AR's,
    which the method's equalled there, or the pair would not be compared) and the next user turn."""
    messages = [dict(m) for m in req.messages]
    for turn in range(pair.turn):
        earlier = records.get((pair.ar_point_id, pair.request_id, turn, pair.round, pair.occurrence))
        text = (earlier or {}).get("output_text")
        if not isinstance(text, str) or (earlier or {}).get("output_chars") not in (None, len(text)):
            return None, f"turn {turn}'s answer is not stored whole, so turn {pair.turn}'s prompt cannot be rebuilt"
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": req.followup_turns[turn]}]
    return messages, None


async def _prompt_ids(session: aiohttp.ClientSession, base_url: str, lg: LoadGenConfig, req: Request,
                      messages: list[dict]) -> tuple[list[int] | None, str | None]:  # fmt: skip
    """The prompt's token ids as the server tokenises the very request AR answered (the module docstring)."""
    body = build_body(replace(lg, continuous_usage=False), req, messages)
    body.update(stream=False, max_tokens=1, temperature=0, return_token_ids=True)
    body.pop("stream_options", None)
    status, answer = await _post(session, lg.url_for(base_url), lg, body)
    if status != 200:
        return None, f"the AR server refused the prompt's token ids request (HTTP {status}: {_message(answer)})"
    choices = answer.get("choices") if isinstance(answer, dict) else None
    ids = answer.get("prompt_token_ids") if isinstance(answer, dict) else None
    if ids is None and isinstance(choices, list) and choices and isinstance(choices[0], dict):
        ids = choices[0].get("prompt_token_ids")
    if not isinstance(ids, list) or not ids or not all(type(t) is int for t in ids):
        return None, "the AR server returned no prompt token ids (return_token_ids)"
    return ids, None


def top_logprobs(answer: Any) -> tuple[dict[int, float] | None, str | None]:
    """Token id -> log-probability at the one generated position of a completion's ``logprobs`` (tokens named
    ``token_id:N``), or ``(None, why)``."""
    try:
        first = answer["choices"][0]["logprobs"]["top_logprobs"][0]
    except (KeyError, IndexError, TypeError):
        return None, "the AR server's answer carries no top_logprobs"
    if not isinstance(first, dict) or not first:
        return None, "the AR server's answer carries no top_logprobs"
    out: dict[int, float] = {}
    for name, lp in first.items():
        head, _, tail = str(name).partition("token_id:")
        if head or not tail.isdigit() or not isinstance(lp, int | float):
            return None, f"the AR server names tokens as text ({name!r}), not token_id:N"
        out[int(tail)] = float(lp)
    return out, None


async def _post(session: aiohttp.ClientSession, url: str, lg: LoadGenConfig, body: dict) -> tuple[int, Any]:
    async with session.post(url, data=json.dumps(body), headers={**lg.headers(url), "Accept": "application/json"}
                            ) as resp:  # fmt: skip
        text = await resp.text(errors="replace")
    with contextlib.suppress(ValueError):
        return resp.status, json.loads(text)
    return resp.status, text


def _message(answer: Any) -> str:
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        return str(answer["error"].get("message"))[:200]
    return str(answer)[:200]


# -- what the probe reads from the run --------------------------------------------------------------------------------
def requests_by_id(ctx: SweepContext) -> dict[str, Request]:
    """Every request the run's points sent, by id (a prompt reused to fill the streams is ``<id>~k``)."""
    out: dict[str, Request] = {}
    for point in ctx.grid:
        if point.method is Method.AR:
            with contextlib.suppress(AssertionError, KeyError, ValueError):
                out.update((r.id, r) for r in ctx.requests_for(point))
    return out


def _ar_records(requests, todo: Sequence[lossless.Pair]) -> dict[tuple, dict]:
    """AR's measured records that the probes read (their token ids; a conversation's earlier answers), by
    ``(point_id, request_id, turn, round, occurrence)``."""
    wanted = {(p.ar_point_id, p.request_id) for p in todo}
    out: dict[tuple, dict] = {}
    seen: dict[tuple, int] = {}
    if requests.empty:
        return out
    for r in requests.to_dict("records"):
        if r.get("warmup") is True or r.get("ok") is not True or (str(r.get("point_id")), str(r.get("request_id"))) \
                not in wanted:  # fmt: skip
            continue
        rid, turn = request_key(r)
        key = (str(r.get("point_id")), rid, turn, int(_number(r.get("repeat")) or 0))
        n = seen[key] = seen.get(key, -1) + 1
        out[(*key, n)] = r
    return out
