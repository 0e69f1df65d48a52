"""The GitHub Actions workflow users copy (docs/ci/dflashbench-gpu.yml, explained in docs/ci.md): it is valid
YAML of a workflow, kept out of .github/workflows/, and every ``dflashbench`` command in it goes through the CLI's
own parser (click's, under Typer), so an option that does not exist, a bad choice or a missing argument fails
here rather than on a user's GPU runner."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import time
from pathlib import Path

import pytest
import typer
import yaml

from dflashbench.cli import app

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "docs" / "ci" / "dflashbench-gpu.yml"
_EXPRESSION = re.compile(r"\$\{\{[^}]*\}\}")  # ${{ github.sha }}: a value at run time
_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "<", "&", "(", ")", "$("}


def _steps() -> list[dict]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    return [step for job in doc["jobs"].values() for step in job["steps"]]


def dflashbench_commands(script: str) -> list[list[str]]:
    """Each ``dflashbench ...`` command of a step's shell script as argv after the program: continuation lines
    joined, ``${{ }}`` expressions as a value, the command cut at the first shell operator or redirection."""
    joined = re.sub(r"\\\n\s*", " ", script)
    out = []
    for line in joined.splitlines():
        line = _EXPRESSION.sub("VALUE", line)
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
        for i, token in enumerate(tokens):
            if token.endswith("dflashbench") and not token.startswith("dflashbench-"):
                argv = []
                for t in tokens[i + 1:]:
                    if t in _OPERATORS or set(t) <= set("|&;<>()"):
                        break
                    argv.append(t)
                out.append(argv)
    return out


def parse(argv: list[str]):
    """``argv`` through dflashbench's own command-line parser (no command is run)."""
    root = typer.main.get_command(app)
    with root.make_context("dflashbench", list(argv), resilient_parsing=False) as ctx:
        name, cmd, rest = root.resolve_command(ctx, list(argv))
        return cmd.make_context(name, rest, parent=ctx)


def test_workflow_is_a_workflow_kept_where_it_does_not_run_here():
    assert WORKFLOW.is_file() and not (ROOT / ".github" / "workflows" / WORKFLOW.name).exists()
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert doc["name"] and doc["jobs"]["bench"]["runs-on"] == ["self-hosted", "gpu"]
    assert "pull_request" in doc[True] and "schedule" in doc[True]  # YAML 1.1 reads the key `on` as True


def _substitutions_out(text: str) -> str:
    """``$( ... )`` command substitutions (nested parentheses and all) replaced by ``VALUE``."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$(", i):
            depth, j = 1, i + 2
            while j < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                j += 1
            out.append("VALUE")
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _arrays(script: str) -> dict[str, str]:
    """Each bash array a script builds (``name=( ... )``, ``name+=( ... )``): every element it may hold, in order,
    as shell words (command substitutions as ``VALUE``): the options of a command given as ``"${name[@]}"``."""
    found: dict[str, list[str]] = {}
    for m in re.finditer(r"\b([a-z_]+)\+?=\(", script):
        depth, j = 1, m.end()
        while j < len(script) and depth:
            depth += {"(": 1, ")": -1}.get(script[j], 0)
            j += 1
        found.setdefault(m.group(1), []).append(_substitutions_out(script[m.end():j - 1]))
    return {name: " ".join(" ".join(part.split()) for part in parts) for name, parts in found.items()}


# What a maintainer would put in a variable the workflow leaves empty, so the option it feeds is parsed with a value
SET_BY_USER = {"ASSUME_USER_TOK_PER_S": "500-600", "DRAFTER_PATH": "drafters/dflash"}


def _with_env(script: str) -> str:
    """The workflow's own variables (its top ``env``; :data:`SET_BY_USER` where it leaves one empty) put in, as the
    runner's shell would, and each option array a command is given (``"${args[@]}"``) spelled out with every option
    it may hold."""
    env = {k: str(v) or SET_BY_USER.get(k, "") for k, v in yaml.safe_load(WORKFLOW.read_text())["env"].items()}
    for name, words in _arrays(script).items():
        script = script.replace(f'"${{{name}[@]}}"', words)
    return re.sub(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", lambda m: env.get(m.group(1), m.group(0)), script)


def test_every_dflashbench_command_parses_with_the_cli():
    commands = [argv for step in _steps() if "run" in step for argv in dflashbench_commands(_with_env(step["run"]))
                if argv]  # a bare word "dflashbench" (a case label) is no command
    names = [argv[0] for argv in commands]
    assert {"sweep", "compare", "history"} <= set(names), names
    for argv in commands:
        ctx = parse(argv)
        assert ctx.command.name == argv[0]
    history = next(parse(a) for a in commands if a[0] == "history")
    assert history.params["recent"] == 5 and str(history.params["summary"]) == "history.md"
    assert str(history.params["noise_profile_out"]) == "noise-profile.json"
    compare = next(parse(a) for a in commands if a[0] == "compare")
    assert str(compare.params["noise_profile"]) == "dflashbench-runs/noise-profile.json"
    assert compare.params["accept_weak"] and str(compare.params["comment"]) == "comment.md"
    assert compare.params["comment_marker"] == "<!-- dflashbench-gpu-comment -->"
    sweep = next(parse(a) for a in commands if a[0] == "sweep" and "--resume" not in a)
    assert sweep.params["suite"] == "ci" and sweep.params["model"] == "qwen3-8b"
    assert sweep.params["budget"] and sweep.params["assume_user_tok_per_s"]


def test_option_arrays_are_spelled_out():
    script = 'args=(--a "$X" --why "$(cat "f" 2>/dev/null)")\nif c; then args+=(--b 1); fi\ncmd "${args[@]}"\n'
    assert _arrays(script) == {"args": '--a "$X" --why "VALUE" --b 1'}
    assert _with_env(script).splitlines()[-1] == 'cmd --a "$X" --why "VALUE" --b 1'


@pytest.mark.parametrize("bad", [["history", "runs/", "--recnet", "3"], ["compare", "a", "b", "--format", "pdf"],
                                 ["sweep", "--label"], ["history"]])  # fmt: skip
def test_the_parser_refuses_what_a_typo_would_leave(bad):
    with pytest.raises(Exception) as found:  # Typer's own click's UsageError, or dflashbench's own parsers' UserError
        parse(bad)
    assert {"UsageError", "UserError"} & {c.__name__ for c in type(found.value).__mro__}, found.value


def test_commands_are_read_out_of_the_shell_script():
    script = 'X=$(dflashbench compare "$A" "$NEW" --format md \\\n  --summary "$GITHUB_STEP_SUMMARY" | tee out)\n' \
             'dflashbench history "${LAST[@]}" --recent ${{ env.K }} >> comment.md\n'  # fmt: skip
    assert dflashbench_commands(script) == [["compare", "$A", "$NEW", "--format", "md", "--summary",
                                             "$GITHUB_STEP_SUMMARY"],
                                            ["history", "${LAST[@]}", "--recent", "VALUE"]]  # fmt: skip


# -- the workflow end to end (its own nox session: `nox -s ci-workflow`; skipped elsewhere) ---------------------------
E2E = pytest.mark.skipif(not os.environ.get("DFLASHBENCH_CI_WORKFLOW"),
                         reason="the workflow end to end runs in its own session: nox -s ci-workflow")  # fmt: skip
GH_STUB = '''#!/usr/bin/env python3
"""gh, as the workflow's comment step calls it: comments kept in $GH_STUB_DIR/comments.json, each call recorded.
As GitHub's REST API answers: GET repos/R/issues/N/comments lists issue N's comments only; PATCH
repos/R/issues/comments/ID edits one comment by its id; gh pr comment N adds one to pull request N."""
import json, os, re, sys
from pathlib import Path
d = Path(os.environ["GH_STUB_DIR"]); state = d / "comments.json"
comments = json.loads(state.read_text()) if state.exists() else []
argv = sys.argv[1:]
with open(d / "calls.jsonl", "a") as f:
    f.write(json.dumps(argv) + "\\n")
listing = re.fullmatch(r"repos/[^/]+/[^/]+/issues/(\\d+)/comments", argv[1]) if argv[:1] == ["api"] else None
if listing and "--jq" in argv:
    marker = re.search(r'contains\\("(.*?)"\\)', argv[argv.index("--jq") + 1]).group(1)
    issue = int(listing.group(1))
    print("\\n".join(str(c["id"]) for c in comments if c["issue"] == issue and marker in c["body"]))
elif argv[:1] == ["api"] and "PATCH" in argv:
    cid = int(argv[argv.index("PATCH") + 1].rsplit("/", 1)[1])
    body = Path(argv[argv.index("-F") + 1].split("=@", 1)[1]).read_text()
    next(c for c in comments if c["id"] == cid)["body"] = body
elif argv[:2] == ["pr", "comment"]:
    comments.append({"id": 1000 + len(comments), "issue": int(argv[2]),
                     "body": Path(argv[argv.index("--body-file") + 1]).read_text()})
else:
    sys.exit(f"gh stub: not played: {argv}")
state.write_text(json.dumps(comments))
'''


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    """What every scenario shares: the caches and artifacts between jobs, the gh stub, the tools' venv (this
    interpreter's packages seen through a .pth, so the workflow's own install step installs only dflashbench)."""
    import site
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("ci-e2e")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(GH_STUB)
    (bin_dir / "gh").chmod(0o755)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = next(venv.glob("lib/python*/site-packages"))
    (purelib / "parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    suite = root / "suite.toml"
    return {"root": root, "bin": bin_dir, "venv": venv, "store": root / "store", "suite": suite, "runs": 0,
            "times": []}


def _workspace(e2e, name: str) -> Path:
    """A fresh checkout of this tree (tracked and untracked files git does not ignore)."""
    import subprocess

    ws = e2e["root"] / name
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"], check=True,
                           capture_output=True).stdout.decode().split("\0")  # fmt: skip
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file() and not rel.startswith(("docs/measurements/", "results/", "reports/")):
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, ws / rel)
    return ws


def _suite(path: Path, delay_ms: float = 0.0, broken: bool = False) -> Path:
    """The embedded default on the reference backend at c=1, 4 prompts: DFlash slowed by the reference server's
    --test-step-delay-ms (as tests/gate/test_compare_sweeps.py slows it), or EAGLE-3's server given an option it
    refuses (a sweep that fails part-way)."""
    text = (ROOT / "suites" / "demo.toml").read_text().replace('name = "demo"', 'name = "ci-e2e"')
    text = re.sub(r"concurrency = \[.*?\]", "concurrency = [1]", text).replace("num_prompts = 32", "num_prompts = 4")
    args = []
    if delay_ms:
        args.append(f'dflash = ["--test-step-delay-ms", "{delay_ms}"]')
    if broken:
        args.append('eagle3 = ["--no-such-option"]')
    path.write_text(text + ("\n[extra_args]\n" + "\n".join(args) + "\n" if args else ""))
    return path


def _play(e2e, name: str, event: str, *, fork: bool = False, delay_ms: float = 0.0, broken: bool = False,
          pr: int = 7, inputs: dict | None = None):  # fmt: skip
    from gha import Job

    e2e["runs"] += 1
    ws = _workspace(e2e, name)
    suite = _suite(e2e["root"] / f"{name}.toml", delay_ms, broken)
    repo = "owner/bench"
    github = {"event_name": event, "repository": repo, "run_id": 100 + e2e["runs"], "run_attempt": 1,
              "sha": f"{e2e['runs']:040x}", "ref": "refs/heads/trunk", "ref_name": "trunk",
              "server_url": "https://github.com",
              "event": {"repository": {"default_branch": "trunk", "full_name": repo}}}  # fmt: skip
    if event == "pull_request":
        head = "someone/bench" if fork else repo
        github["event"]["pull_request"] = {"number": pr, "head": {"sha": "f" * 40, "repo": {"full_name": head}}}
        github["ref"], github["ref_name"] = f"refs/pull/{pr}/merge", f"{pr}/merge"
    overrides = {"BUILD_FROM_PR": "dflashbench", "ENGINE": "", "DFLASHBENCH_EXTRAS": "datasets",
                 "VENV": str(e2e["venv"]), "SUITE": str(suite), "MODEL": "", "SWEEP_BUDGET": "", "ASSUME_USER_TOK_PER_S": "",
                 "SWEEP_TIMEOUT_MINUTES": "5", "NOISE_PROFILE_RUNS": "2"}  # fmt: skip
    base_env = {"PATH": f"{e2e['bin']}{os.pathsep}{os.environ['PATH']}", "GH_STUB_DIR": str(e2e["root"]),
                "HOME": os.environ.get("HOME", "/tmp")}  # fmt: skip
    doc = yaml.safe_load(WORKFLOW.read_text())
    doc["on"] = doc.pop(True)
    bench = Job(doc, "bench", ws, e2e["store"], github, env_overrides=overrides, base_env=base_env,
                inputs=inputs or {})  # fmt: skip
    began = time.monotonic()
    result = bench.run()
    e2e["times"].append((name, time.monotonic() - began, bench.times))
    comment = None
    if event == "pull_request":
        ctx_needs = {"bench": {"result": result}}
        post = Job(doc, "comment", _fresh(e2e, name + "-comment"), e2e["store"], github, env_overrides=overrides,
                   base_env=base_env, needs=ctx_needs)  # fmt: skip
        if post.run() == "success":
            comment = (post.workspace / "comment.md").read_text()
    return bench, result, ws, comment


def _fresh(e2e, name: str) -> Path:
    path = e2e["root"] / name
    path.mkdir()
    return path


def _comments(e2e) -> list[dict]:
    state = e2e["root"] / "comments.json"
    return json.loads(state.read_text()) if state.exists() else []


def _check_comment(text: str) -> None:
    from dflashbench.gate.comment import LIMIT, size

    assert size(text) <= LIMIT and len(text) <= 65_536
    lines = text.splitlines()
    assert lines[0] == "<!-- dflashbench-gpu-comment -->" and sum(ln.startswith("#") for ln in lines) == 1
    assert "**BASE**" in text or "nothing to compare" in text


# DFlash's server sleeps this long after every step in the slowed pull request: a DFlash step takes 5-30 ms here
# (idle to busy), so its per-user rate falls by 75 % or more, far past what the gate can fail on at 4 prompts with
# the project's default run-to-run term (a drop of about 25 %): a regression whatever the machine's load
SLOW_DFLASH_MS = 100


def _timings(e2e) -> str:
    """Where each scenario's time went (printed: pytest -s, or the failure's output)."""
    rows = []
    for name, total, steps in e2e["times"]:
        slow = ", ".join(f"{step} {s:.0f} s" for step, s in sorted(steps, key=lambda x: -x[1])[:3])
        rows.append(f"{name}: {total:.0f} s ({slow})")
    return "\n".join(rows)


@E2E
@pytest.mark.timeout(900)  # 2.5-3.5 min on 2 cores (docs/ci.md); each sweep step has its own 5-minute limit besides
def test_the_workflow_end_to_end(e2e):
    """Scenarios in order, one store of caches and artifacts between them, as one repository's runs: the nightly
    accepted as baseline; a pull request with nothing changed (comment posted, green, judged with the project's
    default run-to-run term and saying so); one with DFlash slowed (the regression named, red, the comment edited in
    place); a manual run on the default branch accepted by hand (green whatever compare says; it learns the runner's
    run-to-run term from the two nightly runs); a sweep that fails part-way (compare, with that term, history and
    the comment still run, red, the run kept); a fork's pull request (the guard skips the GPU job)."""
    try:
        _scenarios(e2e)
    finally:
        print("\n" + _timings(e2e))


def _runs(ws: Path) -> Path:
    return ws / "dflashbench-runs"


def _scenarios(e2e):
    accepted = _first_nightly(e2e)
    _pull_requests(e2e, accepted)
    _accepted_by_hand(e2e, accepted)
    _after_it(e2e)


def _first_nightly(e2e) -> str:
    bench, result, ws, _ = _play(e2e, "nightly", "schedule")
    assert result == "success", bench.log
    accepted = (_runs(ws) / "accepted").read_text().strip()
    assert (_runs(ws) / "results" / accepted / "manifest.json").is_file()
    assert "the first nightly run: no baseline before it" in (_runs(ws) / "accepted.why").read_text()
    _check_comment((ws / "comment.md").read_text())
    assert not list(_runs(ws).rglob(".sweep.lock"))
    assert not (_runs(ws) / "noise-profile.json").exists()  # one run holds no run-to-run term
    assert any(p.name.startswith("dflashbench-runs-") for p in (e2e["store"] / "caches").iterdir())
    return accepted


def _pull_requests(e2e, accepted: str) -> None:
    bench, result, ws, comment = _play(e2e, "pr-same", "pull_request")
    assert result == "success", bench.log
    assert comment is not None and len(_comments(e2e)) == 1
    _check_comment(comment)
    assert f"**BASE** `{accepted}`" in comment and "dflashbench from this pull request" in comment
    assert "speedup at c=1" in comment
    assert "run-to-run term the project's default" in comment and "not this machine's" in comment
    assert "history page written" not in comment  # history's Markdown alone, not its log lines
    page = (ws / "history.html").read_text()
    assert "the pull request #7 ringed" in page and 'class="marked"' in page  # this job's run, on the page

    bench, result, ws, comment = _play(e2e, "pr-slow", "pull_request", delay_ms=SLOW_DFLASH_MS)
    assert result == "failure", (bench.log, (ws / "compare.txt").read_text()[:3000])
    _check_comment(comment)
    assert "❌" in comment.splitlines()[1] and "DFlash vs AR speedup at c=1" in comment and "**regression**" in comment
    assert len(_comments(e2e)) == 1 and _comments(e2e)[0]["body"] == comment  # edited in place by its marker


def _accepted_by_hand(e2e, accepted: str) -> None:
    # Run workflow on the default branch with accept: true (a nightly run, accepted whatever compare says: on a
    # machine shared with other work an unchanged run's absolute figures can fall past their gate)
    bench, result, ws, _ = _play(e2e, "by-hand", "workflow_dispatch", inputs={"accept": True})
    assert result == "success", bench.log
    assert "project's default" in (ws / "compare.txt").read_text()  # no profile yet: it is learnt tonight
    assert (_runs(ws) / "accepted").read_text().strip() != accepted
    assert "accepted by hand (workflow_dispatch accept=true)" in (_runs(ws) / "accepted.why").read_text()
    by_hand = (_runs(ws) / "accepted").read_text().strip()
    assert (_runs(ws) / "history.from").read_text().strip() == by_hand  # history starts afresh at it
    profile = json.loads((_runs(ws) / "noise-profile.json").read_text())
    assert profile["made_by"] == "dflashbench history" and len(profile["runs"]) == 2
    assert profile["backends"]["reference"]["source"] == "from history"
    assert profile["backends"]["reference"]["terms"]["speedup"]["df"] >= 1


def _after_it(e2e) -> None:
    bench, result, ws, comment = _play(e2e, "pr-broken", "pull_request", broken=True, pr=8)
    assert result == "failure", bench.log
    outcomes = dict((name, outcome) for name, outcome in bench.log if name != "output")
    assert outcomes["Sweep"] == "failure"
    for step in ("History of the newest runs", "Compare with the accepted baseline, and write the comment",
                 "Hand the comment to the commenting job"):  # fmt: skip
        assert outcomes[step] == "success", bench.log
    _check_comment(comment)
    assert "run-to-run term, from history" in (ws / "compare.txt").read_text()  # the runner's own, learnt
    assert "exit 3). 2 runs," in (ws / "history.md").read_text()  # the run accepted by hand and this one, not the first
    assert "run-to-run term from history" in comment
    kept = [p for p in (e2e["store"] / "caches").iterdir() if p.name.startswith("dflashbench-partial-")]
    assert kept and list(kept[0].rglob("manifest.json")), "the partial run is kept for --resume"
    assert [c["issue"] for c in _comments(e2e)] == [7, 8]  # pull request 8's own comment, 7's left alone
    assert _comments(e2e)[1]["body"] == comment

    bench, result, ws, comment = _play(e2e, "pr-fork", "pull_request", fork=True, pr=9)
    assert result == "skipped" and comment is None and not (ws / "dflashbench-new").exists()
