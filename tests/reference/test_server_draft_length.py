"""`dflashbench serve` honours a draft length and a per-batch-size schedule: real processes on loopback, the embedded
pair, launched as the sweep launches them (ReferenceBackend's argv + ServerProcess). The server counts its steps by
(batch size, draft tokens verified) on /metrics, so what each step verified is read, not guessed."""

from __future__ import annotations

import json
import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from typer.testing import CliRunner

from dflashbench.backends import get_backend
from dflashbench.backends.base import ServerSpec
from dflashbench.backends.counters import parse_vllm_prometheus
from dflashbench.backends.process import ServerProcess, free_port
from dflashbench.cli import app
from dflashbench.reference.draft_length import DraftSchedule
from dflashbench.types import Method

pytestmark = pytest.mark.timeout(300)

SCHEDULE = DraftSchedule.parse("[[1,1,9],[2,8,2]]")
PROMPT = "Write a python function that reverses a list."


def launch(method: Method, run_dir, **spec):
    from dflashbench.embedded import default_paths

    paths = default_paths()
    backend = get_backend("reference")
    draft = {Method.DFLASH: paths.dflash, Method.EAGLE3: paths.eagle3}.get(method)
    spec = ServerSpec(method=method, model=str(paths.target), draft=str(draft) if draft else None, port=free_port(),
                      served_model_name="tiny", env={"OMP_NUM_THREADS": "1"}, **spec)  # fmt: skip
    server = ServerProcess(backend.launch_plan(spec), run_dir / "server.log", name=f"reference {method}").start()
    try:
        server.wait_ready(spec.base_url + backend.health_path(), timeout_s=180, progress=False)
    except BaseException:
        server.stop()
        raise
    return server, spec.base_url


@pytest.fixture(scope="module")
def scheduled_url(tmp_path_factory):
    server, url = launch(Method.DFLASH, tmp_path_factory.mktemp("sched"), draft_schedule=SCHEDULE)
    yield url
    server.stop()


def complete(url: str, max_tokens: int = 40) -> dict:
    body = json.dumps({"messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
                       "temperature": 0}).encode()  # fmt: skip
    req = urllib.request.Request(f"{url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


def metrics(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
        return resp.read().decode()


def steps_by_draft_len(text: str) -> dict[tuple[int, int], float]:
    found = re.findall(r'^dflashbench:spec_decode_steps_total\{[^}]*batch_size="(\d+)",draft_len="(\d+)"[^}]*\} (\S+)$',
                       text, flags=re.M)  # fmt: skip
    return {(int(b), int(k)): float(n) for b, k, n in found}


def test_each_step_verifies_the_schedules_k_for_its_batch_size(scheduled_url):
    alone = complete(scheduled_url)
    assert alone["usage"]["completion_tokens"] > 1
    seen = steps_by_draft_len(metrics(scheduled_url))
    assert seen and set(seen) == {(1, 9)}  # one request at a time: every step verified 9
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda _: complete(scheduled_url), range(4)))
    assert all(r["choices"][0]["message"] == alone["choices"][0]["message"] for r in together)  # greedy: the same output
    seen = steps_by_draft_len(metrics(scheduled_url))
    assert all(k == SCHEDULE.k_at(batch) for batch, k in seen)
    assert any(batch >= 2 and k == 2 for batch, k in seen), seen  # the requests were decoded together, at K 2
    counters = parse_vllm_prometheus(metrics(scheduled_url))
    # every row of a step drafted its k: the server's own counters agree with the steps it counted
    assert counters.drafts == sum(n * batch for (batch, _), n in seen.items())
    assert counters.draft_tokens == sum(n * batch * k for (batch, k), n in seen.items())


def test_a_fixed_k_is_verified_at_every_step(tmp_path):
    server, url = launch(Method.EAGLE3, tmp_path, num_speculative_tokens=3)
    try:
        out = complete(url)
        counters = parse_vllm_prometheus(metrics(url))
    finally:
        server.stop()
    assert out["usage"]["completion_tokens"] > 1 and counters.drafts > 0
    assert counters.draft_tokens == 3 * counters.drafts and len(counters.accepted_per_pos) == 3


def test_a_draft_length_the_drafter_cannot_honour_is_a_one_line_error():
    runner = CliRunner()
    too_long = runner.invoke(app, ["serve", "--method", "dflash", "--num-speculative-tokens-per-batch-size",
                                   "[[1,1,16]]", "--port", str(free_port())])  # fmt: skip
    assert too_long.exit_code == 2 and "drafts at most 15 tokens per step (block size 16)" in too_long.output
    bad = runner.invoke(app, ["serve", "--method", "dflash", "--num-speculative-tokens-per-batch-size", "[[2,4,3]]"])
    assert bad.exit_code == 2 and "--num-speculative-tokens-per-batch-size: the first batch-size range must start at 1" \
        in bad.output
    ar = runner.invoke(app, ["serve", "--method", "ar", "--num-speculative-tokens", "3"])
    assert ar.exit_code == 2 and "--method ar drafts nothing" in ar.output
