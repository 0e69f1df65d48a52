"""Faults, round 5 (issue #58): what overwrites, what misleads a gate, what waits forever; each with real
processes over loopback where the fault needs them, and no file written outside the test's own folder.

- ``report -o`` writes only to a regular file or a new path: a device (``/dev/null``, ``/dev/full``: used read-only,
  as targets the command must refuse), a named pipe or a symbolic link is refused with one line.
- A ``--repeats`` run is not flagged for planned points it measured: the grid's ids and the measured ones are read by
  one parser (:class:`dflashbench.types.PointKey`), so a repeat that is missing is the one flagged.
- A row of valid JSON but the wrong shape (``"concurrency": "two"``, ``{}`` appended) is exit 2 in ``report`` and
  ``compare`` (for which 1 is a regression), with one line naming the file, the line and the field.
- A key in a suite's ``extra_args`` (``--api-key KEY``) is on no command line ``ps`` can read: the supervisor's and
  the server's argv lack it; vLLM gets it as ``VLLM_API_KEY`` (its own fallback), ``dflashbench serve`` as
  ``DFLASHBENCH_API_KEY`` (or ``--api-key-file``), and the server requires it; SGLang and TensorRT-LLM, which know
  no other route, say that their command line holds it.
- A trace replay against an ``--endpoint`` asks no Hub for a model that is not named by a Hub id (lengths are then
  counted by estimate, said so), and for one that is, waits a few seconds at most (a Hub that takes the connection
  and never answers held the first point back for minutes): a real silent "Hub" on loopback (``HF_ENDPOINT``).
- A trace's window is read from the file's start and no further: a big trace whose last line is broken replays its
  first seconds (the unfixed reader parsed all of it first: 3.3 GB for a 2 s window of 10 million rows).
- A point whose client processes were stopped (SIGSTOP of the sweep's process group, as Ctrl-Z stops it) while the
  server went on is degraded, naming the stop: ``--resume`` measures it again.
- A server that slows down steadily during a point (the stand-in's ``--slow-down-ms``) is flagged against the point's
  own first part: a tag on its console line, ``extra["trend"]`` in its row, a trust flag; a steady one is not.
- ``--request-rate`` (and ``--trace-speed``) have a lower bound, as they have an upper one.
- ``--resume --no-store-text`` is recorded in the manifest: which points keep no text, and a trust flag says so.

The sweeps run the CLI with the stand-in backend registered (``tests/standin_cli.py`` where they must be processes of
their own).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from test_reliability import (  # noqa: F401 - standin_backend is an autouse fixture
    CLI,
    env_for_children,
    only_run_dir,
    standin_backend,
    sweep,
    write_suite,
)
from typer.testing import CliRunner

from dflashbench.backends.base import LaunchPlan
from dflashbench.backends.process import ServerProcess, free_port
from dflashbench.bench.standin import SERVE
from dflashbench.cli import app
from dflashbench.report.trust import trust_flags
from dflashbench.run.store import load_run

SOURCE_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_RUN = SOURCE_ROOT / "results" / "examples" / "demo-20261123-120110-e69c"


@pytest.fixture(autouse=True)
def own_temp(tmp_path, monkeypatch):
    """Whatever Python's own temporary files these tests make (multiprocessing's) go under the test's folder."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))


@contextlib.contextmanager
def standin(log_dir: Path, *options: str):
    """The stand-in server as a process of its own on a free loopback port, its log in ``log_dir``: its URL."""
    port = free_port()
    plan = LaunchPlan(argv=(*SERVE, "--port", str(port), "--model", "standin-model", *options))
    with ServerProcess(plan, log_path=log_dir / f"standin-{port}.log") as server:
        url = f"http://127.0.0.1:{port}"
        server.wait_ready(url + "/health", timeout_s=60, progress=False)
        yield url


@pytest.fixture(scope="module")
def standin_url(tmp_path_factory):
    with standin(tmp_path_factory.mktemp("standin"), "--pace-ms", "2") as url:
        yield url


def cli(*args):
    return CliRunner().invoke(app, [*map(str, args)], catch_exceptions=False)


def _drop_point(run_dir: Path, point_id: str) -> None:
    """What a sweep killed during ``point_id`` leaves: no row of it anywhere."""
    for name in ("points.jsonl", "requests.jsonl"):
        path = run_dir / name
        keep = [line for line in path.read_text().splitlines() if json.loads(line)["point_id"] != point_id]
        path.write_text("".join(line + "\n" for line in keep))


# -- 1. report -o over what is not a regular file -------------------------------------------------------------------
def test_report_writes_only_to_a_regular_file_or_a_new_path(tmp_path):
    fifo, link, target = tmp_path / "pipe.html", tmp_path / "link.md", tmp_path / "kept.md"
    os.mkfifo(fifo)
    target.write_text("not a report\n")
    link.symlink_to(target)
    # the named pipe and the link first: only code that refuses them gets to the devices below, which are never
    # written (this test runs as root in containers, where the unfixed command replaced /dev/null with a file)
    for path, kind in ((fifo, "a named pipe (FIFO)"), (link, f"a symbolic link (to {target})"),
                       (tmp_path, "a directory")):  # fmt: skip
        result = cli("report", EXAMPLE_RUN, "-o", path)
        assert result.exit_code == 2, result.output
        assert f"error: cannot write the report to {path}: it is {kind}, and a report replaces what is at its " \
               "path; give the path of a regular file or of a new one" in result.output  # fmt: skip
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink() and target.read_text() == "not a report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.md", "link.md", "pipe.html"]  # nothing left beside
    for device in ("/dev/null", "/dev/full"):
        before = os.lstat(device)
        result = cli("report", EXAMPLE_RUN, "-o", device)
        assert result.exit_code == 2 and f"{device}: it is a character device" in result.output, result.output
        after = os.lstat(device)
        assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    # a regular file is replaced, and a new path written, as before
    assert cli("report", EXAMPLE_RUN, "-o", target).exit_code == 0 and "Verdict" in target.read_text()
    assert cli("report", EXAMPLE_RUN, "-o", tmp_path / "new" / "r.md").exit_code == 0


# -- 3. a --repeats run and its planned points ----------------------------------------------------------------------
def test_a_repeats_run_is_flagged_only_for_the_repeat_it_misses(tmp_path, standin_url):
    out = tmp_path / "results"
    suite = write_suite(tmp_path, extra="repeats = 2\n")
    first = sweep("--suite", suite, "--endpoint", standin_url, "-o", out, "--no-report")
    assert first.exit_code == 0, first.output
    run_dir = only_run_dir(out)
    assert len(load_run(run_dir).manifest["grid"]) == 2  # one point, two rounds
    assert not [f for f in trust_flags(load_run(run_dir)) if "planned points" in f]
    assert "planned points" not in first.output
    same = cli("compare", run_dir, run_dir)
    assert "planned points" not in same.output, same.output

    _drop_point(run_dir, "standin:ar:gsm8k:c1/r1")
    (flag,) = [f for f in trust_flags(load_run(run_dir)) if "planned points" in f]
    assert flag.startswith("1 of 2 planned points are not in points.jsonl (e.g. standin:ar:gsm8k:c1/r1)")


# -- 4. rows of valid JSON and the wrong shape ----------------------------------------------------------------------
def _damaged(tmp_path: Path, file: str, how: str) -> tuple[Path, int]:
    """A copy of the example run with one row of ``file`` damaged ``how``; the line it is on."""
    run = tmp_path / "damaged"
    shutil.copytree(EXAMPLE_RUN, run)
    lines = (run / file).read_text().splitlines()
    if how == "appended {}":
        lines.append("{}")
        line = len(lines)
    else:
        row = json.loads(lines[2])
        row.update(json.loads(how))
        lines[2], line = json.dumps(row), 3
    (run / file).write_text("\n".join(lines) + "\n")
    return run, line


@pytest.mark.parametrize(("file", "how", "said"), [
    ("points.jsonl", '{"concurrency": "two"}', "field 'concurrency' is 'two', expected a whole number"),
    ("points.jsonl", "appended {}", "field 'backend' is missing (and 4 more)"),
    ("points.jsonl", '{"throughput_tok_per_s": "fast"}', "field 'throughput_tok_per_s' is 'fast', expected a number "
                                                         "or null"),
    ("requests.jsonl", "appended {}", "field 'point_id' is missing (and 2 more)"),
    ("requests.jsonl", '{"chunk_ns": 12}', "field 'chunk_ns' is 12, expected a list"),
])  # fmt: skip
def test_a_row_of_the_wrong_shape_is_unusable_input_naming_file_line_and_field(tmp_path, file, how, said):
    run, line = _damaged(tmp_path, file, how)
    expected = f"error: {run / file}:{line}: {said}: not a row dflashbench writes there; fix or remove that line"
    for args in (["report", run, "-o", tmp_path / "r.md"], ["compare", EXAMPLE_RUN, run], ["compare", run, EXAMPLE_RUN]):
        result = cli(*args)
        assert result.exit_code == 2, (args, result.output)  # compare: 2 is unusable input, 1 would be a regression
        assert result.output.strip().splitlines()[-1] == expected, result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "r.md").exists()


# -- 5. a key in extra_args, out of every command line ---------------------------------------------------------------
KEY = "key-Rt5WqP8zN2"


def _cmdlines() -> dict[int, str]:
    """Every process's command line, as ps reads it (``/proc/PID/cmdline``, readable by every user)."""
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            found[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return found


def _get(url: str, key: str | None = None) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_key_in_extra_args_is_on_no_command_line_and_the_reference_server_requires_it(tmp_path):
    from dflashbench.backends import get_backend
    from dflashbench.backends.base import ServerSpec
    from dflashbench.embedded import default_paths
    from dflashbench.types import Method

    spec = ServerSpec(method=Method.AR, model=str(default_paths().target), port=free_port(),
                      extra_args=("--api-key", KEY, "--max-batch-size", "2"))  # fmt: skip
    plan = get_backend("reference").launch_plan(spec)
    assert KEY not in " ".join(plan.argv) and plan.argv[-2:] == ("--max-batch-size", "2")
    assert plan.env["DFLASHBENCH_API_KEY"] == KEY
    log = tmp_path / "server.log"
    with ServerProcess(plan, log, name="reference ar server") as server:
        url = f"http://127.0.0.1:{spec.port}"
        server.wait_ready(url + "/health", timeout_s=120, progress=False)
        shown = [line for line in _cmdlines().values() if "dflashbench" in line]
        assert any("supervise.py" in line for line in shown) and any(" serve " in line for line in shown), shown
        assert not [line for line in shown if KEY in line]  # the supervisor's argv, the server's argv
        assert _get(url + "/v1/models") == 401 and _get(url + "/v1/models", "wrong") == 401
        assert _get(url + "/v1/models", KEY) == 200 and _get(url + "/health") == 200  # health stays open
    assert KEY not in log.read_text()  # the command line heading the log, and every line the server printed


def test_vllm_gets_the_key_in_its_environment_and_sglang_says_its_command_line_holds_it():
    from dflashbench.backends.base import ServerSpec
    from dflashbench.backends.sglang import SglangBackend
    from dflashbench.backends.trtllm import TrtllmBackend
    from dflashbench.backends.vllm import VllmBackend
    from dflashbench.redact import redact_secrets
    from dflashbench.types import Method

    for given in (("--api-key", KEY), (f"--api-key={KEY}",)):
        spec = ServerSpec(method=Method.AR, model="org/model", extra_args=("--max-model-len", "4096", *given))
        plan = VllmBackend(version="0.33.0").launch_plan(spec)
        assert KEY not in " ".join(plan.argv) and plan.argv[-2:] == ("--max-model-len", "4096")
        assert plan.env["VLLM_API_KEY"] == KEY and redact_secrets(plan.env)["VLLM_API_KEY"] == "***"
    for backend, engine in ((SglangBackend(version="0.5.20"), "SGLang"), (TrtllmBackend(), "TensorRT-LLM")):
        plan = backend.launch_plan(ServerSpec(method=Method.AR, model="org/model", extra_args=("--api-key", KEY)))
        assert plan.argv[-2:] == ("--api-key", KEY)  # no other route known: as given, and said
        assert any(n.startswith(f"the suite's --api-key stays on {engine}'s command line, where ps shows it")
                   for n in plan.notes), plan.notes  # fmt: skip


# -- 6. a run against a running server asks no Hub -----------------------------------------------------------------
GSM8K = SOURCE_ROOT / "tests" / "fixtures" / "datasets" / "openai--gsm8k"


@contextlib.contextmanager
def silent_hub():
    """A "Hugging Face Hub" on loopback that takes every connection and never answers (a network that drops
    packets, a proxy that hangs): its URL, and the first line of each request it got."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    asked: list[str] = []
    held = []

    def take() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            conn.settimeout(2)
            with contextlib.suppress(OSError):
                asked.append(conn.recv(300).split(b"\r\n", 1)[0].decode(errors="replace"))

    threading.Thread(target=take, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", asked
    finally:
        server.close()
        for conn in held:
            conn.close()


def _trace_suite(tmp_path: Path, model: str) -> Path:
    path = tmp_path / "trace.toml"
    path.write_text(f"""
name = "hubless"
backend = "standin"
methods = ["ar"]
model = "{model}"
concurrency = []
num_prompts = 3
warmup_requests = 0
max_tokens = 12
timeout_s = 20
trace = "azure-code"
trace_window = "2s"
[[workloads]]
name = "gsm8k"
data = "{GSM8K}"
""")
    return path


@pytest.mark.parametrize(("model", "asks"), [("standin-model", False), ("org/served-model", True)])
def test_a_trace_replay_against_an_endpoint_asks_the_hub_only_for_a_hub_id_and_briefly(tmp_path, model, asks):
    with silent_hub() as (hub, asked), standin(tmp_path, "--pace-ms", "2", "--model", model) as url:
        env = {**env_for_children(), "HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf"), "TMPDIR": str(tmp_path)}
        env.pop("HF_HUB_OFFLINE", None)
        args = ["sweep", "--suite", str(_trace_suite(tmp_path, model)), "--endpoint", url, "-o", str(tmp_path / "out"),
                "--no-report"]  # fmt: skip
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, str(CLI), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, start_new_session=True)  # fmt: skip
        try:
            output, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output = proc.communicate()[0]
            pytest.fail(f"the sweep was still waiting after 120 s (the Hub was asked: {asked}):\n{output[-2000:]}")
        took = time.monotonic() - started
    assert proc.returncode == 0, output
    files = [line for line in asked if "/api/agent-harnesses" not in line]  # huggingface_hub's own ping, 3 s at most
    if not asks:
        assert files == [], files
        assert "note: the trace's lengths are counted by estimate: standin-model is neither a local folder nor in " \
               "the Hugging Face cache, and a run against a running server asks the Hub only for a model named by " \
               "a Hub id" in output  # fmt: skip
    else:
        assert files and all("org/served-model" in line for line in files), asked
        assert "note: the Hugging Face Hub did not answer within 5 s for org/served-model/config.json: went on " \
               "without it" in output  # fmt: skip
    run = load_run(only_run_dir(tmp_path / "out"))
    assert len(run.points) == 1 and run.points.loc[0, "status"] == "ok"
    print(f"{model}: sweep {took:.1f} s")  # the sweep's whole time, the trace's 2 s at 1x included


# -- 7b. a big trace, read only for its window ----------------------------------------------------------------------
BIG_ROWS = 200_000  # ten requests a second: 20,000 s of trace


def _big_trace(path: Path, fmt: str, rows: int = BIG_ROWS, broken_end: bool = True) -> Path:
    """A trace of ``rows`` requests, ten a second, in arrival order (two of the first ten swapped, as real files have
    a few), its last line broken where ``broken_end``: a reader that gets there fails."""
    order = list(range(rows))
    order[3], order[4] = order[4], order[3]
    if fmt == "mooncake":
        lines = [f'{{"timestamp": {i * 100}, "input_length": {100 + i % 7}, "output_length": {5 + i % 3}, '
                 f'"hash_ids": [{i}]}}' for i in order]  # fmt: skip
        lines += ["not json at the end"] if broken_end else []
    else:
        import datetime as dt

        start = dt.datetime(2023, 11, 16, 18, 0, 0, tzinfo=dt.UTC)
        stamp = {i: (start + dt.timedelta(seconds=i / 10)).strftime("%Y-%m-%d %H:%M:%S.%f") for i in range(200)}
        late = (start + dt.timedelta(seconds=100)).strftime("%Y-%m-%d %H:%M:%S.%f")  # past the window and its slack
        lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
        lines += [f"{stamp.get(i, late)},{100 + i % 7},{5 + i % 3}" for i in order]
        lines += [f"{late},many,5"] if broken_end else []
    path = path.with_suffix(".jsonl" if fmt == "mooncake" else ".csv")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("fmt", ["mooncake", "azure"])
def test_a_big_trace_is_read_only_for_its_window(tmp_path, fmt):
    from dflashbench.workloads.traces import load_trace

    path = _big_trace(tmp_path / "big", fmt)
    started = time.perf_counter()
    trace = load_trace(str(path), window_s=2.0)
    took = time.perf_counter() - started
    assert [r.index for r in trace.rows] == [0, 1, 2, 4, 3, *range(5, 20)]  # arrival order, the swap found
    assert [round(r.arrival_s, 3) for r in trace.rows] == [i / 10 for i in range(20)] and trace.reordered == 2
    assert took < 5.0, took  # the whole file took longer to parse than this (and its broken end failed it)
    small = load_trace(str(_big_trace(tmp_path / "small", fmt, rows=300, broken_end=False)))
    assert small.window(2.0).rows == trace.rows  # the window a whole file gives
    # the sweep's dry run plans it the same way, the broken end never reached
    dry = sweep("--trace", path, "--trace-window", "2s", "--method", "ar", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "20 of 20 requests sent" in dry.output


# -- 7c. a client stopped during a point ----------------------------------------------------------------------------
def test_a_point_whose_client_was_stopped_is_degraded_and_names_the_stop(tmp_path):
    out = tmp_path / "results"
    with standin(tmp_path, "--pace-ms", "100") as url:  # 12 tokens at 100 ms: 1.2 s a request, 4 in a row
        suite = write_suite(tmp_path, extra="num_prompts = 4\n").read_text().replace("num_prompts = 3\n", "")
        (tmp_path / "slow.toml").write_text(suite.replace("warmup_requests = 1", "warmup_requests = 0"))
        args = ["sweep", "--suite", str(tmp_path / "slow.toml"), "--endpoint", url, "-o", str(out), "--no-report"]
        proc = subprocess.Popen([sys.executable, str(CLI), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env_for_children(), start_new_session=True)  # fmt: skip
        try:
            deadline = time.monotonic() + 90
            while not list(out.glob("*/requests.jsonl")) or not next(out.glob("*/requests.jsonl")).read_text():
                assert proc.poll() is None and time.monotonic() < deadline, "the point never started"
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGSTOP)  # the sweep and its client processes, as Ctrl-Z stops them
            time.sleep(2.0)
            os.killpg(proc.pid, signal.SIGCONT)
            output, _ = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    assert proc.returncode == 1, output  # a degraded point
    run = load_run(only_run_dir(out))
    row = run.points.iloc[0]
    assert row["status"] == "degraded", output
    assert row["failure_reason"].startswith("the client was stopped during the point (Ctrl-Z or SIGSTOP, continued 1 "
                                            "time(s), its event loop standing still for up to ")  # fmt: skip
    assert row["extra"]["client"]["continued"] == 1 and row["extra"]["client"]["loop_lag_ms_max"] > 1500
    assert "DEGRADED" in output and "the client was stopped during the point" in output
    assert any(f.startswith("1 point degraded") for f in trust_flags(run))


# -- 7d. a server slowing down within a point -------------------------------------------------------------------------
def _trend_suite(tmp_path: Path) -> Path:
    path = tmp_path / "trend.toml"
    path.write_text(f"""
name = "trend"
backend = "standin"
methods = ["ar"]
model = "standin-model"
concurrency = [2]
num_prompts = 6
requests_per_stream = 12
warmup_requests = 0
max_tokens = 8
timeout_s = 20
[[workloads]]
name = "gsm8k"
data = "{GSM8K}"
""")
    return path


def test_a_server_slowing_down_within_a_point_is_flagged_against_its_first_part(tmp_path):
    with standin(tmp_path, "--pace-ms", "5") as steady, \
            standin(tmp_path, "--pace-ms", "5", "--slow-down-ms", "2") as slowing:  # 5 ms a token, then 7, ... 51
        runs = {}
        for name, url in (("steady", steady), ("slowing", slowing)):
            result = sweep("--suite", _trend_suite(tmp_path), "--endpoint", url, "-o", tmp_path / name, "--no-report")
            assert result.exit_code == 0, result.output
            runs[name] = (result.output, load_run(only_run_dir(tmp_path / name)))
    output, run = runs["slowing"]
    trend = run.points.loc[0, "extra"]["trend"]
    assert trend["slowed"] and trend["requests"] == 8 and trend["change"] > 1.0 and trend["p"] < 0.01, trend
    assert "server slowed down" in output.split("standin ar gsm8k c=2", 1)[1].splitlines()[0]  # the point's line
    (flag,) = [f for f in trust_flags(run) if "slowed down" in f]
    assert flag.startswith("the server slowed down during 1 point (AR gsm8k c=2); first: the server slowed down "
                           "during the point: TPOT ")  # fmt: skip
    assert "the server slowed down during 1 point" in output.rsplit("Verdict", 1)[-1]  # said at the end of the sweep
    output, run = runs["steady"]
    trend = run.points.loc[0, "extra"].get("trend")  # none where too few requests' per-token timing was observable
    assert trend is None or not trend["slowed"], trend
    assert "slowed down" not in output


# -- 7a. a request rate too low to finish ---------------------------------------------------------------------------
@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--request-rate", "1e-12", "key 'request_rate': request_rate 1e-12 is too small: at least 0.01 requests per "
                                "second (one every 100 s)"),
    ("--trace-speed", "1e-9", "key 'trace_speed': trace_speed 1e-09 is too slow: at least 0.01"),
])  # fmt: skip
def test_a_rate_or_trace_speed_below_the_bound_is_refused_naming_it(tmp_path, standin_url, flag, value, said):
    out = tmp_path / "out"
    args = ("sweep", "--suite", write_suite(tmp_path), "--endpoint", standin_url, flag, value, "-o", out)
    # a process of its own, given a minute: unbounded, the sweep waited for ever (an ETA of 105 million days)
    proc = subprocess.Popen([sys.executable, str(CLI), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env_for_children(), start_new_session=True)  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"sweep {flag} {value} was still running after 60 s")
    assert proc.returncode == 2 and said in output, output
    assert f"(set by {flag})" in output and not out.exists()


# -- 7e. --resume --no-store-text -----------------------------------------------------------------------------------
def test_resume_without_text_says_in_the_manifest_which_points_keep_none(tmp_path, standin_url):
    out = tmp_path / "results"
    first = sweep("--suite", write_suite(tmp_path, concurrency=(1, 2)), "--endpoint", standin_url, "-o", out,
                  "--no-report")  # fmt: skip
    assert first.exit_code == 0, first.output
    run_dir = only_run_dir(out)
    assert load_run(run_dir).manifest["outputs"]["store_text"] is True
    _drop_point(run_dir, "standin:ar:gsm8k:c2")
    second = sweep("--resume", run_dir, "--endpoint", standin_url, "--no-store-text", "--no-report")
    assert second.exit_code == 0, second.output
    assert "note: --no-store-text: the 1 point(s) this sitting measures keep no output text" in second.output
    run = load_run(run_dir)
    assert run.manifest["outputs"]["text_not_stored"] == ["standin:ar:gsm8k:c2"]
    assert run.manifest["resumes"][-1]["store_text"] is False
    measured = run.requests[~run.requests["warmup"].astype(bool)]
    texts = measured.groupby("point_id")["output_text"].apply(lambda s: s.notna().all())
    assert texts.to_dict() == {"standin:ar:gsm8k:c1": True, "standin:ar:gsm8k:c2": False}  # as recorded
    (flag,) = [f for f in trust_flags(run) if "output text" in f]
    assert flag.startswith("no output text stored at 1 point of 2 (a resume with --no-store-text, e.g. "
                           "standin:ar:gsm8k:c2): lossless is judged by token counts there")  # fmt: skip
