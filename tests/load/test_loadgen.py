"""SSE parsing and stream accounting, without a network (the live tests are in test_loadgen_live.py)."""

import json

import pytest

from dflashbench.load.loadgen import (
    LoadGenConfig,
    StreamError,
    _spread,
    _Stream,
    api_key_from_env,
    build_body,
)
from dflashbench.load.sse import SSEParser
from dflashbench.types import Request


def chunk(content=None, *, usage=None, finish=None, reasoning=None, choices=True):
    delta = {}
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    obj = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else []}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 7, "completion_tokens": usage}
    return "data: " + json.dumps(obj) + "\n\n"


def test_sse_events_split_at_every_byte():
    stream = (": keep-alive\n\n" + chunk("héllo") + "event: x\r\nid: 3\r\ndata: a\r\ndata: b\r\n\r\n" + "data: [DONE]\n\n")
    raw = stream.encode()
    parser = SSEParser()
    events = []
    for i in range(len(raw)):  # one byte at a time: splits lines, fields and the two-byte "é"
        events += parser.feed(raw[i : i + 1])
    assert events == [json.dumps({"choices": [{"index": 0, "delta": {"content": "héllo"}, "finish_reason": None}]}).encode(),
                      b"a\nb", b"[DONE]"]  # fmt: skip
    assert parser.flush() == []


def test_sse_many_events_in_one_read_and_unterminated_last_event():
    parser = SSEParser()
    assert parser.feed(b"data: 1\n\ndata: 2\n\ndata:3") == [b"1", b"2"]
    assert parser.flush() == [b"3"]
    assert SSEParser().feed(b"data\ndata: x\n\n") == [b"\nx"]  # a bare field name: an empty line of data
    ended = SSEParser()
    assert ended.feed(b"data: y\r") == [] and ended.flush() == [b"y"]  # cut after its line's \r


def test_invalid_utf8_in_an_event_is_replaced_not_a_broken_stream():
    s = _Stream()
    s.on_event(b'{"choices": [{"delta": {"content": "a\xffb"}}], "usage": {"completion_tokens": 1}}', 7)
    assert s.text == ["a\ufffdb"] and s.chunk_ns == [7]


def test_stream_with_continuous_usage_counts_tokens_per_chunk():
    s = _Stream()
    payloads = [
        chunk("", usage=0),  # role chunk: no output
        chunk("The", usage=1),
        chunk(" answer is", usage=4),  # a speculative step: 3 tokens in one chunk
        chunk(" 42", usage=6, finish="stop"),
        chunk(None, usage=6, choices=False),  # the final usage chunk
        "data: [DONE]\n\n",
    ]
    for t, p in enumerate(payloads):
        for ev in SSEParser().feed(p.encode()):
            s.on_event(ev, 1000 + t)
    assert s.done and s.finished
    assert s.chunk_ns == [1001, 1002, 1003]
    assert s.token_counts() == (6, "server", [1, 3, 2], False)
    assert "".join(s.text) == "The answer is 42"
    assert s.prompt_tokens == 7


def test_stream_without_continuous_usage_estimates_and_flags():
    s = _Stream()
    for t, p in enumerate([chunk("a"), chunk("bbbbbbbbb"), chunk("c", finish="length"), chunk(None, usage=12, choices=False)]):
        s.on_event(SSEParser().feed(p.encode())[0], t)
    total, source, per_chunk, estimated = s.token_counts()
    assert (total, source, estimated) == (12, "server", True)
    assert sum(per_chunk) == 12 and per_chunk[1] > per_chunk[0] and min(per_chunk) >= 1


def test_stream_without_any_usage_counts_chunks():
    s = _Stream()
    for t, p in enumerate([chunk("a"), chunk("b"), chunk("c")]):
        s.on_event(SSEParser().feed(p.encode())[0], t)
    assert s.token_counts() == (3, "chunks", [1, 1, 1], True)


def test_reasoning_content_counts_as_output():
    s = _Stream()
    s.on_event(SSEParser().feed(chunk(reasoning="thinking", usage=2).encode())[0], 5)
    s.on_event(SSEParser().feed(chunk("done", usage=3).encode())[0], 9)
    assert s.chunk_ns == [5, 9] and s.token_counts()[2] == [2, 1]


def test_trailing_tokens_reported_only_by_final_usage_go_to_the_last_chunk():
    s = _Stream()
    s.on_event(SSEParser().feed(chunk("x", usage=1).encode())[0], 1)
    s.on_event(SSEParser().feed(chunk("y", usage=2).encode())[0], 2)
    s.on_event(SSEParser().feed(chunk(None, usage=3, choices=False).encode())[0], 3)  # e.g. an EOS token
    assert s.token_counts() == (3, "server", [1, 2], False)


@pytest.mark.parametrize(
    ("payload", "message"),
    [("{not json", "malformed SSE data"), ("[1, 2]", "not a JSON object"),
     ('{"error": {"message": "out of memory"}}', "server error mid-stream: out of memory")],
)  # fmt: skip
def test_protocol_errors(payload, message):
    with pytest.raises(StreamError, match=message):
        _Stream().on_event(payload.encode(), 0)


def test_spread_is_exact_and_proportional():
    assert _spread(10, [1, 1, 8]) == [1, 1, 8]
    assert sum(_spread(7, [3, 3, 3])) == 7
    assert _spread(2, [5, 5, 5]) == [1, 1, 0]
    assert _spread(0, [1, 2]) == [0, 0]


def test_request_body_and_api_key(monkeypatch):
    req = Request(id="1", workload="w", category="c", messages=({"role": "user", "content": "hi"},), max_tokens=9,
                  metadata={"chat_template_kwargs": {"enable_thinking": False}})  # fmt: skip
    cfg = LoadGenConfig(base_url="http://h:1/", model="m", api_key="secret-key")
    body = build_body(cfg, req, req.messages)
    assert body["stream"] is True and body["max_tokens"] == 9 and body["model"] == "m"
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert cfg.url == "http://h:1/v1/chat/completions"
    assert cfg.headers()["Authorization"] == "Bearer secret-key"
    assert "secret-key" not in repr(cfg)

    monkeypatch.delenv("DFLASHBENCH_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "k1")
    assert api_key_from_env() == "k1"
    monkeypatch.setenv("DFLASHBENCH_API_KEY", "k0")
    assert api_key_from_env() == "k0"
    monkeypatch.setenv("MY_KEY", "k2")
    assert api_key_from_env("MY_KEY") == "k2"
    assert api_key_from_env("UNSET_KEY_NAME") is None


def test_request_bodies_are_json_even_with_a_lone_surrogate():
    import json

    from dflashbench.load.loadgen import _body_bytes

    body = {"messages": [{"role": "user", "content": "café 😀"}], "max_tokens": 3}
    assert json.loads(_body_bytes(body)) == body
    odd = {"messages": [{"role": "user", "content": "half \ud83d an emoji"}]}  # orjson refuses it; json escapes it
    assert json.loads(_body_bytes(odd)) == odd


def test_streams_ending_together_are_timestamped_before_any_of_their_results_is_recorded():
    """At a closed loop's round end every stream's last chunk arrives at once. Each stream's end (its record, its
    next request) must not delay the other streams' last timestamps: with a record that takes 50 ms, the second
    stream's last chunk was timestamped 50 ms after the first's, its ITL read long by that much."""
    import asyncio
    import socket
    import time

    from aiohttp import web

    from dflashbench.load.loadgen import run_closed_loop

    def event(text, done, finish=None):
        obj = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
               "usage": {"prompt_tokens": 1, "completion_tokens": done}}  # fmt: skip
        return f"data: {json.dumps(obj)}\n\n".encode()

    async def main():
        open_streams, ended = [], asyncio.Event()

        async def handler(request):
            await request.json()
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(event("a", 1))
            open_streams.append(resp)
            if len(open_streams) == 2:  # both last chunks written in one step: the client reads them in one go
                for r in open_streams:
                    await r.write(event("b", 2, "stop") + b"data: [DONE]\n\n")
                ended.set()
            await ended.wait()
            return resp

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            cfg = LoadGenConfig(base_url=f"http://127.0.0.1:{port}", model="m")
            reqs = [Request(id=f"r{i}", workload="w", category="c", messages=({"role": "user", "content": "q"},),
                            max_tokens=2) for i in range(2)]  # fmt: skip
            return await run_closed_loop(reqs, 2, cfg, on_result=lambda r: time.sleep(0.05), connected=True)
        finally:
            await runner.cleanup()

    results = asyncio.run(main())
    assert len(results) == 2 and all(r.ok and len(r.chunk_ns) == 2 for r in results)
    assert abs(results[0].last_token_ns - results[1].last_token_ns) < 25e6  # not the 50 ms of the other's record


def test_sglang_per_request_acceptance_is_read_from_its_sglext_chunk():
    """SGLang with return_spec_tokens_details streams a chunk with no choices and the request's acceptance under
    sglext.spec_tokens_details (sgl-project/sglang@v0.5.23 serving_chat.py: SglExt(spec_tokens_details=...))."""
    s = _Stream()
    details = {"spec_accept_rate": 0.5, "spec_accept_length": 3.0, "spec_num_correct_drafts": 40,
               "spec_num_proposed_drafts": 80, "spec_verify_ct": 20, "spec_correct_drafts_histogram": [1, 2]}
    payloads = [chunk("The", usage=1), chunk(" end", usage=60, finish="stop"),
                json.dumps({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
                            "sglext": {"spec_tokens_details": details}}),
                chunk(None, usage=60, choices=False)]
    for t, p in enumerate(payloads):
        data = p if p.startswith("data:") else f"data: {p}\n\n"
        for ev in SSEParser().feed(data.encode()):
            s.on_event(ev, t)
    assert (s.spec_steps, s.spec_accepted) == (20, 40)
