"""AR, DFlash, EAGLE-3 and n-gram decoding: draft a block, verify it in one target pass, accept, commit. Lossless.

One loop serves everything: :meth:`DecodeBatch.step` advances every in-flight row by one verification step.
A single stream is a batch of one (:func:`decode_steps`); the serving engine adds and removes rows between
steps (continuous batching); AR decoding is the same loop with a block of one (:class:`NullDrafter`).

Greedy: the target's argmax at every verified position; sampling: the target token is *sampled*, and a draft
token is accepted iff it equals the sampled target token. Every emitted token is therefore a token the target
itself chose at that position given the tokens before it, so greedy DFlash output is the greedy AR output and
sampled output follows the target's distribution. Drafts are always greedy. A drafter may propose fewer than K-1
tokens for a row (n-gram drafting finds no match): it ends the row's drafts with a negative id, which no target token
equals, so acceptance stops there; the block is as wide as the longest row's drafts.

The draft length can be less than the drafter's (``DecodeBatch(draft_len=...)``: K by batch size, a fixed K or a
schedule, :mod:`~dflashbench.reference.draft_length`): each step verifies only the first K proposals, which is still
lossless (fewer drafts only mean fewer chances to accept). A drafter that can draft fewer takes the limit
(``propose(..., limit=K)``: EAGLE-3 runs K chain passes, n-gram copies K tokens); a DFlash drafter drafts its whole
block in one pass whatever K is, and the loop verifies its first K.

Why this is exact, and not a shortcut of speculative sampling's rule (accept draft ``x`` with probability
``min(1, p(x)/q(x))``, else resample from ``max(0, p - q)``): a greedy draft is one-hot, ``q(x) = 1``, so the
rule accepts ``x`` with probability ``p(x)``, which is what "the sampled target token equals ``x``" has; on a
rejection the residual ``max(0, p - q)`` is ``p`` without ``x``, which is what the sampled token (known not to
be ``x``) already follows. Nothing is left to resample.

No timing, I/O or printing here: callers time the loop from the outside.

:data:`FAULTS` are deliberate bugs for tests of the harness's quality checks (``dflashbench serve
--test-fault``, hidden): ``accept-extra-draft`` accepts one draft token past the first one the target
disagrees with - an off-by-one in the acceptance rule, so the output is no longer the target's.

:class:`Planted` holds two more, for the lossless check's tests (``dflashbench serve --test-near-tie-nats X`` and
``--test-loose-verify-topk K``, hidden; never a default): in the verify pass, a *near-tie flip* commits the target's
runner-up wherever its top-1 leads it by less than ``X`` nats (what a floating-point difference between two kernel
paths does to a near-tie, planted), and a *loose verifier* accepts a draft token whenever it is among the target's
top ``K``, whatever its margin (a lossy verifier, planted). Neither touches the prefill's first token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

from dflashbench.reference.dflash.drafter import DFlashDrafter
from dflashbench.reference.dflash.network import DFlashDraftModel
from dflashbench.reference.drafters import Drafter, NullDrafter
from dflashbench.reference.sampling import sample
from dflashbench.reference.target import Target, TargetKV

FAULTS = ("accept-extra-draft",)


@dataclass(frozen=True)
class Planted:
    """Test-only changes to the verify pass (module docstring); the default plants nothing."""

    near_tie_nats: float = 0.0  # greedy rows: commit the runner-up where top-1 leads it by less than this
    loose_topk: int = 0  # accept a draft token whenever it is among the target's top-k (0, 1: the exact rule)

    def __post_init__(self) -> None:
        if not self.near_tie_nats >= 0 or self.loose_topk < 0:
            raise ValueError(f"planted switches must be >= 0, got {self}")

    @property
    def any(self) -> bool:
        return self.near_tie_nats > 0 or self.loose_topk > 1

    def describe(self) -> str:
        """What is planted, in words (the server's log says it at start)."""
        parts = []
        if self.near_tie_nats > 0:
            parts.append(f"near-tie flip: the target's runner-up is committed wherever its top-1 leads by less than "
                         f"{self.near_tie_nats:g} nats")
        if self.loose_topk > 1:
            parts.append(f"loose verifier: a draft token is accepted whenever it is among the target's top "
                         f"{self.loose_topk}")
        return "; ".join(parts)


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 0.0
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None


@dataclass
class StepOutput:
    """What one row committed in one step. The prefill's first token is a step with ``verified=False``."""

    row: Row
    token_ids: list[int]
    drafted: int  # draft tokens verified (K-1; 0 for AR and for the prefill token)
    accepted: int  # how many of them were accepted
    verified: bool
    finish_reason: str | None  # "stop" | "length" | None (still running)


@dataclass(eq=False)
class Row:
    """One request in flight."""

    prompt_len: int
    params: SamplingParams
    generator: torch.Generator | None
    anchor: int = -1  # last committed token: the next block's slot 0; not yet in the target's cache
    start: int = 0  # the anchor's position
    context: torch.Tensor | None = None  # target features of tokens committed since the last draft [Tc, n*H]
    produced: int = 0
    finish_reason: str | None = None
    tag: object = None  # caller's handle (the engine's request)

    def emit(self, tokens: list[int], drafted: int, accepted: int, verified: bool) -> StepOutput:
        """Cut at the token budget, then after the first stop token (kept), and record the step."""
        tokens = tokens[: self.params.max_new_tokens - self.produced]
        for i, t in enumerate(tokens):
            if t in self.params.stop_token_ids:
                tokens, self.finish_reason = tokens[: i + 1], "stop"
                break
        self.produced += len(tokens)
        if self.finish_reason is None and self.produced >= self.params.max_new_tokens:
            self.finish_reason = "length"
        return StepOutput(self, tokens, drafted, accepted, verified, self.finish_reason)


def accepted_prefix_len(drafts: torch.Tensor, target_tokens: torch.Tensor) -> torch.Tensor:
    """drafts ``[B, K-1]``, target tokens at the same positions ``[B, K-1]`` -> longest matching prefix ``[B]``."""
    return (drafts == target_tokens).long().cumprod(dim=1).sum(dim=1)


def flip_near_ties(logits: torch.Tensor, chosen: torch.Tensor, temperature: torch.Tensor, nats: float) -> torch.Tensor:
    """``chosen`` with the runner-up wherever a greedy row's top-1 logit leads it by less than ``nats`` (a gap of
    logits is the gap of log-probabilities). Tests only (:class:`Planted`)."""
    top = logits.float().topk(2, dim=-1)  # values, indices [B, K, 2]
    flip = ((top.values[..., 0] - top.values[..., 1]) < nats) & (temperature == 0)[:, None]
    return torch.where(flip, top.indices[..., 1], chosen)


def accepted_in_topk_len(drafts: torch.Tensor, logits: torch.Tensor, k: int) -> torch.Tensor:
    """drafts ``[B, K-1]``, the target's logits at the same positions ``[B, K-1, V]`` -> the longest prefix of drafts
    each among the target's top ``k`` ``[B]``. A lossy rule, for tests only (:class:`Planted`)."""
    top = logits.topk(min(k, logits.shape[-1]), dim=-1).indices  # [B, K-1, k]
    hit = (top == drafts[..., None]).any(-1) & (drafts >= 0)
    return hit.long().cumprod(dim=1).sum(dim=1)


class DecodeBatch:
    """The rows decoded together, with the target's KV cache and the drafter's state for all of them."""

    def __init__(self, target: Target, drafter: Drafter | None = None, fault: str | None = None,
                 planted: Planted | None = None, draft_len: Callable[[int], int] | None = None):  # fmt: skip
        """``planted``: test-only faults (:class:`Planted`). ``draft_len``: batch size -> draft tokens to verify at
        a step (at most the drafter's block size - 1); ``None``: every proposal the drafter makes."""
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose one of: {', '.join(FAULTS)}")
        self.target, self.drafter, self.fault = target, drafter or NullDrafter(), fault
        self.planted = planted or Planted()
        self.draft_len = draft_len
        self.kv = TargetKV(target)
        self.draft_state = None
        self.rows: list[Row] = []

    @property
    def block_size(self) -> int:
        return self.drafter.block_size

    def add(self, prompt_ids: Sequence[int], params: SamplingParams, tag: object = None) -> StepOutput:
        """Prefill one new request, sample its first token, and merge it into the batch."""
        return self.add_many([(prompt_ids, params, tag)])[0]

    @torch.no_grad()
    def add_many(self, requests: Sequence[tuple[Sequence[int], SamplingParams, object]]) -> list[StepOutput]:
        """Prefill new requests ``(prompt_ids, params, tag)`` together in one target pass, sample each one's
        first token, and merge the unfinished ones into the batch (which is only touched once all succeeded)."""
        if not requests or not all(prompt for prompt, _, _ in requests):
            raise ValueError("empty prompt")
        dev = self.target.device
        rows = []
        for prompt, params, tag in requests:
            gen = torch.Generator(device=dev).manual_seed(params.seed) if params.seed is not None else None
            rows.append(Row(len(prompt), params, gen, start=len(prompt), tag=tag))
        kv = TargetKV(self.target)
        logits, feats = kv.prefill([prompt for prompt, _, _ in requests], self.drafter.layer_ids)  # [N, 1, V]
        temps = torch.tensor([r.params.temperature for r in rows], device=dev)
        firsts = sample(logits, temps, [r.generator for r in rows])[:, -1]  # [N]
        outs, live, states = [], [], []
        for i, (row, (prompt, _, _)) in enumerate(zip(rows, requests, strict=True)):
            row.anchor = int(firsts[i])
            outs.append(row.emit([row.anchor], drafted=0, accepted=0, verified=False))
            if row.finish_reason is None:
                live.append(i)
                states.append(self.drafter.start(prompt, None if feats is None else feats[i : i + 1, : len(prompt)]))
        if live:
            if len(live) < len(rows):
                kv.select(torch.tensor(live, dtype=torch.long, device=dev))
            self._join(kv, states, [rows[i] for i in live])
        return outs

    def _join(self, kv: TargetKV, states: Sequence, rows: Sequence[Row]) -> None:
        """Merge prefilled rows (their target cache rows and drafter states, in order) into the batch."""
        self.kv.extend(kv)
        for state in states:
            if self.draft_state is None:
                self.draft_state = state
            else:
                self.draft_state.extend(state)
        self.rows += rows

    @torch.no_grad()
    def add_copies(self, prompt_ids: Sequence[int], params: SamplingParams, n: int,
                   generator: torch.Generator | None = None) -> list[StepOutput]:
        """``n`` independent samples of one prompt: one prefill, its cache replicated ``n`` times, every
        row drawing from the shared ``generator`` (OpenAI's ``n``; also how tests draw many samples fast)."""
        dev = self.target.device
        kv = TargetKV(self.target)
        logits, feats = kv.prefill([prompt_ids], self.drafter.layer_ids)  # [1, 1, V], [1, P, n*H]
        firsts = sample(logits.expand(n, -1, -1), torch.full((n,), params.temperature, device=dev), generator)
        copies = torch.zeros(n, dtype=torch.long, device=dev)
        kv.select(copies)
        state = self.drafter.start(prompt_ids, feats)
        state.select(copies)
        rows = [Row(len(prompt_ids), params, generator, anchor=int(t), start=len(prompt_ids)) for t in firsts[:, 0]]
        outs = [row.emit([row.anchor], drafted=0, accepted=0, verified=False) for row in rows]
        self._join(kv, [state], rows)
        self.remove([r for r in rows if r.finish_reason is not None])
        return outs

    @torch.no_grad()
    def step(self) -> list[StepOutput]:
        """One verification step for every row: draft, verify, accept, commit."""
        rows, K, dev = self.rows, self.block_size, self.target.device
        anchors = torch.tensor([r.anchor for r in rows], device=dev)  # [B]
        starts = torch.tensor([r.start for r in rows], device=dev)  # [B]
        ctx, ctx_len = _pad_context([r.context for r in rows], dev)  # [B, Tc, n*H] | None, [B]
        # 1. draft: up to K-1 tokens after each anchor, in one pass of the drafter (a negative id: no more drafts)
        limit = self.step_draft_len(len(rows))
        if limit is None:
            drafts = self.drafter.propose(self.draft_state, anchors, starts, ctx, ctx_len)  # [B, K-1]
        else:  # verify only the first `limit`: the drafter drafts no more than that where it can
            drafts = self.drafter.propose(self.draft_state, anchors, starts, ctx, ctx_len, limit=limit)[:, :limit]
        drafted = (drafts >= 0).long().cumprod(dim=1).sum(dim=1)  # [B] each row's drafts
        K = 1 + (int(drafted.max()) if len(rows) else 0)
        drafts = drafts[:, : K - 1]
        block = torch.cat([anchors[:, None], drafts.clamp(min=0)], dim=1)  # [B, K]
        # 2. verify: one target pass over the whole block; the target's own choice at every position
        logits, feats = self.kv.forward(block, self.drafter.layer_ids)  # [B, K, V], [B, K, n*H] | None
        temps = torch.tensor([r.params.temperature for r in rows], device=dev)
        gens = [r.generator for r in rows]
        shared = all(g is gens[0] for g in gens)  # one generator for all rows: sample them in one call
        chosen = sample(logits, temps, gens[0] if shared else gens)  # [B, K]
        if self.planted.near_tie_nats > 0:  # tests only: a near-tie flipped, as another kernel path may
            chosen = flip_near_ties(logits, chosen, temps, self.planted.near_tie_nats)
        # 3. accept: the longest prefix of drafts the target agrees with; its next choice is the bonus token.
        # Exact under sampling too: greedy drafts are one-hot, so min(1, p/q) = p(draft) (module docstring)
        acc = accepted_prefix_len(drafts, chosen[:, :-1])  # [B]; a negative id (no draft) is never accepted
        if self.fault == "accept-extra-draft":  # a planted bug (tests only): one rejected draft slips through
            acc = torch.minimum(acc + 1, drafted)
        if self.planted.loose_topk > 1:  # tests only: a lossy verifier, any draft among the target's top-k accepted
            acc = accepted_in_topk_len(drafts, logits[:, :-1], self.planted.loose_topk)
        bonus = chosen.gather(1, acc[:, None])[:, 0]  # [B]
        # 4. commit: anchor + accepted drafts enter the target cache; the bonus becomes the next anchor
        self.kv.commit(acc + 1)
        outs = []
        for i, (row, a) in enumerate(zip(rows, acc.tolist(), strict=True)):
            row.anchor, row.start = int(bonus[i]), row.start + a + 1
            row.context = feats[i, : a + 1] if feats is not None else None
            outs.append(row.emit(block[i, 1 : a + 1].tolist() + [row.anchor], int(drafted[i]), a, verified=True))
        self.remove([o.row for o in outs if o.finish_reason is not None])
        return outs

    def step_draft_len(self, batch_size: int) -> int | None:
        """Draft tokens a step of ``batch_size`` rows verifies: ``draft_len``'s, within the drafter's block; ``None``
        without a ``draft_len`` (as many as the drafter proposes)."""
        if self.draft_len is None:
            return None
        return max(0, min(int(self.draft_len(batch_size)), self.block_size - 1))

    def remove(self, rows: Sequence[Row]) -> None:
        """Drop rows (finished or cancelled) from the batch."""
        if not rows:
            return
        gone = {id(r) for r in rows}
        keep = torch.tensor([i for i, r in enumerate(self.rows) if id(r) not in gone], dtype=torch.long,
                            device=self.target.device)
        self.rows = [r for r in self.rows if id(r) not in gone]
        self.kv.select(keep)
        if self.draft_state is not None:
            self.draft_state.select(keep)
        if not self.rows:
            self.draft_state = None


def _pad_context(contexts: Sequence[torch.Tensor | None], dev) -> tuple[torch.Tensor | None, torch.Tensor]:
    lengths = torch.tensor([0 if c is None else c.shape[0] for c in contexts], dtype=torch.long, device=dev)
    present = [c for c in contexts if c is not None]
    if not present:
        return None, lengths
    width, like = int(lengths.max()), present[0]
    out = like.new_zeros(len(contexts), width, like.shape[-1])
    for i, c in enumerate(contexts):
        if c is not None:
            out[i, : c.shape[0]] = c
    return out, lengths


# ------------------------------------------------------------------------------------------- single stream


@dataclass
class Generation:
    """One finished generation with its acceptance statistics.

    Two averages, equal wherever every step drafts (DFlash, EAGLE-3) and apart where some steps draft nothing (n-gram
    drafting that found no match): :attr:`tau` counts the steps that drafted, as vLLM's counters and the reference
    server's ``/metrics`` and per-request ``spec_decode`` do; :attr:`tokens_per_step` counts every verification
    step, what each target pass delivered."""

    token_ids: list[int]
    accept_lengths: list[int] = field(default_factory=list)  # per verification step, bonus included
    finish_reason: str = "length"
    block_size: int = 1
    drafted: list[int] = field(default_factory=list)  # per verification step: draft tokens verified (0: none)

    @property
    def num_steps(self) -> int:
        return len(self.accept_lengths)

    @property
    def num_drafts(self) -> int:
        """Verification steps that drafted (vLLM's ``spec_decode_num_drafts``)."""
        return sum(1 for d in self.drafted if d)

    @property
    def tau(self) -> float:
        """1 + accepted drafts / steps that drafted (vLLM's rule, bonus included); 1.0 where no step drafted (AR).
        The prefill token is not counted."""
        if not self.accept_lengths:
            return float("nan")
        drafting = [n for n, d in zip(self.accept_lengths, self.drafted, strict=True) if d]
        return 1.0 + sum(n - 1 for n in drafting) / len(drafting) if drafting else 1.0

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens committed per verification step, every step counted (bonus included; AR = 1)."""
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else float("nan")

    @property
    def histogram(self) -> list[int]:
        """``histogram[n]``: steps that committed ``n`` tokens, ``n`` in ``0..block_size``."""
        counts = [0] * (self.block_size + 1)
        for n in self.accept_lengths:
            counts[n] += 1
        return counts


def decode_steps(target: Target, drafter: Drafter | None, prompt_ids: Sequence[int], params: SamplingParams,
                 draft_len: Callable[[int], int] | None = None) -> Iterator[StepOutput]:  # fmt: skip
    """Yield the committed tokens of the prefill, then of each verification step, until the request ends."""
    batch = DecodeBatch(target, drafter, draft_len=draft_len)
    yield batch.add(prompt_ids, params)
    while batch.rows:
        yield from batch.step()


def generate(target: Target, drafter: Drafter | None, prompt_ids: Sequence[int], params: SamplingParams,
             draft_len: Callable[[int], int] | None = None) -> Generation:  # fmt: skip
    gen = Generation([], block_size=(drafter or NullDrafter()).block_size)
    for out in decode_steps(target, drafter, prompt_ids, params, draft_len):
        gen.token_ids += out.token_ids
        if out.verified:
            gen.accept_lengths.append(out.accepted + 1)
            gen.drafted.append(out.drafted)
        gen.finish_reason = out.finish_reason or gen.finish_reason
    return gen


def ar_decode(target: Target, prompt_ids: Sequence[int], *, max_new_tokens: int, temperature: float = 0.0,
              stop_token_ids: Sequence[int] = (), seed: int | None = None) -> Generation:
    """Autoregressive decoding: one target step per token (tau = 1)."""
    params = SamplingParams(max_new_tokens, temperature, tuple(stop_token_ids), seed)
    return generate(target, NullDrafter(), prompt_ids, params)


def dflash_decode(target: Target, draft: DFlashDraftModel | object, prompt_ids: Sequence[int], *,
                  max_new_tokens: int, temperature: float = 0.0, stop_token_ids: Sequence[int] = (),
                  seed: int | None = None) -> Generation:
    """DFlash decoding with a draft network (or any drafter object)."""
    drafter = DFlashDrafter(draft, target) if isinstance(draft, DFlashDraftModel) else draft
    params = SamplingParams(max_new_tokens, temperature, tuple(stop_token_ids), seed)
    return generate(target, drafter, prompt_ids, params)
