"""SGLang backend: exact argv per method, parallelism, extra args; counters and cache flush over HTTP."""

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from engine_http_stub import http_stub

from dflashbench.backends import get_backend
from dflashbench.backends import sglang as sglang_backend
from dflashbench.backends.base import Backend, ServerSpec
from dflashbench.backends.sglang import SglangBackend, mamba_option_names
from dflashbench.errors import UserError
from dflashbench.methods import record
from dflashbench.types import Method

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "exposition"
MODEL = "Qwen/Qwen3-8B"
BASE = ["sglang", "serve", "--model-path", MODEL, "--host", "127.0.0.1", "--port", "8000"]


@pytest.fixture(autouse=True)
def no_local_sglang(monkeypatch):
    """Argv as built where SGLang is not installed (a dry run): the current releases' flags."""
    monkeypatch.setattr(sglang_backend, "installed_sglang_version", lambda: None)


def plan(**kw):
    return get_backend("sglang").launch_plan(ServerSpec(model=MODEL, **kw))


def test_is_a_backend():
    backend = get_backend("sglang")
    assert isinstance(backend, Backend)
    assert backend.name == "sglang" and backend.health_path() == "/health"


def test_ar_argv():
    p = plan(method=Method.AR)
    assert p.argv == (*BASE, "--tp-size", "1", "--enable-metrics")
    assert p.files == {} and p.env == {}


def test_dflash_argv_with_parallelism_name_and_extra_args_last():
    p = plan(
        method=Method.DFLASH,
        draft="z-lab/Qwen3-8B-DFlash-b16",
        draft_block_size=16,
        port=30001,
        tp=4,
        dp=2,
        ep=8,
        served_model_name="qwen3-8b",
        extra_args=("--mem-fraction-static", "0.8"),
        env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"},
    )
    assert p.argv == (
        "sglang", "serve", "--model-path", MODEL, "--host", "127.0.0.1", "--port", "30001",
        "--served-model-name", "qwen3-8b", "--tp-size", "4", "--dp-size", "2", "--ep-size", "8",
        "--enable-metrics",
        "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "z-lab/Qwen3-8B-DFlash-b16",
        "--speculative-num-draft-tokens", "16",
        "--mem-fraction-static", "0.8",
    )  # fmt: skip
    assert p.env == {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}


def test_dflash_block_from_local_draft_and_explicit_length(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"block_size": 10}))
    p = plan(method=Method.DFLASH, draft=str(tmp_path))
    assert p.argv[-2:] == ("--speculative-num-draft-tokens", "10")
    assert plan(method=Method.DFLASH, draft="d", num_speculative_tokens=7).argv[-2:] == (
        "--speculative-num-draft-tokens",
        "8",
    )


def test_dflash_block_from_the_registry_or_left_to_sglang():
    p = plan(method=Method.DFLASH, draft="z-lab/Qwen3-8B-DFlash-b16", draft_block_size=10)
    assert p.argv[-2:] == ("--speculative-num-draft-tokens", "10")
    unknown = plan(method=Method.DFLASH, draft="someone/unknown-DFlash")
    assert unknown.argv[-4:] == (
        "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "someone/unknown-DFlash",
    )  # fmt: skip
    assert "--speculative-num-draft-tokens" not in unknown.argv  # SGLang reads the drafter's config itself


def test_max_running_requests_for_every_method():
    ar = plan(method=Method.AR, max_running_requests=128, dp=2)
    assert ar.argv == (*BASE, "--tp-size", "1", "--dp-size", "2", "--max-running-requests", "128",
                       "--enable-metrics")  # fmt: skip
    eagle = plan(method=Method.EAGLE3, draft="h", max_running_requests=64, extra_args=("--seed", "1"))
    assert eagle.argv[8:12] == ("--tp-size", "1", "--max-running-requests", "64")
    assert eagle.argv[-2:] == ("--seed", "1")


def test_concurrency_cap_speculative_default_is_48_per_replica():
    backend = get_backend("sglang")

    def cap(method, **kw):
        return backend.concurrency_cap(ServerSpec(method=method, model=MODEL, draft="d", **kw))

    assert cap(Method.AR) is None  # sized from KV-cache memory at start-up
    assert cap(Method.DFLASH) == 48 and cap(Method.EAGLE3, dp=2) == 96
    assert cap(Method.AR, max_running_requests=256, dp=2) == 512
    assert cap(Method.DFLASH, max_running_requests=256, extra_args=("--max-running-requests", "32")) == 32


def test_engine_config_is_refused():
    with pytest.raises(UserError, match="sglang takes options as extra arguments"):
        plan(method=Method.AR, engine_config={"enable_attention_dp": True})


def test_eagle3_argv_is_a_chain_of_k():
    p = plan(method=Method.EAGLE3, draft="lmsys/SGLang-EAGLE3-Qwen3-8B")
    assert p.argv == (
        *BASE, "--tp-size", "1", "--enable-metrics",
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "lmsys/SGLang-EAGLE3-Qwen3-8B",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    )  # fmt: skip


def test_missing_draft_is_a_user_error():
    with pytest.raises(UserError, match="sglang eagle3 needs an EAGLE-3 head: pass --draft"):
        plan(method=Method.EAGLE3)


def test_counters_and_flush_over_http():
    pages = iter(
        [(FIXTURES / n).read_text() for n in ("sglang_dflash_before.prom", "sglang_dflash_after.prom")]
    )

    async def go():
        backend = get_backend("sglang")
        routes = {("GET", "/metrics"): lambda: next(pages), ("POST", "/flush_cache"): "Cache flushed.\n"}
        async with http_stub(routes) as (url, calls), aiohttp.ClientSession() as session:
            await backend.reset_cache(session, url)
            before = await backend.read_counters(session, url)
            after = await backend.read_counters(session, url)
        return calls, after.minus(before)

    calls, window = asyncio.run(go())
    assert calls == [("POST", "/flush_cache"), ("GET", "/metrics"), ("GET", "/metrics")]
    assert 1 + window.accepted_tokens / window.drafts == pytest.approx(6.4)


def test_ar_server_or_metrics_disabled_give_no_counters():
    async def go():
        backend = get_backend("sglang")
        ar = (FIXTURES / "sglang_ar.prom").read_text()
        async with http_stub({("GET", "/metrics"): ar}) as (url, _), aiohttp.ClientSession() as session:
            first = await backend.read_counters(session, url)
        async with http_stub({}) as (url, _), aiohttp.ClientSession() as session:
            second = await backend.read_counters(session, url)  # started without --enable-metrics: 404
        return first, second

    assert asyncio.run(go()) == (None, None)


QWEN35_MOE = "Qwen3_5MoeForConditionalGeneration"


@pytest.mark.parametrize("method", [m for m in Method if record(m).runs_on("sglang")])
def test_mamba_extra_buffer_on_old_sglang_for_every_method(method):
    draft = None if method is Method.AR else "z-lab/Qwen3.5-35B-A3B-DFlash"
    p = SglangBackend("0.5.13").launch_plan(ServerSpec(method=method, model="Qwen/Qwen3.5-35B-A3B", draft=draft,
                                                       target_architecture=QWEN35_MOE, extra_args=("--x", "1")))
    assert p.argv[-4:] == ("--mamba-scheduler-strategy", "extra_buffer", "--x", "1")  # before the user's own
    assert p.notes == ("--mamba-scheduler-strategy extra_buffer: SGLang 0.5.13 turns 'auto' into no_buffer, which a "
                       f"speculative server on {QWEN35_MOE} refuses; passed to every method alike",)


@pytest.mark.parametrize("version", ["0.5.14", "0.5.19", "0.5.23", None])
def test_no_mamba_flag_where_auto_is_extra_buffer(version):
    p = SglangBackend(version).launch_plan(ServerSpec(method=Method.AR, model="Qwen/Qwen3.5-4B",
                                                      target_architecture="Qwen3_5ForConditionalGeneration"))
    assert not any("mamba" in a for a in p.argv)
    assert "'auto' resolves to extra_buffer for Qwen3_5ForConditionalGeneration" in p.notes[0]


def test_no_mamba_flag_or_note_for_other_targets():
    p = SglangBackend("0.5.13").launch_plan(ServerSpec(method=Method.AR, model=MODEL, target_architecture="Qwen3ForCausalLM"))
    assert not any("mamba" in a for a in p.argv) and p.notes == ()


def test_mamba_option_names_by_release():
    assert mamba_option_names("0.5.13") == ["--mamba-scheduler-strategy"]
    assert mamba_option_names("0.5.14") == mamba_option_names("0.5.19") == [
        "--mamba-scheduler-strategy", "--mamba-radix-cache-strategy"]
    assert mamba_option_names("0.5.20") == mamba_option_names("0.5.23") == ["--mamba-radix-cache-strategy"]
