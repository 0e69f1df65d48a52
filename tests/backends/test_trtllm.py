"""TensorRT-LLM backend: exact argv and YAML per method; iteration stats accumulated over HTTP."""

import asyncio
import json
import tempfile
from pathlib import Path

import aiohttp
import pytest
import yaml
from engine_http_stub import http_stub

from dflashbench.backends import get_backend
from dflashbench.backends.base import Backend, ServerSpec
from dflashbench.errors import UserError
from dflashbench.types import AcceptCounters, CounterResetError, Method

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "exposition"
MODEL = "Qwen/Qwen3-8B"
TMP = Path(tempfile.gettempdir()) / "dflashbench"


def plan(**kw):
    return get_backend("trtllm").launch_plan(ServerSpec(model=MODEL, **kw))


def test_is_a_backend():
    backend = get_backend("trtllm")
    assert isinstance(backend, Backend)
    assert backend.name == "trtllm" and backend.health_path() == "/health"


def test_ar_argv_and_yaml():
    p = plan(method=Method.AR)
    assert p.argv == (
        "trtllm-serve", "serve", MODEL, "--backend", "pytorch",
        "--host", "127.0.0.1", "--port", "8000", "--tp_size", "1", "--config", str(TMP / "trtllm-ar-8000.yaml"),
    )  # fmt: skip
    assert p.files == {str(TMP / "trtllm-ar-8000.yaml"): "enable_iter_perf_stats: true\n"}


def test_dflash_argv_and_yaml_with_tp_ep_and_extra_args_last():
    p = plan(
        method=Method.DFLASH,
        draft="z-lab/Qwen3-8B-DFlash-b16",
        draft_block_size=16,
        tp=8,
        ep=8,
        port=8123,
        extra_args=("--max_batch_size", "64", "--kv_cache_free_gpu_memory_fraction", "0.8"),
    )
    assert p.argv == (
        "trtllm-serve", "serve", MODEL, "--backend", "pytorch",
        "--host", "127.0.0.1", "--port", "8123", "--tp_size", "8", "--ep_size", "8",
        "--config", str(TMP / "trtllm-dflash-8123.yaml"),
        "--max_batch_size", "64", "--kv_cache_free_gpu_memory_fraction", "0.8",
    )  # fmt: skip
    text = p.files[str(TMP / "trtllm-dflash-8123.yaml")]
    assert text == (
        "enable_iter_perf_stats: true\n"
        "speculative_config:\n"
        "  decoding_type: DFlash\n"
        "  max_draft_len: 15\n"
        "  speculative_model: z-lab/Qwen3-8B-DFlash-b16\n"
    )
    assert yaml.safe_load(text)["speculative_config"]["max_draft_len"] == 15


def test_eagle3_yaml():
    p = plan(method=Method.EAGLE3, draft="/models/eagle3 head", num_speculative_tokens=4)
    assert p.argv[-2:] == ("--config", str(TMP / "trtllm-eagle3-8000.yaml"))
    assert Path(p.argv[-1]).is_absolute()  # resolves whatever directory the server runs in
    assert yaml.safe_load(p.files[p.argv[-1]]) == {
        "enable_iter_perf_stats": True,
        "speculative_config": {
            "decoding_type": "Eagle3",
            "max_draft_len": 4,
            "speculative_model": "/models/eagle3 head",
        },
    }


def test_dflash_block_size_from_local_draft(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"block_size": 8}))
    p = plan(method=Method.DFLASH, draft=str(tmp_path))
    assert yaml.safe_load(p.files[p.argv[-1]])["speculative_config"]["max_draft_len"] == 7


def test_refusals_name_the_problem():
    with pytest.raises(UserError, match=r"no data-parallel replicas .* set engine_config = \{ enable_attention_dp"):
        plan(method=Method.AR, dp=2)
    with pytest.raises(UserError, match="trtllm dflash needs a DFlash drafter"):
        plan(method=Method.DFLASH)


def test_dflash_block_from_the_registry_and_from_the_checkpoint_without_it():
    p = plan(method=Method.DFLASH, draft="z-lab/Qwen3-8B-DFlash-b16", draft_block_size=10)
    assert yaml.safe_load(p.files[p.argv[-1]])["speculative_config"]["max_draft_len"] == 9
    explicit = plan(method=Method.DFLASH, draft="someone/unknown-DFlash", num_speculative_tokens=7)
    assert yaml.safe_load(explicit.files[explicit.argv[-1]])["speculative_config"]["max_draft_len"] == 7
    # unknown here: no guess; max_draft_len is optional in DFlashDecodingConfig and TensorRT-LLM reads the block
    unknown = plan(method=Method.DFLASH, draft="someone/unknown-DFlash")
    config = yaml.safe_load(unknown.files[unknown.argv[-1]])["speculative_config"]
    assert "max_draft_len" not in config and config["speculative_model"] == "someone/unknown-DFlash"
    assert any("reads the block from the drafter's checkpoint" in n for n in unknown.notes)


def test_max_batch_size_flag_before_config_and_extra_args():
    p = plan(method=Method.AR, max_running_requests=256, extra_args=("--kv_cache_free_gpu_memory_fraction", "0.8"))
    assert p.argv[-6:] == (
        "--max_batch_size", "256", "--config", str(TMP / "trtllm-ar-8000.yaml"),
        "--kv_cache_free_gpu_memory_fraction", "0.8",
    )  # fmt: skip


def test_engine_config_is_merged_into_the_yaml():
    p = plan(
        method=Method.DFLASH,
        draft="z-lab/gpt-oss-120b-DFlash",
        draft_block_size=16,
        tp=8,
        engine_config={"enable_attention_dp": True, "speculative_config": {"attention_backend": "FA4"}},
    )
    assert yaml.safe_load(p.files[p.argv[-1]]) == {
        "enable_iter_perf_stats": True,
        "speculative_config": {
            "decoding_type": "DFlash",
            "max_draft_len": 15,
            "speculative_model": "z-lab/gpt-oss-120b-DFlash",
            "attention_backend": "FA4",
        },
        "enable_attention_dp": True,
    }


def test_engine_config_cannot_change_what_dflashbench_writes():
    with pytest.raises(UserError, match="cannot set speculative_config.max_draft_len: .* num_speculative_tokens"):
        plan(method=Method.DFLASH, draft="d", draft_block_size=16,
             engine_config={"speculative_config": {"max_draft_len": 7}})  # fmt: skip
    with pytest.raises(UserError, match="cannot set enable_iter_perf_stats"):
        plan(method=Method.AR, engine_config={"enable_iter_perf_stats": False})
    same = plan(method=Method.AR, engine_config={"enable_iter_perf_stats": True})  # restating it is harmless
    assert yaml.safe_load(same.files[same.argv[-1]]) == {"enable_iter_perf_stats": True}


def test_concurrency_cap_is_the_max_batch_size_that_wins():
    backend = get_backend("trtllm")

    def cap(**kw):
        return backend.concurrency_cap(ServerSpec(method=Method.AR, model=MODEL, **kw))

    assert cap() is None  # trtllm-serve's own default, not read from its source
    assert cap(max_running_requests=256) == 256
    assert cap(max_running_requests=256, extra_args=("--max_batch_size", "64")) == 64
    assert cap(max_running_requests=256, extra_args=("--max_batch_size", "64"),
               engine_config={"max_batch_size": 32}) == 32  # fmt: skip  # the YAML overrides the flags


def stats_page(name):
    return (FIXTURES / name).read_text()


def test_iteration_stats_accumulate_across_drains():
    dflash = json.loads(stats_page("trtllm_metrics_dflash.json"))
    pages = iter([json.dumps(dflash[:1]), "[]", json.dumps(dflash[1:]), "[]"])

    async def go():
        backend = get_backend("trtllm")
        async with http_stub({("GET", "/metrics"): lambda: next(pages, "[]")}) as (url, _):
            async with aiohttp.ClientSession() as session:
                await backend.reset_cache(session, url)  # no-op: no HTTP call
                first = await backend.read_counters(session, url)
                second = await backend.read_counters(session, url)  # nothing new: same totals
                third = await backend.read_counters(session, url)
        return first, second, third

    first, second, third = asyncio.run(go())
    assert first == AcceptCounters(drafts=2, draft_tokens=30, accepted_tokens=13)
    assert second == first
    assert third == AcceptCounters(drafts=5, draft_tokens=75, accepted_tokens=29)
    window = third.minus(first)
    assert 1 + window.accepted_tokens / window.drafts == pytest.approx(1 + 16 / 3)


def test_background_poll_keeps_iterations_that_would_fall_out_of_the_queue(monkeypatch):
    """trtllm-serve keeps at most 1000 iterations; the backend drains in the background in between."""
    import dflashbench.backends.trtllm as trtllm

    monkeypatch.setattr(trtllm, "POLL_INTERVAL_S", 0.01)
    dflash = json.loads(stats_page("trtllm_metrics_dflash.json"))
    pages = iter([json.dumps(dflash[:1]), json.dumps(dflash[1:2]), json.dumps(dflash[2:])])

    async def go():
        backend = get_backend("trtllm")
        async with http_stub({("GET", "/metrics"): lambda: next(pages, "[]")}) as (url, calls):
            async with aiohttp.ClientSession() as session:
                first = await backend.read_counters(session, url)
                await asyncio.sleep(0.2)  # the window: only the poller reads meanwhile
                last = await backend.read_counters(session, url)
        return first, last, len(calls)

    first, last, n_calls = asyncio.run(go())
    assert n_calls >= 3
    assert last.minus(first) == AcceptCounters(drafts=3, draft_tokens=45, accepted_tokens=16)


def test_new_server_on_same_address_restarts_totals_and_ar_has_none():
    dflash = stats_page("trtllm_metrics_dflash.json")
    ar = stats_page("trtllm_metrics_ar.json")  # iter 587 again: a new (AR) server on the same port
    pages = iter([dflash, ar])

    async def go():
        backend = get_backend("trtllm")
        async with http_stub({("GET", "/metrics"): lambda: next(pages, "[]")}) as (url, _):
            async with aiohttp.ClientSession() as session:
                return await backend.read_counters(session, url), await backend.read_counters(session, url)

    spec_server, ar_server = asyncio.run(go())
    assert spec_server.drafts == 5
    assert ar_server is None


def test_restart_inside_a_window_is_a_counter_reset():
    dflash = json.loads(stats_page("trtllm_metrics_dflash.json"))
    restarted = [dict(dflash[0], iter=3)]
    pages = iter([json.dumps(dflash), json.dumps(restarted)])

    async def go():
        backend = get_backend("trtllm")
        async with http_stub({("GET", "/metrics"): lambda: next(pages, "[]")}) as (url, _):
            async with aiohttp.ClientSession() as session:
                return await backend.read_counters(session, url), await backend.read_counters(session, url)

    before, after = asyncio.run(go())
    with pytest.raises(CounterResetError):
        after.minus(before)


def test_served_model_name_is_passed_when_given():
    p = plan(method=Method.AR, served_model_name="qwen3-8b")
    assert p.argv[7:11] == ("--port", "8000", "--served_model_name", "qwen3-8b")


def test_launched_server_finds_its_yaml_whatever_its_working_directory(tmp_path, monkeypatch):
    """The plan as ServerProcess runs it (the sweep gives no cwd): a stand-in for trtllm-serve reads --config."""
    import sys
    import time
    from dataclasses import replace

    from dflashbench.backends.process import ServerProcess

    monkeypatch.chdir(tmp_path)  # the server inherits some unrelated working directory
    p = plan(method=Method.DFLASH, draft="z-lab/Qwen3-8B-DFlash-b16", draft_block_size=16, port=18555)
    reader = "import sys; a = sys.argv; print(open(a[a.index('--config') + 1]).read())"
    stand_in = replace(p, argv=(sys.executable, "-c", reader, *p.argv[1:]))
    with ServerProcess(stand_in, tmp_path / "run" / "server-trtllm-dflash.log", name="stand-in") as server:
        deadline = time.monotonic() + 30
        while server.returncode is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.returncode == 0, server.log_tail()
        log = (tmp_path / "run" / "server-trtllm-dflash.log").read_text()
    assert "decoding_type: DFlash" in log and "max_draft_len: 15" in log
