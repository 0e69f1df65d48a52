"""Test sessions. `nox` alone runs the default `tests` session (what CI runs)."""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.default_venv_backend = "venv"

# The CPU build of torch: on a machine without a GPU this avoids a multi-GB CUDA download.
# Override with DFLASHBENCH_TORCH="torch" (or a CUDA pin) on GPU runners.
TORCH = os.environ.get("DFLASHBENCH_TORCH", "torch==2.13.0")


def install_project(session: nox.Session, extras: str = "test,datasets") -> None:
    session.install(TORCH)
    session.install("-e", f".[{extras}]")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit tests, the reference decoder, real processes over loopback, the report in a headless browser."""
    install_project(session)
    session.run("pytest", "-q", "-m", "not gpu", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", "dflashbench", "tests", "noxfile.py")


@nox.session
def e2e(session: nox.Session) -> None:
    """The embedded default end to end, as the README's first command runs it."""
    install_project(session)
    session.run("dflashbench", "sweep", "-o", str(session.create_tmp()))


@nox.session
def gpu(session: nox.Session) -> None:
    """GPU-only tests (NVML telemetry, the reference decoder on CUDA). Skips cleanly without CUDA."""
    session.install(os.environ.get("DFLASHBENCH_TORCH", "torch"))
    session.install("-e", ".[test,gpu]")
    session.run("pytest", "-q", "-m", "gpu", *session.posargs)
