"""What a run records about where it ran: versions, git commit, host, GPUs. Written into manifest.json.

Nothing here imports torch, transformers or an engine: versions come from package metadata, so building a
manifest is instant and cannot fail because an optional package is missing.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from dflashbench import __version__

PACKAGES = ("torch", "transformers", "aiohttp", "numpy", "pandas", "vllm", "sglang", "tensorrt_llm", "nvidia-ml-py")


def now_iso() -> str:
    """The current UTC time, ISO 8601 with seconds."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each package (``None`` where it is not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_info(path: Path | None = None) -> dict[str, Any]:
    """Commit of the dflashbench source tree, and whether it had uncommitted changes (``None`` when the
    package is not running from a git checkout, e.g. installed from a wheel)."""
    where = path or Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {"git_sha": None, "git_dirty": None}
    return {"git_sha": sha or None, "git_dirty": bool(dirty)}


def host_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }


def gpu_summary() -> dict[str, Any]:
    """GPU model, count and driver via :mod:`dflashbench.telemetry`, or ``"no NVIDIA GPU"`` plainly."""
    try:
        from dflashbench.telemetry import gpu_info
    except ImportError:
        return {"gpu": "no NVIDIA GPU", "gpu_count": 0, "reason": "dflashbench.telemetry is not available"}
    return gpu_info()


def environment() -> dict[str, Any]:
    """Everything about the machine and software a manifest records (secrets are never read here)."""
    return {
        "dflashbench_version": __version__,
        **git_info(),
        "versions": {"python": sys.version.split()[0], **package_versions()},
        "host": host_info(),
        "gpu": gpu_summary(),
        "argv": list(sys.argv),
    }
