"""Which vLLM a sweep starts: under either distribution name, in this interpreter or another venv on PATH."""

import os
import sys
from pathlib import Path

import pytest

from dflashbench.backends import vllm_install
from dflashbench.backends.vllm_install import VllmInstall, find_vllm


def fake_venv(root: Path, dists: dict[str, str]) -> Path:
    """Another virtual environment: a `python` that sees only its own site (dist-info metadata, nothing to
    import) and a `vllm` console script whose #! line names that python, as pip writes it."""
    site, bin_dir = root / "site", root / "bin"
    site.mkdir(parents=True)
    bin_dir.mkdir()
    for dist, version in dists.items():
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    python = bin_dir / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} -I -S -c 'import sys; sys.path.insert(0, "
                      f'"{site}"); exec(sys.argv[2])\' "$@"\n')  # fmt: skip
    python.chmod(0o755)
    script = bin_dir / "vllm"
    script.write_text(f"#!{python}\nraise SystemExit('not to be run')\n")
    script.chmod(0o755)
    return bin_dir


@pytest.fixture
def on_path(monkeypatch):
    def put(bin_dir: Path) -> None:
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    return put


def test_the_cpu_build_in_another_venv_is_found_with_its_version_and_broken_wheels(tmp_path, on_path):
    bin_dir = fake_venv(tmp_path, {"vllm-cpu": "0.32.0", "torchvision": "0.28.0", "torchcodec": "0.17.0"})
    on_path(bin_dir)
    install = find_vllm()
    assert install == VllmInstall("vllm-cpu", "0.32.0", str(bin_dir / "python"), str(bin_dir / "vllm"),
                                  ("torchvision", "torchcodec"))  # fmt: skip
    assert install.cpu_build and install.describe() == "vllm-cpu 0.32.0 (CPU build)"
    assert install.record() == {"name": "vllm", "distribution": "vllm-cpu", "version": "0.32.0", "build": "CPU"}


def test_the_cuda_build_is_named_vllm_and_wins_over_a_cpu_build_beside_it(tmp_path, on_path):
    bin_dir = fake_venv(tmp_path, {"vllm": "0.33.0", "vllm-cpu": "0.32.0", "torchvision": "0.28.0"})
    on_path(bin_dir)
    install = find_vllm()
    assert (install.distribution, install.version, install.build) == ("vllm", "0.33.0", "CUDA")
    assert install.broken_wheels == ()  # torchvision is the CUDA build's business


def test_nothing_on_path_reads_this_interpreter_and_may_find_none(tmp_path, on_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no vllm script anywhere
    monkeypatch.setattr(vllm_install, "_probe_here", lambda: {"vllm": None, "vllm-cpu": None})
    assert find_vllm() is None
    monkeypatch.setattr(vllm_install, "_probe_here", lambda: {"vllm": None, "vllm-cpu": "0.32.0", "torchaudio": "2.11"})
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}.")  # a new PATH: asked again, not the cached answer
    assert find_vllm() == VllmInstall("vllm-cpu", "0.32.0", sys.executable, None, ("torchaudio",))


def test_the_nox_session_removes_exactly_the_wheels_that_break_the_cpu_build():
    noxfile = (Path(__file__).resolve().parents[2] / "noxfile.py").read_text()
    assert f"VLLM_CPU_BROKEN_WHEELS = {vllm_install.BROKEN_WHEELS!r}" in noxfile
