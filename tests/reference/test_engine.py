"""ReferenceEngine: continuous batching stays lossless; batch size, KV budget, queueing, cancellation."""

import asyncio
import os

import pytest
import torch

from dflashbench.reference.decode import ar_decode
from dflashbench.reference.dflash.drafter import DFlashDrafter
from dflashbench.reference.drafters import NullDrafter
from dflashbench.reference.serving.engine import ReferenceEngine
from dflashbench.reference.tiny import tiny_draft, tiny_target

STOP = 1


@pytest.fixture(scope="module")
def target():
    return tiny_target("qwen3", seed=3, init_std=0.5)


def requests():
    g = torch.Generator().manual_seed(0)
    lengths, budgets = [3, 40, 12, 7, 90, 1], [30, 17, 45, 5, 60, 24]
    return [(torch.randint(5, 62, (n,), generator=g).tolist(), m) for n, m in zip(lengths, budgets, strict=True)]


def engine(target, method, block_size=6, **kw):
    drafter = DFlashDrafter(tiny_draft(target, block_size=block_size, seed=4), target) if method == "dflash" \
        else NullDrafter()
    return ReferenceEngine(None, method=method, target=target, drafter=drafter, **kw)


def single_stream(target, prompt, max_new):
    """What the request must stream under batching: its own greedy AR output."""
    return ar_decode(target, prompt, max_new_tokens=max_new, stop_token_ids=[STOP]).token_ids


def streamed(steps):
    return [t for s in steps for t in s.token_ids]


async def collect(eng, prompt, max_new, delay=0.0, **kw):
    await asyncio.sleep(delay)
    steps = [s async for s in eng.generate(prompt, max_new_tokens=max_new, stop_token_ids=[STOP], **kw)]
    return steps


@pytest.mark.parametrize("method", ["ar", "dflash"])
def test_concurrent_requests_equal_their_single_stream_output(target, method):
    reqs = requests()
    expected = [single_stream(target, p, m) for p, m in reqs]

    async def main():
        eng = engine(target, method, max_batch_size=4)
        # staggered arrivals: requests join and leave a running batch; 6 requests > 4 slots: some queue
        results = await asyncio.gather(*[collect(eng, p, m, delay=0.005 * i) for i, (p, m) in enumerate(reqs)])
        counters = eng.counters()
        await eng.close()
        return results, counters

    results, counters = asyncio.run(main())
    for steps, exp in zip(results, expected, strict=True):
        assert streamed(steps) == exp
        assert steps[0].queue_s is not None and all(s.queue_s is None for s in steps[1:])
        assert steps[-1].finish_reason in ("stop", "length")
    assert counters.num_requests == len(reqs)
    assert counters.num_generation_tokens == sum(len(e) for e in expected)
    if method == "dflash":
        steps = [s for r in results for s in r if s.drafted]
        assert counters.num_drafts == len(steps)
        assert counters.num_accepted_tokens == sum(s.accepted for s in steps)
        assert counters.accepted_per_pos[0] == sum(s.accepted >= 1 for s in steps)
    else:
        assert counters.num_drafts == 0


def test_requests_arriving_during_a_step_are_prefilled_in_one_pass(target, monkeypatch):
    from dflashbench.reference.target import TargetKV

    rows_per_prefill: list[int] = []
    prefill = TargetKV.prefill

    def counting(self, prompts, layer_ids=None):
        rows_per_prefill.append(len(prompts))
        return prefill(self, prompts, layer_ids)

    monkeypatch.setattr(TargetKV, "prefill", counting)
    reqs = requests()[:4]
    expected = [single_stream(target, p, m) for p, m in reqs]
    rows_per_prefill.clear()

    async def main():
        eng = engine(target, "dflash", max_batch_size=4)
        first = eng.generate(reqs[0][0], max_new_tokens=reqs[0][1], stop_token_ids=[STOP])
        head = [await anext(first)]  # the first request is running: the others arrive while it decodes
        rest = asyncio.gather(*[collect(eng, p, m) for p, m in reqs[1:]])
        head += [s async for s in first]
        results = [head, *await rest]
        await eng.close()
        return results

    results = asyncio.run(main())
    assert [streamed(r) for r in results] == expected
    assert sum(rows_per_prefill) == 4 and max(rows_per_prefill) >= 2, rows_per_prefill


def test_batch_size_one_queues_and_reports_waiting_time(target):
    reqs = requests()[:3]

    async def main():
        eng = engine(target, "ar", max_batch_size=1)
        results = await asyncio.gather(*[collect(eng, p, m) for p, m in reqs])
        await eng.close()
        return results

    results = asyncio.run(main())
    waits = sorted(r[0].queue_s for r in results)
    # one slot: the second and third requests waited for the ones before them to finish
    assert waits[1] > 0.01 and waits[2] > waits[1]


def test_kv_budget_limits_concurrency_and_rejects_oversized_requests(target):
    async def main():
        eng = engine(target, "dflash", max_batch_size=8, max_kv_tokens=60)
        async def watch(p, m):
            return [s async for s in eng.generate(p, max_new_tokens=m, stop_token_ids=[])]

        # each reserves 10 + 20 + 6 = 36 tokens: only one fits the 60-token budget at a time
        results = await asyncio.gather(*[watch(list(range(5, 15)), 20) for _ in range(3)])
        with pytest.raises(ValueError, match="KV budget"):
            async for _ in eng.generate(list(range(5, 50)), max_new_tokens=20):
                pass
        await eng.close()
        return results

    results = asyncio.run(main())
    waits = sorted(r[0].queue_s for r in results)
    assert waits[1] > 0.01 and waits[2] > waits[1]
    assert all(sum(len(s.token_ids) for s in r) == 20 for r in results)


def test_cancelled_request_leaves_the_batch_and_others_are_unaffected(target):
    (p1, _), (p2, _) = requests()[1:3]
    expected = single_stream(target, p2, 40)

    async def main():
        eng = engine(target, "dflash", max_batch_size=4)

        async def cancel_early():
            n = 0
            stream = eng.generate(p1, max_new_tokens=200, stop_token_ids=[])
            async for _ in stream:
                n += 1
                if n == 3:
                    break  # client went away
            await stream.aclose()
            return n

        other = asyncio.create_task(collect(eng, p2, 40, delay=0.0))
        n = await cancel_early()
        steps = await other
        await asyncio.sleep(0.05)
        counters = eng.counters()
        await eng.close()
        return n, steps, counters

    n, steps, counters = asyncio.run(main())
    assert n == 3
    assert streamed(steps) == expected
    assert counters.num_generation_tokens < len(expected) + 100  # the cancelled one (200 asked) stopped early


def test_bad_arguments(target):
    async def main():
        eng = engine(target, "ar")
        for kwargs, match in (({"max_new_tokens": 0}, "max_new_tokens"),
                              ({"max_new_tokens": 4, "temperature": -1.0}, "temperature")):
            with pytest.raises(ValueError, match=match):
                async for _ in eng.generate([5, 6], **kwargs):
                    pass
        with pytest.raises(ValueError, match="empty"):
            async for _ in eng.generate([], max_new_tokens=3):
                pass
        await eng.close()

    asyncio.run(main())


def test_decode_cpu_is_picked_only_when_a_core_is_left_for_the_rest():
    from dflashbench.reference.serving.engine import pick_decode_cpu

    assert pick_decode_cpu("cpu", 1, {0, 1}) == 1
    assert pick_decode_cpu("cpu", 1, {2, 5, 7}) == 7
    assert pick_decode_cpu("cpu", 1, {0}) is None  # one core: nothing to spare
    assert pick_decode_cpu("cpu", 2, {0, 1, 2, 3}) is None  # torch's own worker threads would share the core
    assert pick_decode_cpu("cuda", 1, {0, 1}) is None


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and 2+ cores")
def test_engine_pins_its_decode_thread_and_still_decodes(target):
    core = max(os.sched_getaffinity(0))
    prompt, budget = requests()[2]
    expected = single_stream(target, prompt, budget)

    async def main():
        eng = engine(target, "dflash", decode_cpu=core)
        steps = await collect(eng, prompt, budget)
        affinity = os.sched_getaffinity(eng._thread.native_id)
        await eng.close()
        return steps, affinity

    steps, affinity = asyncio.run(main())
    assert affinity == {core}
    assert os.sched_getaffinity(0) != {core}  # only the decode thread was pinned
    assert streamed(steps) == expected


@pytest.mark.parametrize("method", ["ar", "dflash"])
def test_a_step_stretch_slows_every_step_by_its_factor_and_keeps_the_output(target, method, monkeypatch):
    """The planted run-level shift of issue #62 (`--test-step-stretch`): after each prefill and decode step the engine
    sleeps (F - 1) x that step's own time, so any method served this way runs F times slower, its output unchanged."""

    from dflashbench.errors import UserError
    from dflashbench.reference.serving import engine as engine_module

    slept, steps = [], []
    real_step = engine_module.ReferenceEngine._stretch

    def record(self, step_s):
        steps.append(step_s)
        real_step(self, step_s)

    monkeypatch.setattr(engine_module.ReferenceEngine, "_stretch", record)
    monkeypatch.setattr(engine_module.time, "sleep", lambda s: slept.append(s))
    prompt, max_new = requests()[1]

    async def main():
        eng = engine(target, method, step_stretch=2.5)
        out = await collect(eng, prompt, max_new)
        await eng.close()
        return out

    assert streamed(asyncio.run(main())) == single_stream(target, prompt, max_new)
    assert len(steps) >= 2 and len(slept) == len(steps)  # the prefill and every decode step
    assert slept == pytest.approx([1.5 * s for s in steps])
    with pytest.raises(UserError, match="slowdown factor of 1 or more"):
        engine(target, method, step_stretch=0.5)
