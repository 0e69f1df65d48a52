"""Nothing leaked, nothing stuck (issue #28): the fault matrix's failing cases, each with real processes.

- A key or a URL password that a server echoes back (``401 Incorrect API key provided: <key>``) is redacted
  literally, in every form dflashbench sends it (the key, ``user:password``, the base64 of the Basic header),
  from the run directory, both report formats, the console and a launched server's log.
- A URL without its scheme is named as such, without its password; ``suites show`` redacts like the sweep.
- URL credentials and an API key in the environment: the URL's are sent, the key is not, and the sweep runs.
- ``--resume`` may raise the operational limits (timeouts, error-rate threshold, client processes), recorded.
- SIGTERM and SIGINT stop every kind of sweep the same way: rc 143 / 130, manifest interrupted with its reason,
  the ``--resume`` line printed, no semaphore leaked by the client processes.
- An infinite request rate, a malformed ``/v1/models`` answer: a clear error, never a traceback or half a run.
- A counter reset says why tau is missing on the console and in both reports.
- Of two replicas, the one that dies is named and gets no more load.
- Smaller: over-redaction of paths, the lock holder's line, a killed client process's rows, the open loop's
  default cap on requests in flight, and no code after a ``return``.

The sweeps that must be processes of their own run ``tests/standin_cli.py`` (the CLI with the stand-in backend).
"""

from __future__ import annotations

import ast
import base64
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_reliability import (  # noqa: F401 - standin_backend is an autouse fixture
    CLI,
    PROMPTS,
    SOURCE_ROOT,
    alive,
    assert_complete,
    assert_no_secret,
    children_of,
    env_for_children,
    launched_server,
    only_run_dir,
    standin_backend,
    sweep,
    sweep_process,
    wait_for,
    write_suite,
)
from typer.testing import CliRunner

from dflashbench.bench.standin import run_standin
from dflashbench.cli import app
from dflashbench.run import runlock
from dflashbench.run.store import RunStore, load_run

KEY = "plantedKey-9f3a77c1"  # not shaped like sk-...: no pattern catches it, only its value
PASSWORD = "hunter2-Zq8rT4"
BASIC = base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
PLANTED = {"API key": KEY, "password": PASSWORD, "Basic credentials": BASIC, "unpadded Basic": BASIC.rstrip("=")}


def cli(*args, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CLI), *map(str, args)], capture_output=True, text=True,
                          env=env or env_for_children(), timeout=timeout)  # fmt: skip


def measured_rows(run_dir: Path) -> list[dict]:
    lines = (run_dir / "requests.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if not row["warmup"]]


# -- 1 and 4. secrets a server echoes; URL credentials beside an API key ---------------------------------------
def test_a_key_or_password_a_server_echoes_is_written_and_printed_nowhere(tmp_path):
    inputs, out, reports = tmp_path / "inputs", tmp_path / "results", tmp_path / "reports"
    inputs.mkdir()
    env = {**env_for_children(), "OPENAI_API_KEY": KEY}  # set globally, as users do
    with run_standin("--pace-ms", "2", "--model", "standin-model", "--reject-auth-every", "3") as url:
        keyed = cli("sweep", "--suite", write_suite(inputs, name="keyed"), "--endpoint", url, "-o", out, env=env)
        with_password = url.replace("http://", f"http://admin:{PASSWORD}@")
        basic = cli("sweep", "--suite", write_suite(inputs, name="basic"), "--endpoint", with_password, "-o", out,
                    env=env)  # fmt: skip
    extra = '[extra_args]\nar = ["--reject-auth-every", "2"]\n'  # a launched server that logs what it rejects
    launched = cli("sweep", "--suite", write_suite(inputs, name="launched", extra=extra), "-o", out, env=env)
    runs = {p.name.split("-")[0]: p for p in out.iterdir()}
    printed = [keyed.stdout + keyed.stderr, basic.stdout + basic.stderr, launched.stdout + launched.stderr]
    for run_dir in runs.values():  # the Markdown report beside the HTML one the sweep wrote
        md = cli("report", run_dir, "-o", reports / f"{run_dir.name}.md")
        assert md.returncode == 0, md.stderr
        printed.append(md.stdout + md.stderr)

    # a share of requests got the 401: the points are degraded, and say why without the secret
    for result in (keyed, basic, launched):
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stdout + result.stderr
    assert "DEGRADED (1 of 3 requests failed" in keyed.stdout
    assert "first error: HTTP 401: Incorrect API key provided: ***" in keyed.stdout
    # the URL's credentials were sent (Basic), the key was not: no "Cannot combine AUTHORIZATION header"
    assert "an --endpoint URL carries its own credentials: they are sent (HTTP Basic) and the API key from " \
           "OPENAI_API_KEY is not sent to it" in basic.stdout
    assert "Incorrect API key provided: Basic *** (***)" in basic.stdout
    for name, run_dir in runs.items():
        errors = [r["error"] for r in measured_rows(run_dir) if r["error"]]
        assert errors and all(e.startswith("HTTP 401: Incorrect API key provided: ") and "***" in e for e in errors)
        assert "***" in load_run(run_dir).points.loc[0, "failure_reason"], name
    log = (runs["launched"] / "server-standin-ar.log").read_text()
    assert "401 Incorrect API key provided: ***" in log  # the server's own line, redacted by its supervisor
    assert {p.suffix for p in reports.iterdir()} == {".html", ".md"} and len(list(reports.iterdir())) == 6

    # 3 runs (manifest, requests, points, lock; a server log), 6 reports
    assert assert_no_secret(tmp_path, *printed, inputs=inputs, secrets=PLANTED) >= 18


# -- 2. a URL without its scheme ----------------------------------------------------------------------------------
def test_an_endpoint_without_its_scheme_is_named_and_its_password_is_not(tmp_path):
    result = sweep("--suite", write_suite(tmp_path), "--endpoint", "admin:hunter2pass@127.0.0.1:18999", "-o",
                   tmp_path / "out", "--no-report")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "error: --endpoint ***@127.0.0.1:18999: the scheme is missing; write http://***@127.0.0.1:18999 (or " \
           "https://)" in result.output
    assert "hunter2pass" not in result.output and not (tmp_path / "out").exists()


# -- 3. suites show ----------------------------------------------------------------------------------------------
def test_suites_show_redacts_a_key_in_extra_args_as_the_sweep_does(tmp_path):
    suite = write_suite(tmp_path, extra='[extra_args]\nar = ["--api-key", "plantedExtra-55aa"]\n')
    shown = CliRunner().invoke(app, ["suites", "show", str(suite)])
    assert shown.exit_code == 0, shown.output
    assert "--api-key ***" in shown.output and "plantedExtra-55aa" not in shown.output


# -- 5. operational limits on --resume ----------------------------------------------------------------------------
REFERENCE_SUITE = """
name = "ready"
backend = "reference"
methods = ["ar"]
model = "embedded"
concurrency = [1]
num_prompts = 2
requests_per_stream = 1
warmup_requests = 1
max_tokens = 8
timeout_s = 120
[[workloads]]
name = "synthetic"
"""


def test_a_run_stopped_by_a_short_ready_timeout_finishes_with_resume_and_a_longer_one(tmp_path):
    """The reference server takes seconds to import torch and load: 1 s is not enough, 60 s is."""
    suite = tmp_path / "ready.toml"
    suite.write_text(REFERENCE_SUITE)
    out = tmp_path / "results"
    first = sweep("--suite", suite, "--ready-timeout", "1", "-o", out, "--no-report")
    assert first.exit_code == 1, first.output
    assert "within 1s (stopped it; if it is still loading, raise the readiness timeout" in first.output
    run_dir = only_run_dir(out)
    assert load_run(run_dir).manifest["suite_config"]["ready_timeout_s"] == 1.0

    resumed = sweep("--resume", run_dir, "--ready-timeout", "60", "--no-report")
    assert resumed.exit_code == 0, resumed.output
    assert "note: ready_timeout_s 1.0 -> 60.0 for the points still to run (recorded in the manifest)" in resumed.output
    manifest = load_run(run_dir).manifest
    assert manifest["status"] == "complete"
    assert manifest["resumes"][-1]["changed"] == {"ready_timeout_s": {"from": 1.0, "to": 60.0}}
    assert manifest["suite_config"]["ready_timeout_s"] == 60.0  # a later plain --resume keeps it


def test_resume_may_raise_the_request_timeout_and_the_other_limits_but_not_the_measurement(tmp_path):
    suite = write_suite(tmp_path, extra='[extra_args]\nar = ["--pace-ms", "100"]\n')  # 12 tokens: 1.2 s a request
    out = tmp_path / "results"
    first = sweep("--suite", suite, "--request-timeout", "0.5", "-o", out, "--no-report")
    assert first.exit_code == 1 and "FAILED: every request failed; first error: timeout" in first.output, first.output
    run_dir = only_run_dir(out)

    refused = sweep("--resume", run_dir, "--request-timeout", "30", "--concurrency", "4")
    assert refused.exit_code == 2
    assert "drop --concurrency. It may change only the operational limits --request-timeout, --ready-timeout, " \
           "--max-error-rate, --client-processes" in refused.output

    resumed = sweep("--resume", run_dir, "--request-timeout", "30", "--max-error-rate", "0.2", "--client-processes",
                    "1", "--no-report")  # fmt: skip
    assert resumed.exit_code == 0, resumed.output
    manifest = load_run(run_dir).manifest
    assert manifest["resumes"][-1]["changed"] == {"timeout_s": {"from": 0.5, "to": 30.0},
                                                  "max_error_rate": {"from": 0.1, "to": 0.2},
                                                  "client_processes": {"from": "auto", "to": 1}}  # fmt: skip
    assert_complete(run_dir, points=1)


def test_a_run_on_a_url_with_credentials_resumes_once_they_are_given_again(tmp_path):
    out = tmp_path / "results"
    with run_standin("--pace-ms", "100", "--model", "standin-model") as url:
        secret_url = url.replace("http://", f"http://admin:{PASSWORD}@")
        first = sweep("--suite", write_suite(tmp_path), "--endpoint", secret_url, "--request-timeout", "0.5", "-o", out,
                      "--no-report")  # fmt: skip
        assert first.exit_code == 1, first.output
        run_dir = only_run_dir(out)
        hidden = url.replace("http://", "http://***@")
        plain = sweep("--resume", run_dir, "--request-timeout", "30", "--no-report")
        assert plain.exit_code == 2
        assert f"sent to {hidden}, whose credentials the manifest does not keep: give the URL again with them, " \
               f"dflashbench sweep --resume {run_dir} --endpoint URL" in plain.output
        other = sweep("--resume", run_dir, "--endpoint", url, "--no-report")
        assert other.exit_code == 2 and f"gives the run's own endpoint(s) again, with their credentials: {hidden}" \
            in other.output  # fmt: skip
        resumed = sweep("--resume", run_dir, "--endpoint", secret_url, "--request-timeout", "30", "--no-report")
    assert resumed.exit_code == 0, resumed.output
    assert_complete(run_dir, points=1)
    assert all(PASSWORD not in r.output for r in (first, plain, other, resumed))


# -- 6. one signal path --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("where", "sig"), [("endpoint", signal.SIGTERM), ("launched", signal.SIGINT)])
def test_a_signal_stops_any_sweep_with_its_books_closed_and_the_resume_line(tmp_path, where, sig):
    """Mid-point, with two client processes: the sweep unwinds (no semaphore leaked), says how to go on, and
    --resume completes the run."""
    out = tmp_path / "results"
    pace = ["--pace-ms", "150"]  # 12 tokens: 1.8 s a request, so the signal lands mid-point
    with run_standin(*pace, "--model", "standin-model") as url:
        if where == "endpoint":
            args = ["--suite", write_suite(tmp_path, concurrency=(2,)), "--endpoint", url]
        else:
            args = ["--suite", write_suite(tmp_path, concurrency=(2,), extra=f"[extra_args]\nar = {json.dumps(pace)}\n")]
        proc = sweep_process(*args, "--client-processes", "2", "-o", out, "--no-report")
        try:
            run_dir = wait_for(lambda: out.is_dir() and next(out.iterdir(), None), 60, "the run directory")
            wait_for(lambda: (run_dir / "requests.jsonl").exists() and measured_rows(run_dir), 120, "a measured row")
            proc.send_signal(sig)
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            proc.kill()
        assert proc.returncode == 128 + sig, stdout + stderr
        assert f"interrupted by {sig.name}: 0 point(s) finished in this sweep are kept, the one in flight is not; " \
               f"finish the run with: dflashbench sweep --resume {run_dir}" in stderr
        assert "leaked semaphore" not in stderr and "Traceback" not in stderr, stderr
        manifest = json.loads((run_dir / "manifest.json").read_text())
        said = "SIGTERM received" if sig == signal.SIGTERM else "Ctrl-C (SIGINT) received"
        assert manifest["status"] == "interrupted" and manifest["status_reason"].startswith(said)
        if where == "launched":
            assert not alive(launched_server(run_dir)["pid"])
        resumed = cli("sweep", "--resume", run_dir, "--no-report")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert_complete(run_dir, points=1)


# -- 7. an infinite rate, a manifest that cannot be written ---------------------------------------------------------
def test_an_infinite_request_rate_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "out"
    flag = sweep("--suite", write_suite(tmp_path), "--request-rate", "inf", "-o", out, "--no-report")
    assert flag.exit_code == 2, flag.output
    assert "--request-rate inf: an infinite rate sends every request at once, which is a closed loop: use " \
           "--concurrency N" in flag.output
    key = sweep("--suite", write_suite(tmp_path, extra="request_rate = [inf]\n", name="inf"), "-o", out)
    assert key.exit_code == 2 and "request_rate values must be finite" in key.output, key.output
    assert not out.exists()


def test_a_manifest_that_cannot_be_written_leaves_no_half_run_directory(tmp_path):
    with pytest.raises(ValueError, match=r"cannot write .*manifest.json: Out of range float values"):
        RunStore.create(tmp_path, {"rate": float("inf")}, run_id="r")
    assert list(tmp_path.iterdir()) == []  # not a directory that --resume calls "not a run directory"


# -- 8. a malformed /v1/models answer --------------------------------------------------------------------------------
@pytest.mark.parametrize("answer", ["list", "text"])
def test_a_malformed_models_answer_is_read_or_named_never_a_traceback(tmp_path, answer):
    with run_standin("--pace-ms", "1", "--model", "standin-model", "--models-answer", answer) as url:
        result = sweep("--suite", write_suite(tmp_path), "--endpoint", url, "-o", tmp_path / "out", "--no-report")
    if answer == "list":  # a bare list of model objects: read as the list it is
        assert result.exit_code == 0, result.output
        assert load_run(only_run_dir(tmp_path / "out")).points.loc[0, "num_errors"] == 0
    else:
        assert result.exit_code == 2, result.output
        assert f"error: the server at {url} is not usable: {url}/v1/models answered '<html>models</html>', which " \
               "is not JSON; expected an OpenAI model list" in result.output


# -- 9. a counter reset, said where tau is shown -----------------------------------------------------------------------
def test_a_counter_reset_is_said_on_the_console_line_and_in_both_reports(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    extra = '[extra_args]\ndflash = ["--restart-at-scrape", "2"]\n'  # the read after the point: a new server
    result = sweep("--suite", write_suite(tmp_path, methods=("dflash",), extra=extra), "-o", tmp_path / "results")
    assert result.exit_code == 0, result.output
    said = "the server restarted during the window"
    line = next(x for x in result.output.splitlines() if "dflash gsm8k c=1:" in x)
    assert "tau n/m" in line and f"; note: {said}" in line  # why tau is not measured, on the point's own line
    run_dir = only_run_dir(tmp_path / "results")
    html = (tmp_path / "reports" / f"{run_dir.name}.html").read_text()
    md = CliRunner().invoke(app, ["report", str(run_dir), "-o", str(tmp_path / "r.md")])
    assert md.exit_code == 0, md.output
    assert f"DFlash gsm8k c=1: {said}" in html
    assert f"DFlash gsm8k c=1: {said}" in (tmp_path / "r.md").read_text()


# -- 10. several replicas, one dies -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dies", [0, 1])
def test_a_replica_that_dies_is_named_and_gets_no_more_load(tmp_path, dies):
    """Requests alternate over the replicas (the warm-up goes to the first): the dying one is SIGKILLed mid-stream
    of its first measured request. Its point fails naming it; the next point is not sent to half a server."""
    die = tmp_path / "die"
    die.touch()
    dying = ["--die-file", str(die), "--die-after", "2" if dies == 0 else "1"]
    opts = ["--pace-ms", "20", "--model", "standin-model"]
    out = tmp_path / "out"
    with run_standin(*opts, *(dying if dies == 0 else [])) as a, run_standin(*opts, *(dying if dies == 1 else [])) as b:
        result = sweep("--suite", write_suite(tmp_path, concurrency=(1, 2)), "--endpoint", a, "--endpoint", b,
                       "-o", out, "--no-report")  # fmt: skip
    dead = f"the server at {(a, b)[dies]} (replica {dies + 1} of 2) stopped answering"
    assert result.exit_code == 1, result.output
    run = load_run(only_run_dir(out))
    first, second = run.points.sort_values("concurrency").to_dict("records")
    assert (first["status"], first["failure_reason"]) == ("failed", f"{dead} during the point")
    assert (second["status"], second["failure_reason"]) == ("failed", f"not run: {dead}")
    assert set(run.requests["point_id"]) == {first["point_id"]}  # nothing sent for the second point
    assert f"FAILED: not run: {dead}" in result.output


# -- 11. smaller ---------------------------------------------------------------------------------------------------------
def test_a_path_ending_in_a_secret_word_is_not_redacted(tmp_path):
    suite = tmp_path / "inc.toml"
    suite.write_text('include = "/etc/passwd"\nname = "x"\n')
    result = sweep("--suite", suite, "--dry-run")
    assert result.exit_code == 2 and "error: /etc/passwd: not valid TOML:" in result.output, result.output


HOLDER = textwrap.dedent("""
    import fcntl, os, sys, time
    from dflashbench.run import runlock
    path, delay, rewrites = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("LOCKED", flush=True)
    time.sleep(delay)  # the moment between taking the lock and saying who holds it
    for _ in range(max(rewrites, 1)):
        runlock._write_holder(fd, "2026-01-01T00:00:00")
    print("WRITTEN", flush=True)
    time.sleep(60)
""")


def hold_lock(path: Path, delay_s: float, rewrites: int = 1) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), str(delay_s), str(rewrites)],
                            stdout=subprocess.PIPE, text=True, env=env_for_children())  # fmt: skip
    assert proc.stdout.readline().strip() == "LOCKED"
    return proc


def test_a_refused_sweep_names_the_holder_not_an_earlier_one(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / runlock.LOCK_FILE).write_text(json.dumps({"pid": gone.pid, "started_at": "2020-01-01"}) + "\n")
    holder = hold_lock(tmp_path / runlock.LOCK_FILE, delay_s=0.5)
    try:
        with pytest.raises(runlock.RunDirectoryBusy, match=rf"in use by another sweep \(PID {holder.pid}, started 2026"):
            runlock.acquire(tmp_path)
    finally:
        holder.kill()
        holder.wait()


def test_the_holder_line_is_never_read_empty_while_it_is_rewritten(tmp_path, monkeypatch):
    monkeypatch.setattr(runlock, "HOLDER_WAIT_S", 0.0, raising=False)  # what the file says at that instant
    path = tmp_path / runlock.LOCK_FILE
    holder = hold_lock(path, delay_s=0.0, rewrites=30000)
    wait_for(lambda: path.stat().st_size, 30, "the holder's first line")
    fd = os.open(path, os.O_RDONLY)
    said: list[str] = []
    try:
        while len(said) < 300000:  # until the holder says it is done rewriting
            said.append(runlock._read_holder(fd))
            if len(said) % 200 == 0 and select.select([holder.stdout], [], [], 0)[0]:
                break
    finally:
        os.close(fd)
        holder.kill()
        holder.wait()
    assert len(said) >= 200
    assert [s for s in said if "not recorded" in s] == []


def test_a_killed_client_process_leaves_its_rows_counted_in_the_failed_point(tmp_path):
    out = tmp_path / "results"
    with run_standin("--pace-ms", "100", "--model", "standin-model") as url:
        proc = sweep_process("--suite", write_suite(tmp_path, concurrency=(2,)), "--endpoint", url,
                             "--client-processes", "2", "-o", out, "--no-report")  # fmt: skip
        try:
            run_dir = wait_for(lambda: out.is_dir() and next(out.iterdir(), None), 60, "the run directory")
            wait_for(lambda: (run_dir / "requests.jsonl").exists() and measured_rows(run_dir), 120, "a measured row")
            # the client processes: forked by the sweep's fork server (multiprocessing's forkserver), its child
            servers = [p for p in children_of(proc.pid) if b"forkserver" in Path(f"/proc/{p}/cmdline").read_bytes()]
            workers = [w for server in servers for w in children_of(server)]
            assert workers
            killed = 0
            for pid in workers:
                try:  # a client process may have finished its share between the listing and the kill
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            assert killed, "every client process had finished before it could be killed"
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 1, stdout + stderr
    (row,) = load_run(run_dir).points.to_dict("records")
    assert row["status"] == "failed" and "exited with status -9 before finishing its share; the requests it " \
           "finished are counted in this failed point's row, and --resume measures the whole point again" in \
           row["failure_reason"]  # fmt: skip
    kept = measured_rows(run_dir)
    assert 1 <= len(kept) < PROMPTS and row["num_requests"] == len(kept)


OPEN_LOOP = textwrap.dedent("""
    import asyncio, json, resource, sys
    from dflashbench.load.loadgen import LoadGenConfig
    from dflashbench.load.openloop import run_open_loop
    from dflashbench.types import Request
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    reqs = [Request(id=f"q{i}", workload="w", category="c", messages=({"role": "user", "content": "hi"},),
                    max_tokens=12) for i in range(96)]
    cfg = LoadGenConfig(base_url=sys.argv[1], model="standin-model", timeout_s=60)
    rows = asyncio.run(run_open_loop(reqs, [i / 2000 for i in range(96)], cfg))
    events = sorted([(r.sent_ns, 1) for r in rows] + [(r.last_token_ns or r.sent_ns, -1) for r in rows])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    print(json.dumps({"peak": peak, "errors": sorted({r.error for r in rows if not r.ok})}))
""")


def test_the_open_loop_caps_requests_in_flight_by_default_within_the_open_file_limit(tmp_path):
    """96 arrivals within 50 ms, each streaming for 0.6 s, in a process allowed 64 open files: uncapped, the
    sockets run out (``Too many open files``); the default cap (half the limit) keeps every request whole."""
    with run_standin("--pace-ms", "50", "--model", "standin-model") as url:
        done = subprocess.run([sys.executable, "-c", OPEN_LOOP, url], capture_output=True, text=True,
                              env=env_for_children(), timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["errors"] == []
    assert 16 <= figures["peak"] <= 32  # the default cap (half of 64) is used, and holds


def test_no_statement_follows_a_return_or_raise_in_the_package():
    """Code after a ``return`` never runs (it was a second copy of client_note's body)."""
    dead = []
    for path in sorted((SOURCE_ROOT / "dflashbench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            for block in (getattr(node, f, None) for f in ("body", "orelse", "finalbody")):
                if isinstance(block, list):
                    dead += [f"{path.name}:{block[i + 1].lineno}" for i, stmt in enumerate(block[:-1])
                             if isinstance(stmt, ast.Return | ast.Raise | ast.Continue | ast.Break)]  # fmt: skip
    assert dead == []
