"""`dflashbench serve` as a real process on loopback, over the real reference decoder on a tiny random pair,
launched the way the sweep launches it (ReferenceBackend's argv + ServerProcess)."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import aiohttp
import pytest
from typer.testing import CliRunner

from dflashbench.backends import get_backend
from dflashbench.backends.base import ServerSpec
from dflashbench.backends.counters import parse_vllm_prometheus
from dflashbench.backends.process import ServerProcess, free_port
from dflashbench.cli import app
from dflashbench.types import Method

pytestmark = pytest.mark.timeout(300)

BLOCK = 4
PROMPT_IDS = [5, 9, 14, 20, 33, 7, 41, 12]


def two_token_pair(out_dir, seed: int):
    """A tiny random pair whose target emits one of two word tokens per step, and whose drafter guesses
    between the same two: final-norm weights are one-hot on a hidden dimension j, so logits = W[:, j] * x_j
    and the greedy token is argmax or argmin of W[:, j] by the sign of x_j. Acceptance is then partial
    (tau between 1 and the block size), unlike a fully random drafter's (tau = 1), so steps commit varying
    numbers of tokens."""
    import torch
    from safetensors.torch import load_file, save_file

    from dflashbench.reference.tiny import SPECIALS, write_tiny_pair

    target_dir, draft_dir = write_tiny_pair(out_dir, vocab_size=64, block_size=BLOCK, seed=seed)
    weights = load_file(str(target_dir / "model.safetensors"))
    lm_head = weights["lm_head.weight"]  # [vocab, hidden]
    j = next(j for j in range(lm_head.shape[1])
             if min(int(lm_head[:, j].argmax()), int(lm_head[:, j].argmin())) >= len(SPECIALS))  # fmt: skip
    one_hot = torch.zeros(lm_head.shape[1], dtype=lm_head.dtype)
    one_hot[j] = 1.0
    weights["model.norm.weight"] = one_hot
    save_file(weights, str(target_dir / "model.safetensors"), metadata={"format": "pt"})
    draft = load_file(str(draft_dir / "model.safetensors"))
    draft["norm.weight"] = one_hot.to(draft["norm.weight"].dtype)
    save_file(draft, str(draft_dir / "model.safetensors"), metadata={"format": "pt"})
    return str(target_dir), str(draft_dir)


class Decoder:
    """The decoder in this process, on the same pair: what the server must reproduce."""

    def __init__(self, target_dir: str, draft_dir: str) -> None:
        from dflashbench.reference.dflash.checkpoint import load_draft
        from dflashbench.reference.target import load_target

        self.target, self.draft = load_target(target_dir), load_draft(draft_dir)

    def __call__(self, method: str, prompt_ids: list[int], max_new_tokens: int):
        from dflashbench.reference.decode import ar_decode, dflash_decode

        stop = self.target.stop_token_ids()
        if method == "ar":
            return ar_decode(self.target, prompt_ids, max_new_tokens=max_new_tokens, stop_token_ids=stop)
        return dflash_decode(self.target, self.draft, prompt_ids, max_new_tokens=max_new_tokens, stop_token_ids=stop)


@pytest.fixture(scope="module")
def pair_and_decoder(tmp_path_factory):
    """The first seed whose pair accepts some drafts but not all on PROMPT_IDS (seed 4, tau 2.2, with torch 2.13)."""
    root = tmp_path_factory.mktemp("pairs")
    for seed in range(4, 30):
        pair = two_token_pair(root / str(seed), seed)
        decoder = Decoder(*pair)
        gen = decoder("dflash", PROMPT_IDS, 40)
        if 1.2 < gen.tau < BLOCK - 0.5 and len(gen.token_ids) == 40:
            return pair, decoder
    raise AssertionError("no tiny pair with partial acceptance among seeds 4..29")


@pytest.fixture(scope="module")
def pair(pair_and_decoder):
    return pair_and_decoder[0]


@pytest.fixture(scope="module")
def decoder(pair_and_decoder):
    return pair_and_decoder[1]


def launch(pair, method: str, run_dir):
    backend = get_backend("reference")
    spec = ServerSpec(method=Method(method), model=pair[0], draft=pair[1], port=free_port(),
                      served_model_name="tiny", env={"OMP_NUM_THREADS": "1"})  # fmt: skip
    server = ServerProcess(backend.launch_plan(spec), run_dir / f"server-reference-{method}.log",
                           name=f"reference {method}").start()  # fmt: skip
    try:
        server.wait_ready(spec.base_url + backend.health_path(), timeout_s=180, progress=False)
    except BaseException:
        server.stop()
        raise
    return server, spec.base_url


@pytest.fixture(scope="module")
def dflash_url(pair, tmp_path_factory):
    server, url = launch(pair, "dflash", tmp_path_factory.mktemp("run"))
    yield url
    server.stop()
    assert not server.is_running()


@pytest.fixture(scope="module")
def ar_url(pair, tmp_path_factory):
    server, url = launch(pair, "ar", tmp_path_factory.mktemp("run"))
    yield url
    server.stop()


def post(url: str, body) -> tuple[int, dict | list | str]:
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            raw, status, kind = resp.read().decode(), resp.status, resp.headers["Content-Type"]
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
    if kind.startswith("text/event-stream"):
        blocks = raw.split("\n\n")
        assert blocks[-2:] == ["data: [DONE]", ""], raw[-200:]
        return status, [json.loads(b.removeprefix("data: ")) for b in blocks[:-2]]
    return status, json.loads(raw)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read().decode()


def per_chunk_tokens(chunks: list[dict]) -> list[int]:
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    return [b - a for a, b in zip([0, *counts], counts, strict=False)]


STREAM = {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def test_streamed_completion_is_the_decoders_output_one_chunk_per_step(dflash_url, decoder, pair):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(pair[0])
    gen = decoder("dflash", PROMPT_IDS, 40)
    before = parse_vllm_prometheus(get(f"{dflash_url}/metrics"))
    status, events = post(f"{dflash_url}/v1/completions",
                          {"model": "tiny", "prompt": PROMPT_IDS, "max_tokens": 40, "temperature": 0, **STREAM})
    after = parse_vllm_prometheus(get(f"{dflash_url}/metrics"))  # fmt: skip
    assert status == 200
    chunks, final = events[:-1], events[-1]
    # usage equals the number of streamed tokens; each chunk is one step: the prefill token, then accepted + 1
    assert sum(per_chunk_tokens(chunks)) == final["usage"]["completion_tokens"] == len(gen.token_ids)
    assert per_chunk_tokens(chunks)[0] == 1
    steps = per_chunk_tokens(chunks)[1:]
    assert steps[:-1] == gen.accept_lengths[:-1]
    assert 1 <= steps[-1] <= gen.accept_lengths[-1]  # the last step may be cut at max_tokens
    assert len(chunks) == gen.num_steps + 1
    assert max(per_chunk_tokens(chunks)) > 1  # steps that committed several tokens were streamed as one chunk
    assert "".join(c["choices"][0]["text"] for c in chunks) == tok.decode(gen.token_ids, skip_special_tokens=True)
    assert chunks[-1]["choices"][0]["finish_reason"] == gen.finish_reason
    assert final["usage"]["prompt_tokens"] == len(PROMPT_IDS)
    # /metrics over this request's window agrees with the decoder's own tau, and with the per-response stats
    delta = after.minus(before)
    assert delta.drafts == gen.num_steps
    assert 1 + delta.accepted_tokens / delta.drafts == pytest.approx(gen.tau)
    assert delta.draft_tokens == gen.num_steps * (BLOCK - 1)
    assert sum(delta.accepted_per_pos) == delta.accepted_tokens and len(delta.accepted_per_pos) == BLOCK - 1
    spec = final["spec_decode"]
    assert (spec["num_drafts"], spec["num_accepted_tokens"]) == (delta.drafts, delta.accepted_tokens)
    assert spec["acceptance_length"] == pytest.approx(gen.tau)


def test_streamed_chat_applies_the_chat_template_and_matches_non_streamed(dflash_url, decoder, pair):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(pair[0])
    messages = [{"role": "user", "content": "w3 w17 w8 w30"}]
    prompt_ids = tok(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
                     add_special_tokens=False)["input_ids"]  # fmt: skip
    gen = decoder("dflash", prompt_ids, 30)
    body = {"model": "tiny", "messages": messages, "max_tokens": 30, "temperature": 0}
    status, events = post(f"{dflash_url}/v1/chat/completions", {**body, **STREAM})
    assert status == 200
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    chunks, final = events[1:-1], events[-1]
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks)
    assert final["usage"]["prompt_tokens"] == len(prompt_ids)
    assert sum(per_chunk_tokens(chunks)) == final["usage"]["completion_tokens"] == len(gen.token_ids)
    assert text == tok.decode(gen.token_ids, skip_special_tokens=True)
    status, whole = post(f"{dflash_url}/v1/chat/completions", body)
    assert status == 200 and whole["object"] == "chat.completion"
    assert whole["choices"][0]["message"]["content"] == text
    assert whole["usage"] == final["usage"]


def test_concurrent_requests_each_get_their_own_output(dflash_url, decoder):
    prompts = [PROMPT_IDS, [7, 7, 30, 2 + 20, 11], [40, 41, 42]]
    bodies = [{"prompt": p, "max_tokens": 20 + 5 * i, "temperature": 0, **STREAM} for i, p in enumerate(prompts)]
    with ThreadPoolExecutor(len(bodies)) as pool:
        results = list(pool.map(lambda b: post(f"{dflash_url}/v1/completions", b), bodies))
    for (status, events), body in zip(results, bodies, strict=True):
        gen = decoder("dflash", body["prompt"], body["max_tokens"])
        assert status == 200
        assert events[-1]["usage"]["completion_tokens"] == len(gen.token_ids)
        assert sum(per_chunk_tokens(events[:-1])) == len(gen.token_ids)


def test_ar_server_gives_the_same_text_and_no_spec_counters(ar_url, dflash_url):
    body = {"prompt": PROMPT_IDS, "max_tokens": 24, "temperature": 0}
    _, ar = post(f"{ar_url}/v1/completions", body)
    _, df = post(f"{dflash_url}/v1/completions", body)
    assert ar["choices"][0]["text"] == df["choices"][0]["text"]  # lossless, through the whole HTTP path
    assert ar["usage"] == df["usage"]
    assert ar["spec_decode"]["num_drafts"] == 0
    metrics = get(f"{ar_url}/metrics")
    assert "spec_decode" not in metrics
    assert 'vllm:generation_tokens_total{engine="0",model_name="tiny"}' in metrics


def test_reference_backend_reads_counters_from_the_server(ar_url, dflash_url):
    backend = get_backend("reference")
    assert post(f"{dflash_url}/v1/completions", {"prompt": PROMPT_IDS, "max_tokens": 8})[0] == 200

    async def read():
        async with aiohttp.ClientSession() as session:
            await backend.reset_cache(session, dflash_url)
            return await backend.read_counters(session, dflash_url), await backend.read_counters(session, ar_url)

    dflash, ar = asyncio.run(read())
    assert ar is None
    assert dflash is not None and dflash.drafts > 0 and dflash.draft_tokens == dflash.drafts * (BLOCK - 1)


def test_models_and_bad_bodies(dflash_url):
    models = json.loads(get(f"{dflash_url}/v1/models"))
    assert [m["id"] for m in models["data"]] == ["tiny"]
    cases = [
        ("/v1/chat/completions", {"model": "tiny"}, 400, "'messages' is required"),
        ("/v1/completions", {"prompt": "w1", "max_tokens": -3}, 400, "'max_tokens' must be a positive integer"),
        ("/v1/completions", {"prompt": "w1", "temperature": -1}, 400, "'temperature' must be >= 0"),
        ("/v1/completions", {"prompt": "w1", "model": "other"}, 404, "The model `other` does not exist."),
        ("/v1/chat/completions", {"messages": "hi"}, 400, "'messages' must be a non-empty array"),
    ]
    for path, body, code, message in cases:
        status, err = post(dflash_url + path, body)
        assert (status, err["error"]["code"]) == (code, code), (path, body, err)
        assert message in err["error"]["message"]
    status, ok = post(f"{dflash_url}/v1/completions", {"prompt": "w1 w2", "max_tokens": 3})
    assert status == 200 and ok["usage"]["completion_tokens"] <= 3


def test_serve_command_errors_are_one_line(pair):
    runner = CliRunner()
    missing = runner.invoke(app, ["serve", "--model", "/no/such/model", "--method", "ar"])
    assert missing.exit_code == 2 and missing.output.strip() == (
        "error: --model /no/such/model: no such directory (or random:SHAPE for random weights)")
    medusa = runner.invoke(app, ["serve", "--model", pair[0], "--method", "medusa"])
    assert medusa.exit_code == 2 and "unknown method 'medusa' for serve; choose ar, dflash, eagle3 or ngram" in medusa.output
    no_draft = runner.invoke(app, ["serve", "--model", pair[0], "--method", "dflash"])
    assert no_draft.exit_code == 2 and "--method dflash needs --draft DIR" in no_draft.output
    no_head = runner.invoke(app, ["serve", "--model", pair[0], "--method", "eagle3"])
    assert no_head.exit_code == 2 and "--method eagle3 needs --draft DIR (an EAGLE-3 head" in no_head.output
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = runner.invoke(app, ["serve", "--model", pair[0], "--method", "ar", "--port", str(port)])
    assert taken.exit_code == 2
    assert taken.output.startswith(f"error: cannot listen on 127.0.0.1:{port}: Address already in use")
    assert "Traceback" not in taken.output


def test_serve_names_the_embedded_pair_it_loads_not_this_machines_path():
    """Issue #52: `dflashbench serve` on the embedded pair said "loading /home/…/dflashbench/embedded/target (method
    dflash, draft /home/…/dflashbench/embedded/dflash)"; a name does. The line is printed before the load, so the
    server is stopped as soon as it is read."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "dflashbench", "serve", "--port", str(free_port())],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        line = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert line.startswith("dflashbench serve: loading the embedded tiny target (method dflash, draft the embedded "
                           "DFlash drafter) on cpu"), line  # fmt: skip
    assert "embedded/" not in line


def test_client_gone_mid_stream_is_no_server_error(pair, tmp_path):
    """A client that disconnects mid-stream (a sweep stopped mid-point) ends its request in the engine and
    leaves no "Error handling request" traceback in the server's log (seen on a GPU run before the fix)."""
    import socket
    import time

    server, url = launch(pair, "ar", tmp_path)
    try:
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps({"prompt": "w1 w2", "max_tokens": 4000, "stream": True, "ignore_eos": True})
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n{body}".encode())  # fmt: skip
            seen = b""
            while b"data: {" not in seen:  # headers first, then the first event
                seen += sock.recv(4096)
        for _ in range(200):
            if 'finished_reason="abort",model_name="tiny"} 1.0' in get(url + "/metrics"):
                break
            time.sleep(0.05)
        assert 'finished_reason="abort",model_name="tiny"} 1.0' in get(url + "/metrics")
        time.sleep(0.5)
    finally:
        server.stop()
    log = (tmp_path / "server-reference-ar.log").read_text()
    assert "Error handling request" not in log and "Traceback" not in log, log
