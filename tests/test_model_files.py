"""The models' own files (issue #33): config.json read from a local folder or a Hugging Face cache, the facts in
it, `models check` against the registry, the block size a launch uses, and the gated-repository check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.errors import UserError
from dflashbench.model_files import (
    check_access,
    draft_facts,
    is_hub_id,
    layer_pattern,
    read_json,
    target_facts,
)
from dflashbench.plan import models
from dflashbench.plan.pairing import read_own_files, resolve
from dflashbench.plan.suite_overrides import apply_overrides
from dflashbench.plan.suites import load_suite

REV = "0123456789abcdef0123456789abcdef01234567"
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "vocab_size": 151936, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 4096}
QWEN3_8B_DRAFTER = {"architectures": ["DFlashDraftModel"], "block_size": 16, "num_target_layers": 36,
                    "vocab_size": 151936, "layer_types": ["full_attention"] * 5,
                    "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]}}  # fmt: skip
QWEN3_8B_INDEX = {"metadata": {"total_size": 16_381_470_720}, "weight_map": {}}  # 15.26 GiB


def hf_layout(root: Path, repo: str, files: dict[str, dict]) -> Path:
    """``root/<org>/<name>/`` holding ``files`` (a folder as `hf download --local-dir` leaves it)."""
    folder = root / repo
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_text(json.dumps(data))
    return folder


def hf_cache(root: Path, repo: str, files: dict[str, dict]) -> None:
    """The huggingface_hub cache layout: models--org--name/{refs/main, snapshots/<rev>/<file>}."""
    base = root / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(REV)
    snapshot = base / "snapshots" / REV
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (snapshot / name).write_text(json.dumps(data))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache for this test (huggingface_hub reads the cache path at call time)."""
    import huggingface_hub.constants as hf

    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(root))
    return root


# --- facts (pure) ---------------------------------------------------------------------------------------------


def test_drafter_facts_as_z_lab_writes_them_and_the_dflash_config_variant():
    facts = draft_facts(QWEN3_8B_DRAFTER)
    assert (facts.block_size, facts.target_layer_ids, facts.layers) == (16, (1, 9, 17, 25, 33), "full")
    assert draft_facts({"dflash_config": {"block_size": 8}}).block_size == 8
    assert draft_facts({"block_size": 1}).block_size is None  # a block holds the anchor and at least one mask


@pytest.mark.parametrize(("config", "pattern"), [
    ({"layer_types": ["sliding_attention"] * 4 + ["full_attention"]}, "mixed"),  # Qwen3.6-27B's drafter
    ({"layer_types": ["sliding_attention"] * 6}, "sliding"),
    ({"dflash_config": {"use_swa": True}}, "sliding"),
    ({"layer_types": ["full_attention"] * 5}, "full"),
    ({}, None),
])  # fmt: skip
def test_layer_pattern(config, pattern):
    assert layer_pattern(config) == pattern


def test_target_facts_reach_into_text_config_of_multimodal_checkpoints():
    mm = {"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": {"vocab_size": 248320,
                                                                                 "num_hidden_layers": 64}}
    assert target_facts(mm) == target_facts({**mm, **mm["text_config"]})
    assert target_facts(mm).architecture == "Qwen3_5ForConditionalGeneration"


# --- reading the files ------------------------------------------------------------------------------------------


def test_read_json_from_a_local_folder_and_from_the_hf_cache(tmp_path, cache):
    folder = hf_layout(tmp_path / "models", "z-lab/Qwen3-8B-DFlash-b16", {"config.json": QWEN3_8B_DRAFTER})
    assert read_json(str(folder), network=False).data["block_size"] == 16
    assert not is_hub_id(str(folder)) and is_hub_id("z-lab/Qwen3-8B-DFlash-b16")
    assert read_json("z-lab/Qwen3-8B-DFlash-b16", network=False) is None  # not cached, network not allowed
    hf_cache(cache, "z-lab/Qwen3-8B-DFlash-b16", {"config.json": QWEN3_8B_DRAFTER})
    found = read_json("z-lab/Qwen3-8B-DFlash-b16", network=False)
    assert found.data["block_size"] == 16 and "in the Hugging Face cache" in found.where


# --- models check -----------------------------------------------------------------------------------------------


def _qwen3_8b_files(root: Path, drafter: dict) -> None:
    hf_layout(root, "Qwen/Qwen3-8B", {"config.json": QWEN3_8B, "model.safetensors.index.json": QWEN3_8B_INDEX})
    hf_layout(root, "z-lab/Qwen3-8B-DFlash-b16", {"config.json": drafter})
    hf_layout(root, "RedHatAI/Qwen3-8B-speculator.eagle3",
              {"config.json": {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3"}})


def test_models_check_local_files_that_match(tmp_path):
    _qwen3_8b_files(tmp_path, QWEN3_8B_DRAFTER)
    result = CliRunner().invoke(app, ["models", "check", "qwen3-8b", "--local", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(ln.startswith("ok") and "dflash.block_size" in ln and "16" in ln for ln in lines)
    assert any(ln.startswith("ok") and "weights_gib" in ln and "15.3" in ln for ln in lines)
    assert any(ln.startswith("ok") and "target_layer_ids in range" in ln for ln in lines)
    assert any(ln.startswith("missing") and "architecture" in ln and "Qwen3ForCausalLM" in ln for ln in lines)
    # the memory plan's facts too: the KV geometry, the head's layout; the context the file does not state
    assert [ln.split()[2] for ln in lines if ln.startswith("ok") and " kv." in ln] == \
        ["kv.full_layers", "kv.kv_heads", "kv.head_dim"]
    assert any(ln.startswith("ok") and "eagle3.format" in ln and "'speculators'" in ln for ln in lines)
    assert any(ln.startswith("unchecked") and "context_tokens" in ln for ln in lines)
    assert lines[0] == f"reading {tmp_path}"
    assert lines[-1] == "13 ok, 0 wrong, 5 missing, 1 unchecked"  # vocab_size ok; dflash.architecture missing


def test_models_check_a_wrong_block_size_exits_1_naming_both_values(tmp_path):
    _qwen3_8b_files(tmp_path, {**QWEN3_8B_DRAFTER, "block_size": 10})
    result = CliRunner().invoke(app, ["models", "check", "qwen3-8b", "--local", str(tmp_path)])
    assert result.exit_code == 1
    wrong = [ln for ln in result.output.splitlines() if ln.startswith("wrong")]
    assert len(wrong) == 1 and "dflash.block_size" in wrong[0] and "registry 16, file 10" in wrong[0]


def test_models_check_from_the_hf_cache_and_show_marks_what_was_confirmed(cache):
    hf_cache(cache, "Qwen/Qwen3-8B", {"config.json": QWEN3_8B})
    hf_cache(cache, "z-lab/Qwen3-8B-DFlash-b16", {"config.json": {**QWEN3_8B_DRAFTER, "vocab_size": 151643}})
    hf_cache(cache, "RedHatAI/Qwen3-8B-speculator.eagle3", {"config.json": {}})
    result = CliRunner().invoke(app, ["models", "check", "qwen3-8b"])
    assert result.exit_code == 1  # the drafter's vocabulary is not the target's
    assert any(ln.startswith("wrong") and "drafter vocab = target's" in ln for ln in result.output.splitlines())
    shown = CliRunner().invoke(app, ["models", "show", "qwen3-8b"]).output
    assert "own files    hf_id: confirmed from Qwen/Qwen3-8B/config.json in the Hugging Face cache" in shown
    assert "dflash.block_size: confirmed from z-lab/Qwen3-8B-DFlash-b16/config.json in the Hugging Face cache" in shown


def test_models_check_with_nothing_readable_exits_2(tmp_path):
    result = CliRunner().invoke(app, ["models", "check", "qwen3-8b", "--local", str(tmp_path)])
    assert result.exit_code == 2 and "0 ok, 0 wrong, 0 missing, 3 unchecked" in result.output


# --- the block size a launch uses ------------------------------------------------------------------------------


def test_the_drafters_own_block_size_wins_over_the_registry_with_a_warning(cache):
    hf_cache(cache, "z-lab/Qwen3-8B-DFlash-b16", {"config.json": {**QWEN3_8B_DRAFTER, "block_size": 12}})
    _, pair = resolve(apply_overrides(load_suite("default"), backend="sglang", model="qwen3-8b"))
    assert (pair.dflash_block_size, pair.dflash_block_source.startswith("the model registry")) == (16, True)
    pair, notes = read_own_files(pair, network=False)
    assert pair.dflash_block_size == 12 and "in the Hugging Face cache" in pair.dflash_block_source
    assert notes == ["warning: z-lab/Qwen3-8B-DFlash-b16/config.json in the Hugging Face cache gives block_size 12, "
                     "the model registry 16: using 12, the engine's own file (dflashbench models check qwen3-8b lists "
                     "every difference)"]  # fmt: skip


def test_a_dry_run_says_which_block_size_it_used_and_from_where(tmp_path):
    drafter = hf_layout(tmp_path, "me/drafter", {"config.json": {**QWEN3_8B_DRAFTER, "block_size": 10,
                                                                 "layer_types": ["sliding_attention"] * 5}})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-m", "dflashbench", "sweep", "--backend", "vllm", "--model", "qwen3-8b",
                          "--draft", f"dflash={drafter}", "--method", "ar,dflash", "--dry-run"], env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"plan: DFlash block 10 (9 draft tokens a step), from {drafter / 'config.json'}" in out.stdout
    assert '"num_speculative_tokens":9' in out.stdout
    assert "plan: dflash: the drafter has sliding sliding-window layers: vLLM reads them from 0.25.0" in out.stdout


# --- gated repositories, before any server starts ---------------------------------------------------------------


def test_offline_access_check_passes_cached_repos_and_names_the_missing_one(cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hf_cache(cache, "z-lab/Qwen3-8B-DFlash-b16", {"config.json": QWEN3_8B_DRAFTER})
    check_access(["z-lab/Qwen3-8B-DFlash-b16"])
    with pytest.raises(UserError, match="HF_HUB_OFFLINE is set and Qwen/Qwen3-8B is not in the Hugging Face cache"):
        check_access(["z-lab/Qwen3-8B-DFlash-b16", "Qwen/Qwen3-8B"])


@pytest.fixture
def hub():
    """A loopback stand-in for the Hub's auth-check endpoint: the drafter is gated for this token, the target is
    readable (answers as the Hub does: 403 with X-Error-Code GatedRepo)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            gated = "/api/models/z-lab/Qwen3.6-27B-DFlash/auth-check" in self.path
            self.send_response(403 if gated else 200)
            if gated:
                self.send_header("X-Error-Code", "GatedRepo")
                self.send_header("X-Error-Message", "Access to model z-lab/Qwen3.6-27B-DFlash is restricted.")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_gated_drafter_stops_the_sweep_before_any_server_naming_the_repo(hub, tmp_path):
    env = {**os.environ, "HF_ENDPOINT": hub, "HF_HUB_CACHE": str(tmp_path), "CUDA_VISIBLE_DEVICES": "",
           "HF_HUB_OFFLINE": "0", "HF_TOKEN": "hf_test_token_not_real"}  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "dflashbench", "sweep", "--backend", "vllm", "--model", "qwen3.6-27b",
                          "-o", str(tmp_path / "results")], env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert ("z-lab/Qwen3.6-27B-DFlash is gated and your Hugging Face token cannot read it: accept its terms at "
            "https://huggingface.co/z-lab/Qwen3.6-27B-DFlash") in out.stderr
    assert not (tmp_path / "results").exists()  # nothing written, nothing launched
    assert "hf_test_token_not_real" not in out.stdout + out.stderr
    assert models.require("qwen3.6-27b").dflash.gated


def test_models_check_names_a_kv_geometry_the_config_contradicts(tmp_path):
    _qwen3_8b_files(tmp_path, QWEN3_8B_DRAFTER)
    hf_layout(tmp_path, "Qwen/Qwen3-8B", {"config.json": {**QWEN3_8B, "num_key_value_heads": 4},
                                          "model.safetensors.index.json": QWEN3_8B_INDEX})  # fmt: skip
    result = CliRunner().invoke(app, ["models", "check", "qwen3-8b", "--local", str(tmp_path)])
    assert result.exit_code == 1
    wrong = [ln for ln in result.output.splitlines() if ln.startswith("wrong")]
    assert len(wrong) == 1 and "kv.kv_heads" in wrong[0] and "registry 8, file 4" in wrong[0]
