"""What a run records about where it ran: versions, git commit, host, CPU (model and ISA extensions), GPUs, and each
speculative server's verifier setting. Written into manifest.json.

Nothing here imports torch, transformers or an engine: versions come from package metadata, so building a
manifest is instant and cannot fail because an optional package is missing.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dflashbench import __version__

PACKAGES = ("torch", "transformers", "aiohttp", "uvloop", "orjson", "numpy", "pandas", "vllm", "sglang", "tensorrt_llm",
            "nvidia-ml-py")


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
    where = path or Path(__file__).resolve().parents[2]
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


# The ISA extensions CPU kernels choose their path by (oneDNN and ATen dispatch on them): a divergence between AR and a
# speculative method can follow the kernel path a CPU takes (issue #61: AMX on one Xeon, none on an EPYC).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16")  # fmt: skip
# Environment variables that cap the ISA those libraries use (recorded where set)
ISA_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def cpu_summary(cpuinfo: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The CPU model, vendor, family and model numbers, and which of :data:`ISA_FLAGS` it has (from
    ``/proc/cpuinfo``'s first processor; ``isa`` ``None`` where that cannot be read), with the ISA caps of
    :data:`ISA_ENV` that are set."""
    env = os.environ if env is None else env
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.split("\n\n")[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    out: dict[str, Any] = {"model": fields.get("model name") or platform.processor() or None,
                           "vendor": fields.get("vendor_id"), "family": fields.get("cpu family"),
                           "model_number": fields.get("model"),
                           "isa": [f for f in ISA_FLAGS if f in flags] if flags else None}  # fmt: skip
    caps = {k: env[k] for k in ISA_ENV if env.get(k)}
    if caps:
        out["isa_env"] = caps
    return out


# vLLM's verifier (vllm-project/vllm@v0.32.0: vllm/config/speculative.py#L84 RejectionSampleMethod = "standard",
# "synthetic", "block"; #L529 the default "standard"; #L551 enable_adaptive_verification). Its start-up log does not
# name them (SpeculativeConfig.__repr__ prints method, model and num_spec_tokens only, #L1990-L2004), so the setting
# is read from the --speculative-config the server was launched with, the engine's default where absent.
VLLM_VERIFIERS = {
    "standard": (True, "rejection sampling: greedy accepts a draft only where it is the target's own choice"),
    "block": (True, "block verification (Sun et al.): the drafts verified jointly, the target's distribution kept"),
    "synthetic": (False, "accepts drafts with a decaying probability calibrated to a set acceptance rate, whatever "
                  "the target says"),
}
PLANTED_FLAGS = ("--test-fault", "--test-near-tie-nats", "--test-loose-verify-topk")  # dflashbench serve, tests only


def verifier_record(backend: str, method: str, argv: list[str]) -> dict[str, Any] | None:
    """The verifier a speculative server ran, where dflashbench can tell (vLLM, the reference server): its setting,
    whether it is lossless by design and why; ``None`` for AR and for engines that do not say."""
    if method == "ar":
        return None
    if backend == "vllm":
        spec = _flag_json(argv, "--speculative-config")
        rule = str(spec.get("rejection_sample_method") or "standard")
        adaptive = bool(spec.get("enable_adaptive_verification", False))
        lossless, why = VLLM_VERIFIERS.get(rule, (None, "a rejection_sample_method dflashbench does not know: "
                                                         "check whether it keeps the target's distribution"))
        return {"rejection_sample_method": rule, "enable_adaptive_verification": adaptive,
                "lossless_by_design": lossless, "why": why + ("; adaptive verification sizes how many drafts are "
                                                              "verified, not how" if adaptive else ""),
                "source": "--speculative-config as launched (vLLM's default where absent): its log does not name it"}
    if backend == "reference":  # test switches are said, not judged: the check reads what they did to the outputs
        planted = [a for a in argv if a.split("=")[0] in PLANTED_FLAGS]
        return {"rule": "exact: a draft token is accepted only where it is the target's own choice",
                "lossless_by_design": None if planted else True, **({"planted": planted} if planted else {}),
                "why": (f"test switches planted ({', '.join(planted)}): its outputs are deliberately not the target's"
                        if planted else "the reference decoder's acceptance rule"), "source": "dflashbench serve's argv"}  # fmt: skip
    return None


def _flag_json(argv: list[str], flag: str) -> dict[str, Any]:
    """The JSON object after the last ``flag`` (or ``flag=...``) in ``argv``; ``{}`` where absent or not JSON."""
    found = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    try:
        value = json.loads(found) if found else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def gpu_summary() -> dict[str, Any]:
    """GPU model, count and driver via :mod:`dflashbench.telemetry`, or ``"no NVIDIA GPU"`` plainly."""
    try:
        from dflashbench.telemetry import gpu_info
    except ImportError:
        return {"gpu": "no NVIDIA GPU", "gpu_count": 0, "reason": "dflashbench.telemetry is not available"}
    return gpu_info()


# What a CI job says about the commit it runs on (GitHub Actions' default environment variables,
# https://docs.github.com/en/actions/reference/workflows-and-actions/variables#default-environment-variables):
# the user's commit and ref, which the manifest's git_sha (dflashbench's own checkout) is not.
CI_VARIABLES = {"sha": "GITHUB_SHA", "ref": "GITHUB_REF", "repository": "GITHUB_REPOSITORY", "run_id": "GITHUB_RUN_ID",
                "workflow": "GITHUB_WORKFLOW"}  # fmt: skip


def ci_info(env: dict[str, str] | None = None) -> dict[str, str] | None:
    """The CI job's commit and ref where its variables are set (``None`` outside CI)."""
    env = os.environ if env is None else env
    found = {key: env[var] for key, var in CI_VARIABLES.items() if env.get(var)}
    return found or None


def environment() -> dict[str, Any]:
    """Everything about the machine and software a manifest records (secrets are never read here)."""
    return {
        "dflashbench_version": __version__,
        **git_info(),
        "versions": {"python": sys.version.split()[0], **package_versions()},
        "host": host_info(),
        "cpu": cpu_summary(),
        "gpu": gpu_summary(),
        "argv": list(sys.argv),
        "ci": ci_info(),
    }


# -- the manifest as read back ---------------------------------------------------------------------------------------
MANIFEST_SCHEMA = 1  # bump when a field below changes meaning; added fields need no bump


class ServerRecord(BaseModel):
    """A server a sweep launched: its command, and what identifies its process to a later ``--resume``."""

    model_config = ConfigDict(extra="allow")

    argv: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    port: int | None = None
    pid: int | None = None
    pid_start_ticks: int | None = None
    verifier: dict[str, Any] | None = None  # the verifier a speculative server ran (verifier_record)


class OutputsPolicy(BaseModel):
    """What ``requests.jsonl`` keeps of each output (``--no-store-text`` keeps no text)."""

    model_config = ConfigDict(extra="allow")

    store_text: bool = True
    text_cap_chars: int | None = None
    token_cap: int | None = None
    note: str | None = None
    # points a resume with --no-store-text measured in a run that stored text: they keep none (run_books)
    text_not_stored: list[str] = Field(default_factory=list)


class Manifest(BaseModel):
    """``manifest.json`` read back, typed. Runs written by older versions load too: every field has a default
    and fields this version does not know are kept (``extra``), so a manifest read and written again loses
    nothing. A manifest from a newer, incompatible version is refused by :func:`parse_manifest`."""

    model_config = ConfigDict(extra="allow")

    manifest_schema: int = MANIFEST_SCHEMA
    run_id: str | None = None
    schema_version: int | None = None  # the rows' schema (dflashbench.types.SCHEMA_VERSION)
    status: str | None = None  # running, complete, partial, degraded, interrupted, failed
    status_reason: str | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    suite: dict[str, Any] = Field(default_factory=dict)  # name, version, file, description
    suite_config: dict[str, Any] | None = None  # the resolved suite; what --resume runs again
    backend: str | None = None
    endpoint: str | None = None
    endpoints: list[str] | None = None
    model: str | None = None
    drafts: dict[str, str] = Field(default_factory=dict)
    num_gpus: int | None = None
    api_key_env: str | None = None  # the variable's name, never its value
    grid: list[str] = Field(default_factory=list)
    outputs: OutputsPolicy = Field(default_factory=OutputsPolicy)
    servers: dict[str, ServerRecord] = Field(default_factory=dict)
    resumes: list[dict[str, Any]] = Field(default_factory=list)
    failed_points: list[str] = Field(default_factory=list)
    degraded_points: list[str] = Field(default_factory=list)
    dflashbench_version: str | None = None
    git_sha: str | None = None
    git_dirty: bool | None = None
    versions: dict[str, str | None] = Field(default_factory=dict)
    host: dict[str, Any] = Field(default_factory=dict)
    cpu: dict[str, Any] = Field(default_factory=dict)  # model, vendor, ISA extensions (cpu_summary)
    gpu: dict[str, Any] = Field(default_factory=dict)
    # The memory plan the sweep ran on (dflashbench.plan.memory.MemoryPlan.record): each method's weights, engine
    # share, KV cache and capacity in requests, the capacity every method got; None for runs before issue 43
    memory_plan: dict[str, Any] | None = None
    interleaved: bool | None = None  # every server up for the round, a load's methods measured together (plan.grid)
    # where each server ran and which ran at once (dflashbench.plan.placement.Placement.record); None before issue 55
    placement: dict[str, Any] | None = None
    # the interference probe (dflashbench.run.interference): one method's point alone, then beside the others busy
    interference: dict[str, Any] | None = None
    # the speed probe's readings summed up at the end of the sweep, by kind (dflashbench.measure.drift.summary)
    probe: dict[str, dict[str, Any]] | None = None
    ci: dict[str, str] | None = None  # GITHUB_SHA / GITHUB_REF ... where a CI job set them (ci_info)
    labels: dict[str, str] = Field(default_factory=dict)  # sweep --label KEY=VALUE
    # each --data and trace file the run read: what, path, sha256, bytes, files (dflashbench.run.input_files)
    inputs: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def temperature(self) -> float:
        """The run's sampling temperature (its suite's); 0.0 when it does not say."""
        value = (self.suite_config or {}).get("temperature", getattr(self, "__pydantic_extra__", {}).get("temperature"))
        try:
            return float(value) if value is not None else 0.0
        except (TypeError, ValueError):
            return 0.0


def parse_manifest(raw: dict[str, Any], where: str = "manifest.json") -> Manifest:
    """``raw`` (a manifest as JSON gives it) as a :class:`Manifest`; a :class:`UserError` naming the file and
    the field when it does not fit."""
    from dflashbench.errors import UserError

    schema = raw.get("manifest_schema", MANIFEST_SCHEMA)
    if isinstance(schema, int) and schema > MANIFEST_SCHEMA:
        raise UserError(f"{where} has manifest_schema {schema}, newer than this dflashbench reads "
                        f"({MANIFEST_SCHEMA}): upgrade dflashbench to read this run")  # fmt: skip
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise UserError(f"{where}: field {field}: {first['msg']}; the file is not a manifest this version can "
                        "read (was it edited by hand?)") from None
