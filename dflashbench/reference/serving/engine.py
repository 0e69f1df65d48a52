"""The engine behind ``dflashbench serve``: continuous batching over the reference decoder.

All in-flight requests are decoded together (:class:`~dflashbench.reference.decode.DecodeBatch`); requests
join between steps (those admitted together are prefilled together, in one target pass, then merged) and
leave when they finish or are cancelled.
At most ``max_batch_size`` requests run at once and, with ``max_kv_tokens``, the sum over running requests of
``prompt + max_new_tokens + block_size`` (the most KV a request can hold) stays within the budget; the rest
wait in a FIFO queue, and each request's first :class:`EngineStep` reports how long it waited (``queue_s``).

Decoding runs in one worker thread, so the event loop stays responsive; each verification step's committed
tokens are streamed to the request's async iterator as soon as the step ends. The target's top log-probabilities of
a token sequence (:meth:`ReferenceEngine.top_logprobs`, what ``/v1/completions`` answers ``logprobs`` from) are
computed on that same thread, between two steps, so no two target passes ever run at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from dflashbench.errors import UserError


@dataclass(frozen=True)
class EngineStep:
    """Tokens one verification step committed for one request (the first step is the prefill's token)."""

    token_ids: list[int]
    drafted: int  # draft tokens verified in this step (0 for AR and for the prefill token)
    accepted: int  # of which accepted
    queue_s: float | None = None  # seconds the request waited for a batch slot; first step only
    finish_reason: str | None = None  # "stop" | "length" on the request's last step


@dataclass
class EngineCounters:
    """Cumulative speculative-decoding counters (vLLM's meaning: tau = 1 + accepted / drafts)."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    num_requests: int = 0
    num_prompt_tokens: int = 0
    num_generation_tokens: int = 0
    queue_s_total: float = 0.0
    # verification steps by (batch size, draft tokens verified): what a draft-length schedule did
    steps_by_draft_len: dict[tuple[int, int], int] = field(default_factory=dict)

    def copy(self) -> EngineCounters:
        return replace(self, accepted_per_pos=list(self.accepted_per_pos), steps_by_draft_len=dict(self.steps_by_draft_len))


@dataclass(eq=False)
class _Request:
    prompt_ids: list[int]
    params: object  # SamplingParams
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    submitted: float
    cancelled: bool = False
    reserve: int = 0

    def deliver(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the request's event loop is gone
            self.cancelled = True


class EngineClosed(RuntimeError):
    pass


@dataclass(frozen=True)
class TokenLogprobs:
    """The target's log-probabilities at one position: of the token that was there, and the top ``k``."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, log-probability), the most likely first


def _settle(future: asyncio.Future, value) -> None:
    """Resolve ``future`` with ``value`` (an exception is raised there), unless its caller has gone."""
    if future.done():
        return
    if isinstance(value, BaseException):
        future.set_exception(value)
    else:
        future.set_result(value)


def pick_decode_cpu(device: str, threads: int, allowed: set[int]) -> int | None:
    """The core to give the decode thread to itself, or ``None``. Only for CPU decoding on one torch thread
    with at least one other core left over: there the HTTP loop and a load generator on the same machine
    would otherwise preempt the decode thread mid-step, slowing every request in the batch. The last allowed
    core, as core 0 is where most other work lands."""
    if not str(device).startswith("cpu") or threads != 1 or len(allowed) < 2:
        return None
    return max(allowed)


def check_draft_schedule(schedule, method: str, block_size: int):
    """``schedule`` (a :class:`~dflashbench.reference.draft_length.DraftSchedule`) if the drafter can honour it,
    else a :class:`UserError`: AR drafts nothing, and no K may exceed the drafter's block size - 1 (DFlash: its
    block of masks; EAGLE-3 and n-gram are built for the schedule's longest K)."""
    if schedule is None:
        return None
    if method == "ar":
        raise UserError("method ar drafts nothing: it takes no draft length")
    if schedule.max_k > block_size - 1:
        raise UserError(f"the {method} drafter drafts at most {block_size - 1} tokens per step (block size {block_size}): "
                        f"draft length {schedule.max_k} cannot be honoured; give K <= {block_size - 1}")  # fmt: skip
    return schedule


def _slowdown_factor(stretch: float) -> float:
    if stretch < 1.0:
        raise UserError(f"the step stretch is a slowdown factor of 1 or more, not {stretch:g}")
    return stretch


class ReferenceEngine:
    """AR or DFlash decoding of many concurrent requests on one target (and drafter)."""

    def __init__(self, model_dir, draft_dir=None, method: str = "dflash", *, device: str = "cpu", dtype=None,
                 max_batch_size: int = 8, max_kv_tokens: int | None = None, target=None, drafter=None,
                 decode_cpu: int | None = None, fault: str | None = None, step_delay_s: float = 0.0,
                 step_delay_per_request_s: float = 0.0, planted=None, draft_schedule=None, step_stretch: float = 1.0):
        from dflashbench.reference.dflash.checkpoint import check_draft_fits, load_draft
        from dflashbench.reference.dflash.drafter import DFlashDrafter
        from dflashbench.reference.drafters import NullDrafter
        from dflashbench.reference.target import load_target

        if method not in ("ar", "dflash", "eagle3", "ngram"):
            raise UserError(f"the reference engine runs methods ar, dflash, eagle3 and ngram, not {method!r}")
        if max_batch_size < 1:
            raise UserError("max_batch_size must be at least 1")
        self.method = method
        self.target = target if target is not None else load_target(model_dir, device=device, dtype=dtype)
        self.tokenizer = self.target.tokenizer
        self.model_name = Path(str(model_dir)).name if model_dir is not None else "reference"
        if drafter is not None:
            self.drafter = drafter
        elif method == "dflash":
            if draft_dir is None:
                raise UserError("method dflash needs a drafter: pass --draft DIR")
            draft = load_draft(draft_dir, device=self.target.device, dtype=self.target.dtype)
            check_draft_fits(draft.config, self.target)
            self.drafter = DFlashDrafter(draft, self.target)
        elif method == "eagle3":
            if draft_dir is None:
                raise UserError("method eagle3 needs an EAGLE-3 head: pass --draft DIR")
            from dflashbench.reference.eagle3.drafter import load_eagle3_drafter

            # the chain drafts the schedule's longest K (each step's limit shortens it); unset, the head's own
            chain = max(draft_schedule.max_k, 1) if draft_schedule is not None else None
            self.drafter = load_eagle3_drafter(draft_dir, self.target, chain)
        elif method == "ngram":
            from dflashbench.reference.ngram import NgramDrafter

            self.drafter = NgramDrafter()
        else:
            self.drafter = NullDrafter()
        self.block_size = self.drafter.block_size
        self.draft_schedule = check_draft_schedule(draft_schedule, method, self.block_size)
        self.max_batch_size = max_batch_size
        self.max_kv_tokens = max_kv_tokens
        self.decode_cpu = decode_cpu  # the core the decode thread is pinned to (None: wherever the OS puts it)
        self.fault = fault  # a deliberate decoding bug, for tests only (decode.FAULTS)
        self.planted = planted  # tests only: a near-tie flip or a loose verifier in the verify pass (decode.Planted)
        self.step_delay_s = step_delay_s  # tests only: a slower server (the regression gate must see it)
        # tests only: a step that costs more the more requests it decodes (a method that stops paying above some
        # concurrency, for the crossover's tests)
        self.step_delay_per_request_s = step_delay_per_request_s
        # tests only: every step (prefill and decode) takes this many times its own time, so every method served this
        # way slows by the same factor (a run-level shift planted, as a slower machine would make it)
        self.step_stretch = _slowdown_factor(step_stretch)
        self.default_stop_ids = tuple(self.target.stop_token_ids())
        self._counters = EngineCounters(accepted_per_pos=[0] * (self.block_size - 1))
        self._lock = threading.Condition()
        self._pending: collections.deque[_Request] = collections.deque()
        self._jobs: collections.deque = collections.deque()  # (work, loop, future): run on the worker between steps
        self._closed = False
        self._thread = threading.Thread(target=self._worker, name="reference-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------------------ async API

    async def generate(self, prompt_ids: Sequence[int], *, max_new_tokens: int, temperature: float = 0.0,
                       stop_token_ids: Sequence[int] | None = None, seed: int | None = None,
                       ) -> AsyncIterator[EngineStep]:
        """Stream one request's steps. ``stop_token_ids=None`` stops at the target's end-of-sequence ids."""
        from dflashbench.reference.decode import SamplingParams

        if not prompt_ids:
            raise ValueError("prompt is empty")
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        if temperature < 0:
            raise ValueError("temperature must be >= 0")
        stops = self.default_stop_ids if stop_token_ids is None else tuple(stop_token_ids)
        params = SamplingParams(int(max_new_tokens), float(temperature), stops, seed)
        req = _Request(list(prompt_ids), params, asyncio.get_running_loop(), asyncio.Queue(), time.perf_counter(),
                       reserve=len(prompt_ids) + int(max_new_tokens) + self.block_size)
        if self.max_kv_tokens is not None and req.reserve > self.max_kv_tokens:
            raise ValueError(f"prompt ({len(prompt_ids)}) + max_new_tokens ({max_new_tokens}) + block "
                             f"({self.block_size}) exceeds the KV budget of {self.max_kv_tokens} tokens")
        with self._lock:
            if self._closed:
                raise EngineClosed("engine is closed")
            self._pending.append(req)
            self._lock.notify()
        finished = False
        try:
            while True:
                item = await req.queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                yield item
                if item.finish_reason is not None:
                    finished = True
                    return
        finally:
            if not finished:
                with self._lock:
                    req.cancelled = True
                    self._lock.notify()

    async def top_logprobs(self, token_ids: Sequence[int], first: int, k: int) -> list[TokenLogprobs]:
        """The target's log-probabilities of ``token_ids[first:]``, each given the tokens before it, with the top
        ``k`` at each position: one teacher-forced pass of the target over the whole sequence (what vLLM's
        ``prompt_logprobs`` computes), run on the decode thread between two steps. Log-probabilities are the
        log-softmax of the logits in float32."""
        if not 1 <= first < len(token_ids) or k < 0:
            raise ValueError(f"need 1 <= first < {len(token_ids)} tokens and k >= 0, got first={first}, k={k}")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            if self._closed:
                raise EngineClosed("engine is closed")
            self._jobs.append((lambda: self._score(list(token_ids), first, k), loop, future))
            self._lock.notify()
        return await future

    def _score(self, ids: list[int], first: int, k: int) -> list[TokenLogprobs]:
        import torch

        with torch.no_grad():
            tokens = torch.tensor([ids], dtype=torch.long, device=self.target.device)
            logits = self.target.model(input_ids=tokens, use_cache=False).logits[0, first - 1 : len(ids) - 1]
            logprobs = logits.float().log_softmax(dim=-1)  # [n, V]
            chosen = logprobs.gather(1, tokens[0, first:, None])[:, 0].tolist()
            top = logprobs.topk(min(k, logprobs.shape[-1]), dim=-1) if k else None
        out = []
        for i, token in enumerate(ids[first:]):
            pairs = tuple(zip(top.indices[i].tolist(), top.values[i].tolist(), strict=True)) if top is not None else ()
            out.append(TokenLogprobs(token, chosen[i], pairs))
        return out

    def _run_jobs(self) -> None:
        """Run the queued :meth:`top_logprobs` work (on the worker thread), each answer to its caller's loop."""
        with self._lock:
            jobs = list(self._jobs)
            self._jobs.clear()
        for work, loop, future in jobs:
            try:
                value = work()
            except Exception as exc:  # noqa: BLE001 - the caller gets it; the engine keeps serving
                value = RuntimeError(f"scoring failed: {exc}")
            try:
                loop.call_soon_threadsafe(_settle, future, value)
            except RuntimeError:  # the caller's event loop is gone
                pass

    def counters(self) -> EngineCounters:
        with self._lock:
            return self._counters.copy()

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        await asyncio.to_thread(self._thread.join)

    # --------------------------------------------------------------------------------------------- worker

    def _worker(self) -> None:
        if self.decode_cpu is not None:
            os.sched_setaffinity(0, {self.decode_cpu})  # pid 0: this thread only
        batch = self._new_batch()
        while True:
            with self._lock:
                while not self._closed and not self._pending and not batch.rows and not self._jobs:
                    self._lock.wait()
                if self._closed:
                    break
                admitted = self._admit(batch)
                cancelled = [r for r in batch.rows if r.tag.cancelled]
            self._run_jobs()
            batch.remove(cancelled)
            if admitted:
                started = time.perf_counter()
                self._prefill(batch, admitted)
                self._stretch(time.perf_counter() - started)
            if batch.rows:
                rows = len(batch.rows)
                k = batch.step_draft_len(rows)
                try:
                    started = time.perf_counter()
                    outs = batch.step()
                    self._stretch(time.perf_counter() - started)
                except Exception as exc:  # the whole batch fails; the engine keeps serving
                    for row in batch.rows:
                        row.tag.deliver(RuntimeError(f"decoding failed: {exc}"))
                    batch = self._new_batch()
                    continue
                self._publish(outs, (rows, self.block_size - 1 if k is None else k))
                if self.step_delay_s or self.step_delay_per_request_s:
                    time.sleep(self.step_delay_s + self.step_delay_per_request_s * rows)
        for req in [*self._pending, *(r.tag for r in batch.rows)]:
            req.deliver(EngineClosed("engine closed"))
        with self._lock:
            jobs, self._jobs = list(self._jobs), collections.deque()
        for _work, loop, future in jobs:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, EngineClosed("engine closed"))

    def _stretch(self, step_s: float) -> None:
        if self.step_stretch > 1.0:
            time.sleep((self.step_stretch - 1.0) * step_s)

    def _new_batch(self):
        from dflashbench.reference.decode import DecodeBatch

        schedule = self.draft_schedule
        return DecodeBatch(self.target, self.drafter, self.fault, self.planted,
                           draft_len=schedule.k_at if schedule else None)  # fmt: skip

    def _admit(self, batch) -> list[_Request]:
        """Pop queued requests that fit (batch size, KV budget), FIFO. Caller holds the lock."""
        admitted: list[_Request] = []
        used = sum(r.tag.reserve for r in batch.rows)
        while self._pending and len(batch.rows) + len(admitted) < self.max_batch_size:
            req = self._pending[0]
            if req.cancelled:
                self._pending.popleft()
                continue
            if self.max_kv_tokens is not None and used + req.reserve > self.max_kv_tokens:
                break
            self._pending.popleft()
            admitted.append(req)
            used += req.reserve
        return admitted

    def _prefill(self, batch, reqs: list[_Request]) -> None:
        """Prefill everything admitted at once, in one target pass (requests that arrived during a step)."""
        now = time.perf_counter()
        try:
            outs = batch.add_many([(req.prompt_ids, req.params, req) for req in reqs])
        except Exception as exc:
            for req in reqs:
                req.deliver(RuntimeError(f"prefill failed: {exc}"))
            return
        with self._lock:
            c = self._counters
            for req, out in zip(reqs, outs, strict=True):
                c.num_requests += 1
                c.num_prompt_tokens += len(req.prompt_ids)
                c.num_generation_tokens += len(out.token_ids)
                c.queue_s_total += now - req.submitted
        for req, out in zip(reqs, outs, strict=True):
            req.deliver(EngineStep(out.token_ids, 0, 0, now - req.submitted, out.finish_reason))

    def _publish(self, outs, step: tuple[int, int]) -> None:
        """One step's outputs to their requests, and its counts (``step``: its batch size and draft tokens verified)."""
        with self._lock:
            c = self._counters
            if self.method != "ar":
                c.steps_by_draft_len[step] = c.steps_by_draft_len.get(step, 0) + 1
            for o in outs:
                c.num_generation_tokens += len(o.token_ids)
                if o.drafted:
                    c.num_drafts += 1
                    c.num_draft_tokens += o.drafted
                    c.num_accepted_tokens += o.accepted
                    for pos in range(o.accepted):
                        c.accepted_per_pos[pos] += 1
        for o in outs:
            o.row.tag.deliver(EngineStep(o.token_ids, o.drafted, o.accepted, None, o.finish_reason))
