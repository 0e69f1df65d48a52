"""Issue #61: `dflashbench serve` serves the target's top-k log-probabilities on /v1/completions for a prompt given as
token ids, in vLLM's shape (tokens named ``token_id:N``), and a chat completion's ``prompt_token_ids``: one real AR
server of the embedded target on loopback, its answers checked against the target run in this process."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
import torch

from dflashbench.backends import get_backend
from dflashbench.backends.base import ServerSpec
from dflashbench.backends.process import ServerProcess, free_port
from dflashbench.embedded import default_paths
from dflashbench.types import Method

pytestmark = pytest.mark.timeout(300)

QUESTION = "What is 12 + 30?"
EMBEDDED_TARGET = str(default_paths().target)


@pytest.fixture(scope="module")
def ar_url(tmp_path_factory):
    backend = get_backend("reference")
    spec = ServerSpec(method=Method.AR, model=EMBEDDED_TARGET, port=free_port(), env={"OMP_NUM_THREADS": "1"})
    log = tmp_path_factory.mktemp("run") / "server-reference-ar.log"
    server = ServerProcess(backend.launch_plan(spec), log, name="reference ar").start()
    try:
        server.wait_ready(spec.base_url + backend.health_path(), timeout_s=180, progress=False)
        yield spec.base_url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def target():
    from dflashbench.reference.target import load_target

    return load_target(EMBEDDED_TARGET)


def post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def chat_prompt_ids(target) -> list[int]:
    text = target.tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}], tokenize=False,
                                                add_generation_prompt=True)  # fmt: skip
    return list(target.tokenizer(text, add_special_tokens=False)["input_ids"])


def test_a_chat_completion_returns_the_prompt_token_ids_its_template_gave(ar_url, target):
    status, body = post(ar_url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 1, "temperature": 0,
        "return_token_ids": True})  # fmt: skip
    assert status == 200, body
    assert body["prompt_token_ids"] == chat_prompt_ids(target)  # at the top, where vLLM puts a chat's
    assert "prompt_token_ids" not in body["choices"][0] and len(body["choices"][0]["token_ids"]) == 1


def test_top_logprobs_on_a_token_id_prompt_are_the_targets_in_vllms_shape(ar_url, target):
    prompt = chat_prompt_ids(target)
    status, body = post(ar_url + "/v1/completions", {
        "prompt": prompt, "max_tokens": 3, "temperature": 0, "logprobs": 4, "return_tokens_as_token_ids": True,
        "return_token_ids": True})  # fmt: skip
    assert status == 200, body
    (choice,) = body["choices"]
    out, lp = choice["token_ids"], choice["logprobs"]
    assert choice["prompt_token_ids"] == prompt  # on a completion's choice, where vLLM puts it
    assert set(lp) == {"text_offset", "token_logprobs", "tokens", "top_logprobs"}
    assert lp["tokens"] == [f"token_id:{t}" for t in out] and len(lp["top_logprobs"]) == len(out) == 3
    with torch.no_grad():
        full = torch.tensor([prompt + out])
        want = target.model(input_ids=full).logits[0, len(prompt) - 1 : -1].float().log_softmax(-1)
    for i, (token, top) in enumerate(zip(out, lp["top_logprobs"], strict=True)):
        ids = [int(k.removeprefix("token_id:")) for k in top]
        best = want[i].topk(4)
        assert ids == best.indices.tolist()  # greedy: the token generated is the top one, listed once
        assert list(top.values()) == pytest.approx(best.values.tolist(), abs=1e-4)
        assert lp["token_logprobs"][i] == pytest.approx(float(want[i, token]), abs=1e-4) and ids[0] == token
    assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"])


def test_logprobs_are_refused_where_they_are_not_served(ar_url):
    cases = [
        ("/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 1, "logprobs": 2, "stream": True},
         "'logprobs' is served on non-streamed requests only"),
        ("/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 1, "logprobs": 21}, "an integer from 0 to 20"),
        ("/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 1, "logprobs": True}, "an integer from 0 to 20"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logprobs": True},
         "served on /v1/completions only"),
    ]  # fmt: skip
    for path, body, said in cases:
        status, answer = post(ar_url + path, body)
        assert status == 400 and said in answer["error"]["message"], (body, answer)
    status, answer = post(ar_url + "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 1, "logprobs": False})
    assert status == 200 and answer["choices"][0]["logprobs"] is None  # false: not asked, as OpenAI reads it
