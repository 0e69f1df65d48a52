"""Faults, round 6 (issue #61), first half: bad traces, inputs that change under ``--resume``, keys that are words, an
empty model folder and CPU sets for methods a run does not have; each with real processes where the fault needs them.

- A trace row without its time (an Azure ``TIMESTAMP`` of ``NaT`` or an empty cell, first row or middle) is refused
  with its line before any run folder exists (it dry-ran as "arrivals over nan s", then failed its point with
  ``ValueError: cannot convert float NaN to integer``).
- A trace whose replay would last longer than :data:`dflashbench.plan.trace_plan.MAX_REPLAY_S` (a Mooncake timestamp
  of 10^30 ms: 3.2e19 years) is refused with the replay's length, in the dry run too; a window makes it run.
- At most :data:`dflashbench.workloads.traces.MAX_ROWS` requests are read from a trace whatever the window, the
  reader stopping at the next row (a window covering a 10-million-row file parsed it all for 168 s, then
  ``MemoryError``): shown with a small bound on a bigger file, by the rows read and the memory taken.
- A Mooncake count of 10^400 is a one-line error, as the CSV one is (it was an ``OverflowError`` traceback).
- ``--resume`` refuses a ``--data`` or trace file whose SHA-256 changed since the run read it, naming it and the fix.
- An API key that is a common word (``none``, ``auto``, ``clip``, ``synthetic``, ``EMPTY``, ``true``) is redacted in
  free text (a server's echo of it) and nowhere else: the manifest's settings, names, ids and printed paths keep it.
- An empty folder as ``--model`` is refused before a run folder is made or a server launched.
- ``--engine-cpus`` naming a method the run does not have is refused, naming it; with ``--endpoint`` it is said to be
  ignored.
"""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path

import pytest
from test_faults_round5 import standin
from test_reliability import (  # noqa: F401 - standin_backend is an autouse fixture
    GSM8K,
    only_run_dir,
    standin_backend,
    sweep,
    write_suite,
)
from typer.testing import CliRunner

from dflashbench import redact
from dflashbench.cli import app
from dflashbench.errors import UserError
from dflashbench.run.store import load_run
from dflashbench.workloads import traces

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def _azure(path: Path, stamps: list[str]) -> Path:
    """An Azure LLM inference trace (its published header) of one request per stamp."""
    path.write_text("\n".join([AZURE_HEADER, *(f"{s},{100 + i},{5 + i}" for i, s in enumerate(stamps))]) + "\n")
    return path


def sweep_cli(*args):
    return CliRunner().invoke(app, [*map(str, args)], catch_exceptions=False)


def _no_run_folder(out: Path) -> bool:
    return not out.exists() or not [p for p in out.iterdir() if p.is_dir()]


# -- 1. a trace row without its time --------------------------------------------------------------------------------
GOOD = ["2023-11-16 18:17:03.9799600", "2023-11-16 18:17:04.0319600", "2023-11-16 18:17:05.1000000",
        "2023-11-16 18:17:06.2000000"]  # fmt: skip


@pytest.mark.parametrize(("row", "cell", "said"), [(0, "NaT", "got 'NaT'"), (2, "", "got an empty cell"),
                                                   (3, "NaT", "got 'NaT'")])  # fmt: skip
def test_an_azure_row_without_its_time_is_refused_with_its_line_before_any_folder(tmp_path, row, cell, said):
    stamps = list(GOOD)
    stamps[row] = cell
    path = _azure(tmp_path / "t.csv", stamps)
    out = tmp_path / "out"
    line = f"error: {path}:{row + 2}: TIMESTAMP must be a date and time like 2023-11-16 18:17:03.9799600, {said}: " \
           "every row needs the time its request arrived; fill it in or remove the row"  # fmt: skip
    for dry in (True, False):
        result = sweep("--trace", path, "--method", "ar", "-o", out, *(["--dry-run"] if dry else []))
        assert result.exit_code == 2, result.output
        assert line in result.output and "nan s" not in result.output and "resume" not in result.output
        assert _no_run_folder(out)


# -- 2. a replay of 1e27 s ------------------------------------------------------------------------------------------
def _mooncake(path: Path, stamps_ms: list[int], input_length: int | str = 100) -> Path:
    path.write_text("".join(f'{{"timestamp": {t}, "input_length": {input_length}, "output_length": 5, '
                            f'"hash_ids": [{i}]}}\n' for i, t in enumerate(stamps_ms)))  # fmt: skip
    return path


def test_a_replay_longer_than_the_longest_trace_is_refused_with_its_length_and_a_window_runs_it(tmp_path):
    path = _mooncake(tmp_path / "far.jsonl", [0, 400, 900, 10**30])
    out = tmp_path / "out"
    said = f"error: --trace {path}: its replay would last 3.2e+19 years at 1×, its last request (row 4 of the file) " \
           "arriving 1e+27 s after its first; a replay lasts 10 days at most: take its start with --trace-window"  # fmt: skip
    for dry in (True, False):
        result = sweep("--trace", path, "--method", "ar", "-o", out, *(["--dry-run"] if dry else []))
        assert result.exit_code == 2 and said in result.output, result.output
        assert _no_run_folder(out)
    # at a faster speed the same length is said at that speed; a window takes the start
    fast = sweep("--trace", path, "--trace-speed", "1000", "--method", "ar", "--dry-run")
    assert fast.exit_code == 2 and "its replay would last 3.2e+16 years at 1000×" in fast.output, fast.output
    windowed = sweep("--trace", path, "--trace-window", "10s", "--method", "ar", "--dry-run")
    assert windowed.exit_code == 0, windowed.output
    assert "3 of 3 requests sent" in windowed.output and "arrivals over 1 s at 1×" in windowed.output


# -- 3. a window over more requests than one replay plans -----------------------------------------------------------
BIG_ROWS = 60_000  # a hundred requests a second: 600 s


def _big(path: Path, fmt: str) -> Path:
    """``BIG_ROWS`` requests a hundredth of a second apart, the last line broken: a reader that gets there fails."""
    if fmt == "mooncake":
        lines = [f'{{"timestamp": {i * 10}, "input_length": {100 + i % 7}, "output_length": 5, "hash_ids": [{i}]}}'
                 for i in range(BIG_ROWS)] + ["not json"]  # fmt: skip
    else:
        import datetime as dt

        start = dt.datetime(2023, 11, 16, 18, 0, 0, tzinfo=dt.UTC)
        lines = [AZURE_HEADER] + [f"{(start + dt.timedelta(milliseconds=10 * i)).strftime('%Y-%m-%d %H:%M:%S.%f')},"
                                  f"{100 + i % 7},5" for i in range(BIG_ROWS)] + ["NaT,many,5"]  # fmt: skip
    path = path.with_suffix(".jsonl" if fmt == "mooncake" else ".csv")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("fmt", ["mooncake", "azure"])
def test_a_window_over_more_requests_than_a_replay_plans_is_refused_reading_no_further(tmp_path, monkeypatch, fmt):
    path = _big(tmp_path / "big", fmt)
    monkeypatch.setattr(traces, "MAX_ROWS", 1000)  # the bound, made small: the file holds 60 times as many
    monkeypatch.setattr(traces, "CHUNK_ROWS", 500)  # Azure's CSV is parsed this many rows at a time
    parsed: list[int] = []
    reader = traces.read_mooncake if fmt == "mooncake" else traces.read_azure

    def counting(p):
        for row in reader(p):
            parsed.append(row.index)
            yield row

    monkeypatch.setattr(traces, "read_mooncake" if fmt == "mooncake" else "read_azure", counting)
    said = f"--trace-window 1 h of {path} holds more than 1,000 requests (row 1001 arrives 10.0 s after the first), " \
           "more than a replay plans: take a window of 9 s or less (--trace-window)"  # fmt: skip
    tracemalloc.start()
    try:
        with pytest.raises(UserError) as caught:
            traces.load_trace(str(path), window_s=3600.0)  # the window covers the whole file
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(caught.value) == said
    assert len(parsed) == 1001  # one row past the bound, then no further: the broken end is never read
    # a file read whole holds ~250 bytes a row (15 MB here); the bounded read holds its 1,000 rows and one chunk
    assert peak_bytes < 4_000_000, peak_bytes
    # without a window, the same; the sweep's dry run says it in one line, before anything is written
    with pytest.raises(UserError, match=r"^\S+ holds more than 1,000 requests .* take a window of 9 s or less"):
        traces.load_trace(str(path))
    dry = sweep("--trace", path, "--trace-window", "1h", "--method", "ar", "--dry-run")
    assert dry.exit_code == 2 and f"error: {said}" in dry.output, dry.output
    # a window within the bound replays, still reading no further than its end (and the slack for late rows)
    fits = sweep("--trace", path, "--trace-window", "5s", "--method", "ar", "--dry-run")
    assert fits.exit_code == 0 and "500 of 500 requests sent" in fits.output, fits.output


# -- 4. a count of 10^400 -------------------------------------------------------------------------------------------
def test_a_count_no_number_holds_is_one_line(tmp_path):
    path = _mooncake(tmp_path / "huge.jsonl", [0, 100, 200], input_length="1" + "0" * 400)
    result = sweep("--trace", path, "--method", "ar", "--dry-run")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == \
        f"error: {path}:1: timestamp (ms), input_length and output_length must be numbers >= 0 (token counts whole, " \
        "at most 9,007,199,254,740,992), got timestamp 0, input_length 100000000000... (401 characters), " \
        "output_length 5"  # fmt: skip
    csv = _azure(tmp_path / "huge.csv", GOOD[:2])
    csv.write_text(csv.read_text().replace(",100,", ",1" + "0" * 400 + ","))
    result = sweep("--trace", csv, "--method", "ar", "--dry-run")
    assert result.exit_code == 2 and f"error: {csv}:2: ContextTokens must be a whole number of tokens >= 0, got " \
                                      "'1000000000000000000000000000000000000...'" in result.output, result.output


# -- 6. a key that is a word ----------------------------------------------------------------------------------------
WORD_KEYS = ("none", "auto", "clip", "synthetic", "EMPTY", "true")


@pytest.fixture
def forget_keys():
    """The keys a sweep in this process remembered are forgotten after the test (they would redact later tests')."""
    yield
    redact.forget_secrets()


@pytest.fixture(scope="module")
def standin_url(tmp_path_factory):
    with standin(tmp_path_factory.mktemp("standin"), "--pace-ms", "1", "--model", "standin-model") as url:
        yield url


def _word_suite(tmp_path: Path) -> Path:
    path = tmp_path / "words.toml"
    path.write_text("""
name = "words"
backend = "standin"
methods = ["ar"]
model = "standin-model"
concurrency = [1]
num_prompts = 2
requests_per_stream = 1
warmup_requests = 0
max_tokens = 4
timeout_s = 20
[[workloads]]
name = "synthetic"
""")
    return path


def _touched_values(path: Path) -> list[str]:
    """The strings of a run file's records that hold ``***`` and no space: a setting, a name, an id or a path."""
    found: list[str] = []

    def walk(obj) -> None:
        if isinstance(obj, str) and "***" in obj and not re.search(r"\s", obj):
            found.append(obj)
        elif isinstance(obj, dict):
            for value in obj.values():
                walk(value)
        elif isinstance(obj, list):
            for value in obj:
                walk(value)

    text = path.read_text()
    for record in [json.loads(text)] if path.suffix == ".json" else map(json.loads, text.splitlines()):
        walk(record)
    return found


@pytest.mark.parametrize("key", WORD_KEYS)
def test_a_key_that_is_a_word_leaves_settings_names_and_paths_as_they_are(tmp_path, monkeypatch, standin_url,
                                                                            forget_keys, key):  # fmt: skip
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.delenv("DFLASHBENCH_API_KEY", raising=False)
    out = tmp_path / key / f"k_{key}" / "out"  # the key as a folder, and inside a folder's name
    report = key in ("none", "synthetic")  # the report's markup says none, its tables synthetic: both, once each
    result = sweep("--suite", _word_suite(tmp_path), "--endpoint", standin_url, "-o", out,
                   *([] if report else ["--no-report"]))  # fmt: skip
    assert result.exit_code == 0, result.output
    run_dir = only_run_dir(out)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    config = manifest["suite_config"]
    assert {k: config[k] for k in ("trace_fill", "trace_over_context", "client_processes", "engine_cpus",
                                   "interleave")} == {"trace_fill": "none", "trace_over_context": "clip",
                                                      "client_processes": "auto", "engine_cpus": "auto",
                                                      "interleave": "auto"}  # fmt: skip
    assert config["workloads"][0]["name"] == "synthetic" and manifest["cpus"]["setting"] == "auto"
    for name in ("manifest.json", "points.jsonl", "requests.jsonl"):  # *** only in free text (a sentence, a reason)
        assert _touched_values(run_dir / name) == [], name
    points = load_run(run_dir).points
    assert set(points["workload"]) == {"synthetic"} and points["point_id"].str.contains(":synthetic:").all()
    # every path printed is there (a key redacted inside one made "keys/k_***/..." of it)
    printed = re.findall(r"(?:run directory:|report written to) (\S+)", result.output)
    assert len(printed) == 1 + report and all(Path(p).exists() for p in printed), result.output
    assert str(run_dir) in result.output
    if report:  # the one written with no key known: its markup (default-src 'none'), the run's names as they are
        html = next((out / "reports").glob("*.html"))
        redact.forget_secrets()
        again = sweep_cli("report", run_dir, "-o", tmp_path / "again.html")
        assert again.exit_code == 0, again.output
        assert html.read_text() == (tmp_path / "again.html").read_text()
    if key == "none":  # "trace_fill": "***" made the manifest unreadable to --resume (exit 2)
        resumed = sweep("--resume", run_dir, "--no-report")
        assert resumed.exit_code == 0 and "1 point(s) done, 0 to run" in resumed.output, resumed.output


def test_a_key_that_is_a_word_is_still_redacted_where_a_server_echoes_it(tmp_path, monkeypatch, forget_keys):
    monkeypatch.setenv("OPENAI_API_KEY", "none")
    monkeypatch.delenv("DFLASHBENCH_API_KEY", raising=False)
    out = tmp_path / "out"
    with standin(tmp_path, "--pace-ms", "1", "--model", "standin-model", "--reject-auth-every", "2") as url:
        result = sweep("--suite", _word_suite(tmp_path), "--endpoint", url, "-o", out, "--no-report")
    assert result.exit_code == 1, result.output  # one of two requests refused: the point is degraded
    assert "first error: HTTP 401: Incorrect API key provided: ***" in result.output, result.output
    run_dir = only_run_dir(out)
    errors = [json.loads(line)["error"] for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert [e for e in errors if e] == ["HTTP 401: Incorrect API key provided: ***"]
    assert "Incorrect API key provided: ***" in load_run(run_dir).points.loc[0, "failure_reason"]
    assert json.loads((run_dir / "manifest.json").read_text())["suite_config"]["trace_fill"] == "none"


# -- 5. --resume after a data or trace file changed -----------------------------------------------------------------
def _gsm8k(path: Path, prefix: str) -> Path:
    """A GSM8K file in its own schema (question, answer ending ``#### N``), three rows."""
    path.write_text("".join(json.dumps({"question": f"{prefix}{i}: what is {i} + {i}?",
                                        "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"}) + "\n" for i in range(3)))
    return path


def _drop_point(run_dir: Path, point_id: str) -> None:
    """What a sweep killed during ``point_id`` leaves: no row of it anywhere."""
    for name in ("points.jsonl", "requests.jsonl"):
        path = run_dir / name
        keep = [line for line in path.read_text().splitlines() if json.loads(line)["point_id"] != point_id]
        path.write_text("".join(line + "\n" for line in keep))


def _resume_refuses_the_changed_file(run_dir: Path, changed: Path, what: str, restore) -> None:
    files = {name: (run_dir / name).read_bytes() for name in ("manifest.json", "points.jsonl", "requests.jsonl")}
    result = sweep("--resume", run_dir)
    assert result.exit_code == 2, result.output
    assert f"error: --resume {run_dir}: the {what}, {changed}, changed since the run read it (SHA-256 " in result.output
    assert "the points still to run would measure other requests than the finished ones. Put the file back as it " \
           "was, or measure the new one in a new run (dflashbench sweep without --resume); nothing was run or " \
           "written" in result.output  # fmt: skip
    assert {name: (run_dir / name).read_bytes() for name in files} == files  # nothing of the run changed
    restore()
    again = sweep("--resume", run_dir)  # the file as it was: the run finishes
    assert again.exit_code == 0 and "1 point(s) done, 1 to run" in again.output, again.output


def test_resume_refuses_a_data_file_that_changed_naming_it(tmp_path, standin_url):
    data = _gsm8k(tmp_path / "gsm8k.jsonl", "q")
    suite = write_suite(tmp_path, concurrency=(1, 2), data=data)
    out = tmp_path / "out"
    first = sweep("--suite", suite, "--endpoint", standin_url, "-o", out, "--no-report")
    assert first.exit_code == 0, first.output
    run_dir = only_run_dir(out)
    _drop_point(run_dir, "standin:ar:gsm8k:c2")  # the sweep was killed during its second point
    _gsm8k(data, "z")  # ... and the data file was rewritten before the resume
    _resume_refuses_the_changed_file(run_dir, data, "--data of workload gsm8k", lambda: _gsm8k(data, "q"))
    inputs = json.loads((run_dir / "manifest.json").read_text())["inputs"]
    assert [(i["what"], Path(i["path"]).name, i["bytes"], i["files"]) for i in inputs] == [
        ("--data of workload gsm8k", "gsm8k.jsonl", data.stat().st_size, 1)]  # fmt: skip


def test_resume_refuses_a_trace_file_that_changed_naming_it(tmp_path, standin_url):
    trace = _mooncake(tmp_path / "t.jsonl", [0, 100, 200])
    suite = write_suite(tmp_path, concurrency=(), data=GSM8K,
                        extra=f'trace = "{trace}"\ntrace_speed = [1.0, 2.0]\ntrace_context_tokens = 4096\n')  # fmt: skip
    out = tmp_path / "out"
    first = sweep("--suite", suite, "--endpoint", standin_url, "-o", out, "--no-report")
    assert first.exit_code == 0, first.output
    run_dir = only_run_dir(out)
    points = load_run(run_dir).points
    assert len(points[points["category"] == "all"]) == 2
    _drop_point(run_dir, sorted(points["point_id"])[-1])
    _mooncake(trace, [0, 100, 200, 300])  # a row more
    _resume_refuses_the_changed_file(run_dir, trace, "--trace", lambda: _mooncake(trace, [0, 100, 200]))


# -- 7. an empty model folder ---------------------------------------------------------------------------------------
def test_an_empty_model_folder_is_refused_before_a_run_folder_or_a_server(tmp_path):
    from dflashbench.embedded import default_paths

    empty, readme = tmp_path / "empty", tmp_path / "readme-only"
    empty.mkdir()
    readme.mkdir()
    (readme / "README.md").write_text("weights to come\n")
    out = tmp_path / "out"
    cases = [
        (["--model", empty, "--method", "ar"], f"error: --model {empty}: an empty folder (a model is a folder with its "
         "config.json and weights: a download that did not finish, or the wrong folder?); nothing was run or written"),
        (["--model", default_paths().target, "--method", "dflash", "--draft", empty], f"error: --draft (dflash) {empty}: "
         "an empty folder"),
        (["--model", readme, "--method", "ar"], f"error: --model {readme}: a folder without config.json (it holds "
         "README.md); the reference backend reads a transformers model folder"),
    ]  # fmt: skip
    for args, said in cases:
        result = sweep(*args, "-o", out)
        assert result.exit_code == 2, result.output
        assert said in result.output and "waiting for" not in result.output and "--resume" not in result.output
        assert not out.exists()  # no run folder, so no server log either: no server was started


# -- 8. --engine-cpus for a method not in the run, or with --endpoint -----------------------------------------------
def test_engine_cpus_for_a_method_not_in_the_run_is_refused_naming_it(tmp_path):
    out = tmp_path / "out"
    for dry in (True, False):
        result = sweep("--method", "ar", "--engine-cpus", "ar=0,dflash=1", "-o", out, *(["--dry-run"] if dry else []))
        assert result.exit_code == 2, result.output
        assert "error: --engine-cpus ar=0,dflash=1: dflash is not a method of this run (it runs ar), so CPU 1 would " \
               "be kept from the client for no server: drop dflash=1, or add dflash to --method" in result.output
        assert not out.exists()
    both = sweep("--method", "ar", "--engine-cpus", "ar=0,ngram=1,eagle3=1", "--dry-run")
    assert both.exit_code == 2 and "ngram, eagle3 are not methods of this run (it runs ar)" in both.output, both.output


def test_engine_cpus_with_an_endpoint_is_said_to_be_ignored(tmp_path, standin_url):
    suite = write_suite(tmp_path)
    out = tmp_path / "out"
    result = sweep("--suite", suite, "--endpoint", standin_url, "--engine-cpus", "0", "-o", out, "--no-report")
    assert result.exit_code == 0, result.output
    note = "note: --engine-cpus 0 is ignored: with --endpoint dflashbench launches no server to pin, and the client " \
           "runs on every CPU it may use"  # fmt: skip
    assert result.output.count(note) == 1, result.output
    manifest = json.loads((only_run_dir(out) / "manifest.json").read_text())
    assert manifest["cpus"]["engine"] == [] and manifest["cpus"]["setting"] == "0"
    dry = sweep("--suite", suite, "--endpoint", standin_url, "--engine-cpus", "ar=0", "--dry-run")
    assert dry.exit_code == 0 and "note: --engine-cpus ar=0 is ignored" in dry.output, dry.output
    auto = sweep("--suite", suite, "--endpoint", standin_url, "--dry-run")  # not asked for: nothing said
    assert auto.exit_code == 0 and "--engine-cpus" not in auto.output, auto.output
