"""Agreement with AR, first divergence, the two-proportion test and the quality warnings (dflashbench.measure.quality),
on hand-made outputs; and what the load generator keeps of an output (text, hash, token ids, grade)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import socket

import pandas as pd
import pytest
from aiohttp import web

from dflashbench.load import outputs as output_store
from dflashbench.load.loadgen import LoadGenConfig, run_closed_loop
from dflashbench.load.outputs import output_fields
from dflashbench.measure import quality
from dflashbench.measure.quality import (
    Output,
    agreement,
    compare_outputs,
    first_divergence,
    pair_outputs,
    two_proportion_test,
)
from dflashbench.run.manifest import parse_manifest
from dflashbench.types import PointSummary, Request, RequestResult

# --- one output against another ---------------------------------------------------------------------------------


def test_first_divergence():
    assert first_divergence("abcd", "abXd") == 2
    assert first_divergence("abc", "abc") is None
    assert first_divergence("ab", "abc") == 2  # one ends early: it diverges where it ends
    assert first_divergence([], [7]) == 0
    assert first_divergence((1, 2, 3), (1, 2, 4)) == 2


def out(text: str, ids=None, *, cap: int | None = None) -> Output:
    record = output_fields(text, ids, store_text=True)
    if cap is not None:  # as stored with a smaller cap
        record["output_text"] = text[:cap]
        record["output_token_ids"] = None if ids is None else list(ids[:cap])
    return Output.of(record)


def test_outputs_compare_by_full_text_and_say_where_they_part():
    a = out("The answer is 42.", [1, 2, 3, 4, 5])
    assert compare_outputs(a, out("The answer is 42.", [1, 2, 3, 4, 5])) == quality.Comparison(True)
    c = compare_outputs(a, out("The answer is 41.", [1, 2, 3, 4, 6]))
    assert (c.same, c.chars, c.tokens) == (False, 15, 4)
    c = compare_outputs(a, out("The answer is 42. And more.", [1, 2, 3, 4, 5, 9]))
    assert (c.same, c.chars, c.tokens) == (False, 17, 5)  # AR stopped, the other went on
    assert compare_outputs(a, out("The answer is 41.")).tokens is None  # no token ids on one side


def test_equality_holds_past_the_stored_cap_and_divergence_past_it_is_unknown():
    long_a, long_b = "x" * 100 + "A", "x" * 100 + "B"
    same = compare_outputs(out(long_a, cap=50), out(long_a, cap=50))
    assert same.same  # the hash covers the full text
    differ = compare_outputs(out(long_a, cap=50), out(long_b, cap=50))
    assert (differ.same, differ.chars) == (False, None)  # they part after the stored 50 characters
    stats = agreement([(out(long_a, cap=50), out(long_b, cap=50)), (out("y"), out("z"))])
    assert (stats.compared, stats.exact, stats.div_chars, stats.div_unknown) == (2, 0, (0,), 1)


def test_output_fields_cap_hash_and_privacy():
    text = "é" * (output_store.TEXT_CAP_CHARS + 10)
    kept = output_fields(text, list(range(output_store.TOKEN_CAP + 3)), store_text=True, grader="gsm8k", reference="5")
    assert len(kept["output_text"]) == output_store.TEXT_CAP_CHARS and kept["output_chars"] == len(text)
    assert kept["output_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert len(kept["output_token_ids"]) == output_store.TOKEN_CAP
    assert (kept["answer"], kept["correct"]) == (None, False)
    private = output_fields("so \\boxed{5}", [1, 2], store_text=False, grader="gsm8k", reference="5")
    assert private == {"correct": True}  # graded on the full text, nothing of the text kept
    assert output_fields("anything", None, store_text=False) == {}  # nothing to grade, nothing kept
    odd = output_fields('half an emoji: "\ud83d"', None, store_text=True)  # a lone surrogate from a server's JSON
    assert "\ud83d" not in odd["output_text"] and odd["output_text"].encode("utf-8")


def test_an_output_left_raw_by_a_client_process_is_finished_as_the_client_would_have():
    """Client processes leave each output raw (the full text and token ids) and the parent finishes it: the fields
    are the ones the client would have written, the grade only on a first turn that succeeded, none on a warm-up."""
    text, ids = "so \\boxed{5}" + "é" * output_store.TEXT_CAP_CHARS, list(range(output_store.TOKEN_CAP + 1))
    request = Request(id="q", workload="w", category="math", messages=({"role": "user", "content": "?"},),
                      max_tokens=9, metadata={"grader": "gsm8k", "answer": "5"})  # fmt: skip
    base = RequestResult(run_id="r", point_id="p", request_id="q", category="math", concurrency=1, ok=True, error=None,
                         queued_ns=0, sent_ns=0, first_token_ns=1, last_token_ns=2, output_tokens=9,
                         output_tokens_source="server", **output_store.raw_output(text, ids))  # fmt: skip
    assert base.output_text == text and len(base.output_token_ids) == len(ids)  # raw: whole, nothing derived
    done = output_store.finish(base, request, store_text=True)
    want = output_fields(text, ids, store_text=True, grader="gsm8k", reference="5")
    assert {k: getattr(done, k) for k in want} == want and done.correct is True
    assert output_store.finish(base, request, store_text=False).output_text is None  # --no-store-text
    assert output_store.finish(base, request, store_text=False).correct is True
    later = dataclasses.replace(base, turn=1)
    assert output_store.finish(later, request, store_text=True).correct is None  # later turns are not graded
    warm = output_store.finish(dataclasses.replace(base, warmup=True), request, store_text=True)
    assert (warm.output_text, warm.output_sha256, warm.correct) == (None, None, None)  # a warm-up keeps nothing


def record(rid: str, text: str | None, turn: int = 0, **kw) -> dict:
    fields = output_fields(text, None, store_text=True) if text is not None else {}
    return {"request_id": rid, "turn": turn, **fields, **kw}


def test_pairs_by_request_turn_and_occurrence():
    ref = [record("a", "1"), record("b", "2"), record("a", "3"), record("c", None)]
    mine = [record("a", "1"), record("a", "3"), record("b", "X"), record("c", "4"), record("d", "5")]
    pairs = pair_outputs(ref, mine)
    assert [(r.text, o.text) for r, o in pairs] == [("1", "1"), ("3", "3"), ("2", "X")]


# --- statistics ---------------------------------------------------------------------------------------------------


def test_two_proportion_test_matches_the_textbook_and_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    z, p = two_proportion_test(12, 32, 20, 32)  # pooled 0.5: se = sqrt(0.25 * 2/32) = 0.125
    assert z == pytest.approx(-2.0)
    chi2, p_scipy, _, _ = scipy_stats.chi2_contingency([[12, 20], [20, 12]], correction=False)
    assert p == pytest.approx(p_scipy) and z**2 == pytest.approx(chi2)
    assert p == pytest.approx(2 * scipy_stats.norm.sf(2.0))
    assert two_proportion_test(5, 5, 7, 7) == (0.0, 1.0)  # both perfect: no difference
    assert two_proportion_test(0, 0, 3, 4) == (None, None)
    assert quality.significant_drop(12, 32, 20, 32)
    assert not quality.significant_drop(20, 32, 12, 32)  # a rise is no drop
    assert not quality.significant_drop(18, 32, 20, 32)  # within noise


# --- tables and warnings over runs --------------------------------------------------------------------------------


def point(method: str, c: int, *, correct: int = 0, graded: int = 0, run_id: str = "run",
          category: str = "all") -> dict:  # fmt: skip
    p = PointSummary(run_id=run_id, backend="reference", method=method, model="tiny", draft=None, workload="gsm8k",
                     category=category, concurrency=c, num_gpus=1, num_requests=32, num_errors=0, duration_s=1.0,
                     output_tokens=100, throughput_tok_per_s=None, throughput_tok_per_s_per_gpu=None,
                     per_user_tok_per_s_mean=None, per_user_tok_per_s_p50=None, per_user_tok_per_s_p10=None,
                     ttft_s_p50=None, ttft_s_p99=None, tpot_s_p50=None, tpot_s_p99=None, itl_s_p50=None,
                     itl_s_p99=None, e2e_s_p50=None, e2e_s_p99=None, tau=None, acceptance_rate=None,
                     energy_j_per_tok=None, point_id=f"{method}-c{c}", num_graded=graded, num_correct=correct,
                     accuracy=correct / graded if graded else None)  # fmt: skip
    return p.to_dict()


def req(method: str, c: int, i: int, text: str, run_id: str = "run") -> dict:
    r = RequestResult(run_id=run_id, point_id=f"{method}-c{c}", request_id=f"q{i}", category="math", concurrency=c,
                      ok=True, error=None, queued_ns=0, sent_ns=0, first_token_ns=1, last_token_ns=2, output_tokens=3,
                      output_tokens_source="server", **output_fields(text, None, store_text=True))  # fmt: skip
    return r.to_dict()


def outputs(method: str, c: int, texts: list[str]) -> list[dict]:
    return [req(method, c, i, t) for i, t in enumerate(texts)]


BASE = [f"answer number {i} is {i * 7}" for i in range(8)]


def test_planted_accuracy_drop_fires_the_warning_and_noise_does_not():
    points = pd.DataFrame([point("ar", 1, correct=28, graded=32), point("ar", 2, correct=27, graded=32),
                           point("dflash", 1, correct=14, graded=32), point("dflash", 2, correct=26, graded=32),
                           point("eagle3", 1, correct=27, graded=32), point("eagle3", 2, correct=28, graded=32)])  # fmt: skip
    acc = quality.accuracy_table(points)
    row = acc[(acc["method"] == "dflash") & (acc["concurrency"] == 1)].iloc[0]
    assert (row["accuracy"], row["ar_accuracy"], bool(row["significant_drop"])) == (14 / 32, 28 / 32, True)
    assert row["p_value"] < 0.05
    # no row pools the concurrencies: they ran the same prompts, so a pooled test would count each one twice
    assert acc["concurrency"].notna().all()
    warned = quality.warnings(quality.agreement_table(points, pd.DataFrame()), acc)
    assert len(warned) == 1 and warned[0].startswith("DFlash accuracy falls below AR's beyond noise")
    assert "c=1: 43.8% (14/32) vs AR 87.5%" in warned[0]
    assert not any("EAGLE-3" in w for w in warned)  # 27/32 vs 28/32 is noise


def test_agreement_table_noise_floor_and_divergence():
    drift = [*BASE[:7], "answer number 7 is 50"]  # AR itself differs once across concurrencies (batching)
    wrong = ["answer number 0 is 1", *BASE[1:]]
    points = pd.DataFrame([point("ar", 1), point("ar", 4), point("dflash", 1), point("dflash", 4),
                           point("eagle3", 1), point("eagle3", 4)])  # fmt: skip
    requests = pd.DataFrame(outputs("ar", 1, BASE) + outputs("ar", 4, drift) + outputs("dflash", 1, BASE)
                            + outputs("dflash", 4, wrong) + outputs("eagle3", 1, BASE) + outputs("eagle3", 4, drift))  # fmt: skip
    table = quality.agreement_table(points, requests)
    rows = {(r["method"], r["concurrency"]): r for r in table.to_dict("records")}
    assert set(rows) == {("ar", 4), ("dflash", 1), ("dflash", 4), ("eagle3", 1), ("eagle3", 4)}
    assert (rows["ar", 4]["reference"], rows["ar", 4]["exact"], rows["ar", 4]["compared"]) == ("AR c=1", 7, 8)
    assert rows["ar", 4]["div_chars_min"] == 19  # "answer number 7 is " then 49 vs 50
    assert (rows["dflash", 1]["exact"], rows["dflash", 1]["floor"]) == (8, 7 / 8)
    d4 = rows["dflash", 4]
    assert (d4["reference"], d4["exact"], d4["diverged"], d4["div_chars_min"]) == ("AR c=4", 6, 2, 19)
    assert rows["eagle3", 4]["exact"] == 8  # the same drift as AR at c=4: identical to AR there
    # 6/8 against a floor of 7/8 is within noise: no warning
    assert quality.warnings(table, quality.accuracy_table(points)) == []


def test_disagreement_where_ar_agrees_with_itself_is_a_warning():
    wrong = ["answer number 0 is 1", *BASE[1:]]
    points = pd.DataFrame([point("ar", 1), point("ar", 2), point("dflash", 1), point("dflash", 2)])
    requests = pd.DataFrame(outputs("ar", 1, BASE) + outputs("ar", 2, BASE) + outputs("dflash", 1, BASE)
                            + outputs("dflash", 2, wrong))  # fmt: skip
    warned = quality.warnings(quality.agreement_table(points, requests), quality.accuracy_table(points))
    assert warned == [
        "DFlash output differs from AR on 1 of 8 requests on gsm8k (reference), c=2 (agreement 87.5%), while AR "
        "agreed with itself across concurrencies on every request (8/8); first divergence at character 19: "
        "greedy speculative decoding should reproduce AR's output"
    ]


def test_sampled_runs_have_no_agreement_but_keep_accuracy():
    points = pd.DataFrame([point("ar", 1, correct=20, graded=32), point("dflash", 1, correct=19, graded=32)])
    requests = pd.DataFrame(outputs("ar", 1, BASE) + outputs("dflash", 1, ["different"] * 8))
    hot = lambda run_id: 0.7  # noqa: E731
    assert quality.agreement_table(points, requests, hot).empty
    acc = quality.accuracy_table(points, hot)
    assert acc["sampled"].all() and list(acc["accuracy"]) == [20 / 32, 19 / 32]
    assert parse_manifest({"suite_config": {"temperature": 0.7}}).temperature == 0.7
    assert parse_manifest({}).temperature == 0.0


def test_runs_without_stored_text_say_so():
    points = pd.DataFrame([point("ar", 1), point("dflash", 1)])
    requests = pd.DataFrame([{**req("ar", 1, 0, "x"), "output_text": None},
                             {**req("dflash", 1, 0, "x"), "output_text": None}])  # fmt: skip
    (row,) = quality.agreement_table(points, requests).to_dict("records")
    assert row["compared"] == 0 and "--no-store-text" in row["note"]


# --- what the load generator keeps ---------------------------------------------------------------------------------


async def _serve_once(chunks: list[dict]):
    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for c in chunks:
            if "token_ids" in c["choices"][0] and not body.get("return_token_ids"):
                c = {**c, "choices": [{k: v for k, v in c["choices"][0].items() if k != "token_ids"}]}
            await resp.write(f"data: {json.dumps(c)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    return runner, f"http://127.0.0.1:{port}"


def _chunk(text: str, ids: list[int], done: int, finish=None) -> dict:
    return {"choices": [{"index": 0, "delta": {"content": text}, "token_ids": ids, "finish_reason": finish}],
            "usage": {"prompt_tokens": 3, "completion_tokens": done}}  # fmt: skip


@pytest.mark.parametrize("store_text", [True, False])
def test_load_generator_keeps_text_token_ids_and_grade(store_text):
    chunks = [_chunk("So 4*12 = 48, ", [5, 6, 7], 3), _chunk("48-30 = \\boxed{18}", [8, 9], 5, finish="stop")]
    request = Request(id="r0", workload="gsm8k", category="math", messages=({"role": "user", "content": "q"},),
                      max_tokens=16, metadata={"answer": "18", "grader": "gsm8k"})  # fmt: skip

    async def main():
        runner, url = await _serve_once(chunks)
        try:
            cfg = LoadGenConfig(base_url=url, model="m", store_text=store_text,
                                extra_body={"return_token_ids": True})  # fmt: skip
            return await run_closed_loop([request], 1, cfg)
        finally:
            await runner.cleanup()

    (r,) = asyncio.run(main())
    assert r.ok and r.correct is True
    text = "So 4*12 = 48, 48-30 = \\boxed{18}"
    if store_text:
        assert (r.output_text, r.output_chars, r.output_token_ids, r.answer) == (text, len(text), (5, 6, 7, 8, 9), "18")
        assert r.output_sha256 == hashlib.sha256(text.encode()).hexdigest()
        assert RequestResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r  # survives requests.jsonl
    else:
        assert (r.output_text, r.output_chars, r.output_sha256, r.output_token_ids, r.answer) == (None,) * 5
