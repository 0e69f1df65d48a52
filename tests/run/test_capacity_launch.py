"""The truth at launch (dflashbench.run.capacity), end to end: ``dflashbench sweep --backend vllm`` launches a fake
``vllm`` (tests/run/fake_vllm.py, a real process on PATH) whose log lines are built from vLLM 0.33.0's format strings
and report less KV than the memory plan planned. The sweep reads that report before the server's first point:
below the top concurrency it refuses, having measured nothing; above it, the next server starts capped to the
first one's real capacity in bytes. The manifest keeps the engine's figures beside the plan's either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

FAKE = Path(__file__).parent / "fake_vllm.py"
REV = "0" * 40
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
            "vocab_size": 151936}  # fmt: skip
DRAFTER = {"architectures": ["DFlashDraftModel"], "block_size": 16, "num_hidden_layers": 5, "num_key_value_heads": 8,
           "head_dim": 128, "dflash_config": {"target_layer_ids": [1, 9, 17, 25, 33]}}  # fmt: skip


def cached(root: Path, repo: str, config: dict) -> None:
    """``config.json`` in the huggingface_hub cache layout (models--org--name/snapshots/<rev>/)."""
    base = root / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(REV)
    (base / "snapshots" / REV).mkdir(parents=True, exist_ok=True)
    (base / "snapshots" / REV / "config.json").write_text(json.dumps(config))


@pytest.fixture
def fake_vllm(tmp_path):
    """PATH with the fake ``vllm`` first, its distribution metadata (vllm 0.33.0) importable, the models' config.json
    in an offline Hugging Face cache, and a suite for qwen3-8b (AR and DFlash, c = 1 and 2)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "vllm"
    script.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {str(FAKE)!r}\n"
                      f"runpy.run_path({str(FAKE)!r}, run_name='__main__')\n")  # fmt: skip
    script.chmod(0o755)
    meta = tmp_path / "meta" / "vllm-0.33.0.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0\n")
    hub = tmp_path / "hub"
    cached(hub, "Qwen/Qwen3-8B", QWEN3_8B)
    cached(hub, "z-lab/Qwen3-8B-DFlash-b16", DRAFTER)
    suite = tmp_path / "fake.toml"
    suite.write_text('name = "fake-vllm"\nbackend = "vllm"\nmethods = ["ar", "dflash"]\nmodel = "qwen3-8b"\n'
                     'concurrency = [1, 2]\nnum_prompts = 2\nrequests_per_stream = 1\nwarmup_requests = 0\n'
                     'max_tokens = 16\ntimeout_s = 60\nready_timeout_s = 60\n'
                     '[[workloads]]\nname = "synthetic"\n')  # fmt: skip
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(meta.parent), os.environ.get("PYTHONPATH")])),
           "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}  # fmt: skip
    return suite, env, tmp_path / "results"


def sweep(suite: Path, env: dict, out: Path, kv_gib: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dflashbench", "sweep", "--suite", str(suite), "--gpu", "1xh100",
                           "-o", str(out), "--no-report"], capture_output=True, text=True,
                          env={**env, "FAKE_VLLM_KV_GIB": str(kv_gib)}, timeout=240)  # fmt: skip


def manifest(out: Path) -> dict:
    (run_dir,) = out.iterdir()
    return json.loads((run_dir / "manifest.json").read_text())


def test_a_server_holding_less_than_the_top_concurrency_is_refused_before_any_point(fake_vllm):
    suite, env, out = fake_vllm
    proc = sweep(suite, env, out, kv_gib=0.01)  # the plan gives DFlash about 53 GiB; the engine reports 0.01
    assert proc.returncode != 0, proc.stdout
    said = proc.stdout + proc.stderr
    assert "the vllm dflash server holds 0 requests" in said and "fewer than the top concurrency 2" in said, said
    assert "no point of it was measured" in said and "--resume" in said
    (run_dir,) = out.iterdir()
    points = run_dir / "points.jsonl"
    assert not points.exists() or points.read_text().strip() == ""  # nothing measured
    m = manifest(out)
    assert list(m["servers"]) == ["dflash"]  # the tightest server started first; AR was never launched
    kv = m["servers"]["dflash"]["kv"]
    assert kv["engine"]["kv_gib"] == 0.01 and kv["engine"]["spec_method"] == "dflash"
    assert kv["engine"]["architectures"] == ["Qwen3ForCausalLM", "DFlashDraftModel"]
    assert kv["engine"]["runner"] == "V1"  # no "Using V2 Model Runner" line in a log with the engine's INFO lines
    assert kv["plan"]["kv_gib"] > 50 and kv["plan"]["requests"] > 100 and kv["capacity_requests"] == 0
    assert m["status"] == "failed" and "holds 0 requests" in m["status_reason"]


def test_later_servers_start_capped_to_the_first_servers_real_capacity(fake_vllm):
    suite, env, out = fake_vllm
    proc = sweep(suite, env, out, kv_gib=10.0)  # less than planned, but enough for c=2
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = manifest(out)
    first, ar = m["servers"]["dflash"]["kv"], m["servers"]["ar"]["kv"]
    common = first["capacity_requests"]
    argv = m["servers"]["ar"]["argv"]
    cap = int(argv[argv.index("--kv-cache-memory-bytes") + 1])
    assert m["capacity"] == {"common": common, "first": "dflash", "caps": {"ar": cap}}
    assert 2 <= common < first["plan"]["requests"]
    assert cap == -(-common * ar["plan"]["request_mib"] // 1) * (1 << 20)  # the real capacity, in AR's bytes
    assert cap != ar["plan"]["cap"]  # not the plan's cap
    assert ar["capacity_requests"] == common  # the cap's bytes, not the engine's 2-decimal print of them
    assert ar["engine"]["kv_gib"] == cap / (1 << 30) and "spec_method" not in ar["engine"]
    assert f"capped to the dflash server's real capacity, {common} requests" in proc.stdout
    points = [json.loads(line) for line in next(out.iterdir()).joinpath("points.jsonl").read_text().splitlines()]
    assert {p["method"] for p in points} == {"ar", "dflash"} and all(p["status"] == "ok" for p in points)
