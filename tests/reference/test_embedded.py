"""The embedded pair as shipped: where it lives, its size, losslessness and acceptance on the demo prompts, and
loading it from an installed wheel (no source tree around)."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from dflashbench.embedded import default_paths, name_of
from dflashbench.reference.corpus import demo_prompts
from dflashbench.reference.decode import SamplingParams, generate
from dflashbench.reference.dflash.checkpoint import check_draft_fits, load_draft
from dflashbench.reference.dflash.drafter import DFlashDrafter
from dflashbench.reference.drafters import NullDrafter
from dflashbench.reference.target import load_target

ROOT = Path(__file__).resolve().parents[2]
NUM_DEMO_PROMPTS = 24  # the synthetic workload's default


def test_messages_name_the_embedded_pair_however_its_folders_are_written():
    """Issue #52: a name where this machine's path says nothing more; any other model as given."""
    paths = default_paths()
    assert name_of(paths.target) == name_of(str(paths.target)) == "the embedded tiny target"
    assert name_of("dflashbench/embedded/target") == name_of("embedded") == "the embedded tiny target"
    assert name_of(paths.dflash) == "the embedded DFlash drafter"
    assert name_of("dflashbench/embedded/eagle3") == "the embedded EAGLE-3 head"
    for other in ("Qwen/Qwen3-8B", "/models/target", "random:qwen3-8b", "embedded/target", "dflashbench/embedded"):
        assert name_of(other) == other


@pytest.fixture(scope="module")
def pair():
    paths = default_paths()
    target = load_target(paths.target)
    draft = load_draft(paths.dflash)
    check_draft_fits(draft.config, target)
    return target, draft


def test_the_pair_lives_inside_the_package_and_fits_the_size_budget():
    paths = default_paths()
    package = Path(__file__).resolve().parents[2] / "dflashbench" / "embedded"
    assert paths.target.parent.resolve() == package.resolve()
    size = sum(f.stat().st_size for d in (paths.target, paths.dflash) for f in d.rglob("*") if f.is_file())
    assert size <= 25 * 2**20
    assert not (paths.target / "checkpoint").exists() and not (paths.dflash / "checkpoint").exists()
    making = (package / "MAKING.md").read_text()
    assert "dflashbench train target" in making and "dflashbench train draft" in making


def test_shipped_pair_is_lossless_on_every_demo_prompt_with_high_tau_on_math_and_code(pair):
    target, draft = pair
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        taus: dict[str, list[float]] = {}
        params = SamplingParams(64, 0.0, tuple(target.stop_token_ids()))
        for conv in demo_prompts(NUM_DEMO_PROMPTS, seed=0):
            ids = target.tokenizer.apply_chat_template(
                conv.messages(with_answer=False), add_generation_prompt=True, enable_thinking=False,
                tokenize=True, return_dict=False,
            )  # fmt: skip
            ar = generate(target, NullDrafter(), ids, params)
            df = generate(target, DFlashDrafter(draft, target), ids, params)
            assert df.token_ids == ar.token_ids, conv.user
            taus.setdefault(conv.category, []).append(df.tau)
    finally:
        torch.set_num_threads(before)
    mean = {c: sum(v) / len(v) for c, v in taus.items()}
    assert mean["math"] >= 4 and mean["code"] >= 4, mean  # the drafter really was trained for this target
    assert mean["writing"] < min(mean["math"], mean["code"]), mean


@pytest.mark.slow
def test_installed_package_loads_the_pair_and_generates(tmp_path):
    """Wheel from a copy of the project -> pip install --target -> a process outside the repo uses the pair."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "checkpoint")
    shutil.copytree(ROOT / "dflashbench", src / "dflashbench", ignore=ignore)
    if (ROOT / "suites").is_dir():
        shutil.copytree(ROOT / "suites", src / "suites", ignore=ignore)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", str(src), "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist")],
                   check=True, cwd=tmp_path, timeout=300)  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("dflashbench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for rel in ("target/config.json", "target/model.safetensors", "target/tokenizer.json", "dflash/config.json",
                "dflash/model.safetensors", "MAKING.md"):
        assert f"dflashbench/embedded/{rel}" in names, rel
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True, timeout=300)
    code = (
        "import dflashbench, torch\n"
        "from dflashbench.embedded import default_paths\n"
        "from dflashbench.reference.target import load_target\n"
        "from dflashbench.reference.dflash.checkpoint import load_draft\n"
        "from dflashbench.reference.decode import dflash_decode\n"
        "p = default_paths(); t = load_target(p.target); d = load_draft(p.dflash)\n"
        "ids = t.tokenizer.apply_chat_template([{'role': 'user', 'content': 'Write a Python function `fib(n)` "
        "that returns the n-th Fibonacci number.'}], add_generation_prompt=True, enable_thinking=False, "
        "tokenize=True, return_dict=False)\n"
        "g = dflash_decode(t, d, ids, max_new_tokens=16, stop_token_ids=t.stop_token_ids())\n"
        "print(dflashbench.__file__); print(p.target); print(len(g.token_ids)); print(t.tokenizer.decode(g.token_ids))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                         check=True, timeout=300)  # fmt: skip
    module, target_dir, n, text = out.stdout.split("\n", 3)
    assert Path(module).resolve().is_relative_to(site.resolve())
    assert Path(target_dir).resolve().is_relative_to(site.resolve())
    assert int(n) == 16 and text.strip()
