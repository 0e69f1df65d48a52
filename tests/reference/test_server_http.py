"""The reference server's HTTP layer in-process, over a scripted engine: validation, SSE framing, usage,
incremental detokenization, stop strings, metrics and engine errors. (The real `dflashbench serve` process
over the real decoder is tested in test_server_process.py.)"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from dflashbench.backends.counters import parse_vllm_prometheus
from dflashbench.reference.serving.server import ReferenceServer
from dflashbench.reference.serving.text import IncrementalDetokenizer, StopStringFilter

ANSWER = "naïve 🙂 café: 12+30=42. Done"


@dataclass
class Step:
    token_ids: list[int]
    drafted: int
    accepted: int
    queue_s: float | None = None


@dataclass
class Counters:
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=lambda: [0, 0, 0])


class ScriptedEngine:
    """Commits ANSWER + EOS in steps of 1, 3, 2, 4, 1, 3, 2, 4, ... tokens (first step = prefill, no draft);
    each speculative step drafts 3 tokens and accepts (size - 1). A prompt containing "FAIL" raises mid-way."""

    model_name = "scripted"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.answer = tokenizer(ANSWER, add_special_tokens=False)["input_ids"]
        self._counters = Counters()
        self.calls: list[dict] = []
        self.closed = False
        self.open_requests = 0
        self.step_delay_s = 0.0

    async def generate(self, prompt_ids, *, max_new_tokens, temperature=0.0, stop_token_ids=None, seed=None):
        self.calls.append(dict(prompt_ids=prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature,
                               stop_token_ids=stop_token_ids, seed=seed))  # fmt: skip
        fail = "FAIL" in self.tokenizer.decode(prompt_ids)
        out = self.answer + [self.tokenizer.eos_token_id] * 50
        sizes = [1, 3, 2, 4]
        done, i = 0, 0
        self.open_requests += 1
        try:
            while done < max_new_tokens:
                size = min(sizes[i % 4], max_new_tokens - done)
                toks = out[done : done + size]
                for j, t in enumerate(toks):
                    if stop_token_ids and t in stop_token_ids:
                        toks = toks[: j + 1]
                        break
                await asyncio.sleep(self.step_delay_s)
                if fail and done > 3:
                    raise RuntimeError("scripted engine failure")
                drafted = 0 if i == 0 else 3
                accepted = 0 if i == 0 else min(size - 1, 3)
                if drafted:
                    c = self._counters
                    c.num_drafts += 1
                    c.num_draft_tokens += drafted
                    c.num_accepted_tokens += accepted
                    for p in range(accepted):
                        c.accepted_per_pos[p] += 1
                yield Step(toks, drafted, accepted, 0.002 if i == 0 else None)
                done += len(toks)
                i += 1
                if stop_token_ids and toks[-1] in stop_token_ids:
                    return
        finally:
            self.open_requests -= 1

    def counters(self):
        return self._counters

    async def close(self):
        self.closed = True


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from dflashbench.reference.corpus import training_corpus
    from dflashbench.reference.training.tokenizer import build_tokenizer

    return build_tokenizer(training_corpus(100, seed=0), tmp_path_factory.mktemp("tok"), vocab_size=512)


def run_with_client(tokenizer, fn, *, method="dflash", **kwargs):
    engine = ScriptedEngine(tokenizer)
    server = ReferenceServer(engine, method=method, served_model_name="tiny", max_model_len=256,
                             eos_token_ids=[tokenizer.eos_token_id], **kwargs)  # fmt: skip

    async def main():
        async with TestClient(TestServer(server.app())) as client:
            return await fn(client, engine)

    return asyncio.run(main())


async def sse_events(resp: aiohttp.ClientResponse) -> list:
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    raw = (await resp.read()).decode()
    assert raw.endswith("data: [DONE]\n\n")
    events = []
    for block in raw.split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def answer_tokens(tokenizer):
    return tokenizer(ANSWER, add_special_tokens=False)["input_ids"]


def test_streaming_completion_one_chunk_per_step_with_continuous_usage(tokenizer):
    async def go(client, engine):
        body = {"model": "tiny", "prompt": "Say it", "max_tokens": 100, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
        return await sse_events(await client.post("/v1/completions", json=body)), engine

    events, engine = run_with_client(tokenizer, go)
    n_answer = len(answer_tokens(tokenizer))
    chunks, usage_chunk, done = events[:-2], events[-2], events[-1]
    assert done == "[DONE]"
    # every step is one chunk; per-chunk token counts from continuous usage follow the engine's step sizes
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    per_chunk = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    assert per_chunk[:4] == [1, 3, 2, 4]
    assert sum(per_chunk) == n_answer + 1  # the EOS token counts, as in vLLM
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert text == ANSWER
    assert not any("\ufffd" in c["choices"][0]["text"] for c in chunks)  # no half characters
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["stop"]
    assert all(c["object"] == "text_completion" and c["model"] == "tiny" for c in chunks)
    assert usage_chunk["choices"] == []
    prompt_len = len(tokenizer("Say it")["input_ids"])
    assert usage_chunk["usage"] == {"prompt_tokens": prompt_len, "completion_tokens": n_answer + 1,
                                    "total_tokens": prompt_len + n_answer + 1}  # fmt: skip
    spec = usage_chunk["spec_decode"]
    assert spec["num_drafts"] == len(chunks) - 1  # every step after the prefill step
    assert spec["num_accepted_tokens"] == n_answer + 1 - len(chunks)  # each step: accepted + 1 bonus
    assert spec["acceptance_length"] == pytest.approx(1 + spec["num_accepted_tokens"] / spec["num_drafts"])
    call = engine.calls[0]
    assert call["max_new_tokens"] == 100 and call["temperature"] == 0.0
    assert call["stop_token_ids"] == [tokenizer.eos_token_id]


def test_streaming_chat_role_first_then_content_and_final_usage(tokenizer):
    async def go(client, engine):
        body = {"messages": [{"role": "user", "content": "Hi"}], "stream": True, "max_tokens": 5,
                "chat_template_kwargs": {"enable_thinking": False}, "stream_options": {"include_usage": True}}
        return await sse_events(await client.post("/v1/chat/completions", json=body)), engine

    events, engine = run_with_client(tokenizer, go)
    first, chunks, usage = events[0], events[1:-2], events[-2]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and "usage" not in c for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
    assert usage["usage"]["completion_tokens"] == 5
    expected_prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert expected_prompt.endswith("<think>\n\n</think>\n\n")  # chat_template_kwargs reached the template
    assert engine.calls[0]["prompt_ids"] == tokenizer(expected_prompt, add_special_tokens=False)["input_ids"]
    assert usage["usage"]["prompt_tokens"] == len(engine.calls[0]["prompt_ids"])
    assert engine.calls[0]["temperature"] == 1.0  # the OpenAI default when none is given


def test_non_streaming_both_endpoints(tokenizer):
    async def go(client, engine):
        r1 = await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 200, "temperature": 0})
        r2 = await client.post("/v1/chat/completions",
                               json={"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]})
        return r1.status, await r1.json(), r2.status, await r2.json(), engine.calls  # fmt: skip

    s1, comp, s2, chat, calls = run_with_client(tokenizer, go)
    assert s1 == 200 and comp["choices"][0]["text"] == ANSWER and comp["choices"][0]["finish_reason"] == "stop"
    assert comp["usage"]["completion_tokens"] == len(answer_tokens(tokenizer)) + 1
    assert s2 == 200 and chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"] == {"role": "assistant", "content": ANSWER}
    # no max_tokens in chat: up to the context length
    assert calls[1]["max_new_tokens"] == 256 - chat["usage"]["prompt_tokens"]


def test_stop_string_cuts_text_and_ends_the_engine_request(tokenizer):
    async def go(client, engine):
        body = {"prompt": "x", "max_tokens": 100, "stop": ["=42", "zzz"], "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        events = await sse_events(await client.post("/v1/completions", json=body))
        return events, engine.open_requests

    events, still_open = run_with_client(tokenizer, go)
    text = "".join(e["choices"][0]["text"] for e in events[:-2])
    assert text == ANSWER[: ANSWER.index("=42")]
    assert events[-3]["choices"][0]["finish_reason"] == "stop"
    assert events[-2]["usage"]["completion_tokens"] < len(answer_tokens(tokenizer))
    assert still_open == 0


def test_client_disconnect_ends_the_request_in_the_engine(tokenizer):
    async def go(client, engine):
        engine.step_delay_s = 0.05
        body = {"prompt": "x", "max_tokens": 100, "stream": True}
        resp = await client.post("/v1/completions", json=body)
        first = await resp.content.readline()
        running = await (await client.get("/metrics")).text()
        resp.close()  # the client goes away mid-stream
        for _ in range(100):
            if engine.open_requests == 0:
                break
            await asyncio.sleep(0.02)
        after = await (await client.get("/metrics")).text()
        return first, engine.open_requests, running, after

    first, still_open, running, after = run_with_client(tokenizer, go)
    assert first.startswith(b"data: {")
    assert 'vllm:num_requests_running{engine="0",model_name="tiny"} 1.0' in running
    assert still_open == 0
    assert 'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0' in after
    assert 'vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny"} 1.0' in after


def test_ignore_eos_and_extra_stop_token_ids_reach_the_engine(tokenizer):
    async def go(client, engine):
        await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 3, "ignore_eos": True})
        await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 3, "stop_token_ids": [7]})
        return engine.calls

    calls = run_with_client(tokenizer, go)
    assert calls[0]["stop_token_ids"] == []
    assert calls[1]["stop_token_ids"] == [tokenizer.eos_token_id, 7]


@pytest.mark.parametrize(
    ("path", "body", "status", "param", "fragment"),
    [
        ("/v1/chat/completions", {"model": "tiny"}, 400, "messages", "'messages' is required"),
        ("/v1/chat/completions", {"messages": []}, 400, "messages", "non-empty array"),
        ("/v1/chat/completions", {"messages": [{"role": "user"}]}, 400, "messages[0].content", "must be a string"),
        ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role", "robot"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens", "positive integer, got 0"),
        ("/v1/completions", {"prompt": "x", "max_tokens": "10"}, 400, "max_tokens", "positive integer, got '10'"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 2.5}, 400, "max_tokens", "positive integer"),
        ("/v1/completions", {"prompt": "x", "temperature": -0.5}, 400, "temperature", "must be >= 0, got -0.5"),
        ("/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature", "must be a number"),
        ("/v1/completions", {"prompt": "x", "model": "gpt-4"}, 404, "model", "The model `gpt-4` does not exist."),
        ("/v1/completions", {"prompt": "x", "model": 3}, 400, "model", "'model' must be a string"),
        ("/v1/completions", {"max_tokens": 4}, 400, "prompt", "'prompt' is required"),
        ("/v1/completions", {"prompt": ["a", "b"]}, 400, "prompt", "one prompt per request"),
        ("/v1/completions", {"prompt": [1, 99999]}, 400, "prompt", "token id 99999 is out of vocabulary"),
        ("/v1/completions", {"prompt": "x", "stream": "yes"}, 400, "stream", "'stream' must be a boolean"),
        ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options",
         "only allowed when 'stream' is true"),
        ("/v1/completions", {"prompt": "x", "top_p": 0.9}, 400, "top_p", "not supported"),
        ("/v1/completions", {"prompt": "x", "n": 2}, 400, "n", "not supported"),
        ("/v1/completions", {"prompt": "x", "stop": 5}, 400, "stop", "string or an array of strings"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 1000}, 400, "max_tokens", "maximum context length is 256"),
        ("/v1/completions", [1, 2], 400, None, "must be a JSON object, got array"),
    ],
)  # fmt: skip
def test_bad_bodies_get_openai_shaped_errors(tokenizer, path, body, status, param, fragment):
    async def go(client, engine):
        resp = await client.post(path, json=body)
        ok = await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
        return resp.status, await resp.json(), ok.status, engine.calls

    got_status, got, ok_status, calls = run_with_client(tokenizer, go)
    assert got_status == status
    assert got["error"]["param"] == param and got["error"]["code"] == status
    assert got["error"]["type"] == ("NotFoundError" if status == 404 else "BadRequestError")
    assert fragment in got["error"]["message"]
    assert ok_status == 200 and len(calls) == 1  # nothing reached the engine; the server still serves


def test_neutral_values_of_unsupported_options_are_accepted(tokenizer):
    async def go(client, engine):
        body = {"prompt": "x", "max_tokens": 2, "top_p": 1.0, "n": 1, "top_k": -1, "presence_penalty": 0,
                "logprobs": None, "frequency_penalty": 0.0, "user": "someone"}  # fmt: skip
        return (await client.post("/v1/completions", json=body)).status

    assert run_with_client(tokenizer, go) == 200


def test_invalid_json_is_a_400(tokenizer):
    async def go(client, engine):
        resp = await client.post("/v1/completions", data=b"{not json", headers={"Content-Type": "application/json"})
        return resp.status, await resp.json()

    status, body = run_with_client(tokenizer, go)
    assert status == 400 and body["error"]["message"] == "request body is not valid JSON"


def test_engine_error_is_a_500_and_the_server_keeps_serving(tokenizer):
    async def go(client, engine):
        bad = await client.post("/v1/completions", json={"prompt": "FAIL", "max_tokens": 50})
        bad_stream = await client.post("/v1/completions", json={"prompt": "FAIL", "max_tokens": 50, "stream": True})
        events = await sse_events(bad_stream)
        good = await client.post("/v1/completions", json={"prompt": "fine", "max_tokens": 3})
        metrics = await (await client.get("/metrics")).text()
        return bad.status, await bad.json(), events, good.status, metrics

    status, body, events, good_status, metrics = run_with_client(tokenizer, go)
    assert status == 500
    assert body["error"]["message"] == (
        "the reference engine failed on this request: RuntimeError: scripted engine failure"
    )
    assert body["error"]["code"] == 500
    assert events[-2]["error"]["message"].endswith("scripted engine failure")  # in-band, then [DONE]
    assert good_status == 200
    assert 'dflashbench:request_errors_total{engine="0",model_name="tiny"} 2.0' in metrics


def test_models_health_and_metrics(tokenizer):
    async def go(client, engine):
        models = await (await client.get("/v1/models")).json()
        health = await client.get("/health")
        before = await (await client.get("/metrics")).text()
        await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 100, "temperature": 0})
        after = await (await client.get("/metrics")).text()
        return models, health.status, before, after, engine.counters()

    models, health, before, after, counters = run_with_client(tokenizer, go)
    assert models["object"] == "list"
    assert [(m["id"], m["object"], m["max_model_len"]) for m in models["data"]] == [("tiny", "model", 256)]
    assert health == 200
    assert "# TYPE vllm:spec_decode_num_drafts_total counter" in after  # as vLLM's prometheus_client writes it
    parsed_before, parsed = parse_vllm_prometheus(before), parse_vllm_prometheus(after)
    assert parsed_before.drafts == 0
    assert (parsed.drafts, parsed.draft_tokens, parsed.accepted_tokens) == (
        counters.num_drafts, counters.num_draft_tokens, counters.num_accepted_tokens)  # fmt: skip
    assert parsed.accepted_per_pos == tuple(counters.accepted_per_pos)
    n = len(answer_tokens(tokenizer)) + 1
    assert f'vllm:generation_tokens_total{{engine="0",model_name="tiny"}} {float(n)!r}' in after
    assert 'vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 1.0' in after
    assert 'vllm:request_queue_time_seconds_count{engine="0",model_name="tiny"} 1.0' in after
    assert 'vllm:request_queue_time_seconds_bucket{engine="0",le="0.005",model_name="tiny"} 1.0' in after
    assert 'vllm:request_queue_time_seconds_bucket{engine="0",le="0.001",model_name="tiny"} 0.0' in after


def test_ar_server_exposes_no_spec_decode_counters(tokenizer):
    async def go(client, engine):
        return await (await client.get("/metrics")).text()

    text = run_with_client(tokenizer, go, method="ar")
    assert "spec_decode" not in text and parse_vllm_prometheus(text) is None
    assert "vllm:generation_tokens_total" in text


def test_incremental_detokenizer_never_splits_a_character(tokenizer):
    ids = tokenizer("héllo 🙂 wörld ✓", add_special_tokens=False)["input_ids"]
    detok = IncrementalDetokenizer(tokenizer)
    pieces = [detok.push([i]) for i in ids] + [detok.flush()]
    assert "".join(pieces) == "héllo 🙂 wörld ✓"
    assert not any("\ufffd" in p for p in pieces)
    assert pieces.count("") >= 3  # the emoji's bytes were held back until complete


def test_stop_string_filter_holds_back_possible_prefixes():
    f = StopStringFilter(["STOP"])
    assert f.feed("abc ST") == ("abc", False)  # the last len("STOP") - 1 characters might begin "STOP"
    assert f.feed("O") == (" ", False)
    assert f.feed("Px") == ("", True)
    assert f.sent == "abc "
    g = StopStringFilter(["STOP"])
    assert g.feed("abc ST") == ("abc", False)
    assert g.feed("AR", final=True) == (" STAR", False)


def test_return_token_ids_streams_each_steps_ids_and_all_of_them_at_once(tokenizer):
    """vLLM's ``return_token_ids``: every streamed choice carries the ids its step committed (EOS included), a
    non-streamed choice all of them; without it, no choice carries any."""

    async def go(client, engine):
        body = {"prompt": "Say it", "max_tokens": 100, "temperature": 0, "stream": True, "return_token_ids": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
        streamed = await sse_events(await client.post("/v1/completions", json=body))
        whole = await (await client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "x"}], "max_tokens": 100, "return_token_ids": True})).json()
        plain = await sse_events(await client.post("/v1/completions", json={**body, "return_token_ids": False}))
        return streamed, whole, plain  # fmt: skip

    streamed, whole, plain = run_with_client(tokenizer, go)
    expected = answer_tokens(tokenizer) + [tokenizer.eos_token_id]
    chunks = streamed[:-2]
    assert [len(c["choices"][0]["token_ids"]) for c in chunks][:4] == [1, 3, 2, 4]  # the engine's steps
    assert [t for c in chunks for t in c["choices"][0]["token_ids"]] == expected
    assert whole["choices"][0]["token_ids"] == expected
    assert not any("token_ids" in c["choices"][0] for c in plain[:-2])


def test_ignore_eos_says_where_the_eos_came_and_the_counts_up_to_it(tokenizer):
    """The scripted engine commits ANSWER, then EOS tokens, in steps of 1, 3, 2, 4, ... tokens (the first is the
    prefill's, later ones draft 3 and accept size - 1): with ignore_eos the server decodes on and reports the
    first EOS's index and the drafts and acceptances through the step that committed it; without, nothing."""
    n = len(answer_tokens(tokenizer))

    async def go(client, engine):
        out = []
        for ignore in (True, False):
            resp = await client.post("/v1/completions", json={
                "prompt": "x", "max_tokens": n + 12, "ignore_eos": ignore, "stream": True,
                "stream_options": {"include_usage": True}})  # fmt: skip
            out.append((await sse_events(resp))[-2])
        return out

    with_eos, without = run_with_client(tokenizer, go)
    sizes, done, step, drafts, accepted = [1, 3, 2, 4], 0, 0, 0, 0
    while done <= n:  # through the step whose tokens include index n (the first EOS)
        size = sizes[step % 4]
        drafts, accepted = drafts + (step > 0), accepted + (min(size - 1, 3) if step > 0 else 0)
        done, step = done + size, step + 1
    assert with_eos["usage"]["completion_tokens"] == n + 12  # decoded on past the EOS, to max_tokens
    assert with_eos["spec_decode"]["eos"] == {"token_index": n, "num_drafts": drafts, "num_accepted_tokens": accepted}
    assert with_eos["spec_decode"]["num_drafts"] > drafts
    assert without["usage"]["completion_tokens"] == n + 1 and "eos" not in without["spec_decode"]
