"""A GitHub Actions job run here, step by step, as the runner runs it: for tests/cli/test_ci_workflow.py.

What it does as GitHub documents it (docs/ci.md cites each page):
- expressions ``${{ }}`` in ``if:``, ``env:``, ``with:`` and ``timeout-minutes``: the contexts ``github``, ``env``,
  ``steps``, ``needs``, ``secrets``, ``inputs``; ``==``/``!=`` (strings case-insensitive), ``&&``/``||`` returning
  an operand, ``!``, the functions ``always()``, ``success()``, ``failure()``, ``cancelled()``, ``format()``,
  ``fromJSON()``, ``contains()``; a step's ``if`` without a status function means ``success() && (...)``;
- ``run:`` steps through ``bash --noprofile --norc -eo pipefail`` (the default shell), with the environment files
  ``GITHUB_ENV``, ``GITHUB_OUTPUT``, ``GITHUB_PATH`` (a new file per step, read after it) and
  ``GITHUB_STEP_SUMMARY``, and a step's ``timeout-minutes``;
- ``uses:`` steps of the actions the workflow uses, played by what they do to the workspace: checkout (the
  workspace already holds the checkout), cache restore and save (a folder per key, restore-keys by prefix, the
  newest first), upload and download of an artifact (a folder per name).
Anything else raises: a workflow that grows a step this does not know fails its test, not a user's runner."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

# -- expressions -----------------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|&&|\|\||<=|>=|[!()<>,.\[\]*])"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))")  # fmt: skip


def _tokens(text: str) -> list[tuple[str, str]]:
    out, i = [], 0
    while i < len(text):
        if text[i:].strip() == "":
            break
        m = _TOKEN.match(text, i)
        if not m:
            raise ValueError(f"expression: cannot read {text[i:]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        i = m.end()
    return out


def _truthy(v) -> bool:
    return v not in (None, False, 0, "", 0.0)


def _eq(a, b) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, int | float) or isinstance(b, int | float):
        def num(v):
            if v is None or v == "":
                return 0.0
            try:
                return float(v)
            except (TypeError, ValueError):
                return float("nan")
        return num(a) == num(b)
    return a == b


class _Parser:
    def __init__(self, text: str, ctx: dict, status: dict):
        self.toks, self.i, self.ctx, self.status = _tokens(text), 0, ctx, status
        self.used_status = False

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def take(self, value=None):
        tok = self.peek()
        if value is not None and tok[1] != value:
            raise ValueError(f"expression: expected {value!r}, found {tok[1]!r}")
        self.i += 1
        return tok

    def parse(self):
        v = self.or_()
        if self.i != len(self.toks):
            raise ValueError(f"expression: trailing {self.toks[self.i:]}")
        return v

    def or_(self):
        v = self.and_()
        while self.peek()[1] == "||":
            self.take()
            w = self.and_()
            v = v if _truthy(v) else w
        return v

    def and_(self):
        v = self.cmp()
        while self.peek()[1] == "&&":
            self.take()
            w = self.cmp()
            v = w if _truthy(v) else v
        return v

    def cmp(self):
        v = self.unary()
        while self.peek()[1] in ("==", "!="):
            op = self.take()[1]
            w = self.unary()
            v = _eq(v, w) if op == "==" else not _eq(v, w)
        return v

    def unary(self):
        if self.peek()[1] == "!":
            self.take()
            return not _truthy(self.unary())
        return self.primary()

    def primary(self):
        kind, value = self.take()
        if value == "(":
            v = self.or_()
            self.take(")")
            return v
        if kind == "num":
            return float(value) if "." in value else int(value)
        if kind == "str":
            return value[1:-1].replace("''", "'")
        if kind == "name":
            if value in ("true", "false"):
                return value == "true"
            if value == "null":
                return None
            if self.peek()[1] == "(":
                return self.call(value)
            v = self.ctx.get(value)
            while self.peek()[1] in (".", "["):
                if self.take()[1] == ".":
                    key = self.take()[1]
                else:
                    key = self.or_()
                    self.take("]")
                v = v.get(key) if isinstance(v, dict) else None
            return v
        raise ValueError(f"expression: unexpected {value!r}")

    def call(self, name: str):
        self.take("(")
        args = []
        while self.peek()[1] != ")":
            args.append(self.or_())
            if self.peek()[1] == ",":
                self.take()
        self.take(")")
        low = name.lower()
        if low in ("always", "success", "failure", "cancelled"):
            self.used_status = True
            failed = self.status.get("failed", False)
            return {"always": True, "success": not failed, "failure": failed, "cancelled": False}[low]
        if low == "format":
            fmt = str(args[0])
            return re.sub(r"\{(\d+)\}", lambda m: _str(args[1 + int(m.group(1))]), fmt)
        if low == "fromjson":
            return json.loads(args[0])
        if low == "contains":
            hay, needle = args
            if isinstance(hay, list):
                return any(_eq(h, needle) for h in hay)
            return str(needle).lower() in str(hay).lower()
        raise ValueError(f"expression: function {name}() not played here")


def _str(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def evaluate(text: str, ctx: dict, status: dict | None = None, condition: bool = False):
    """One expression (without ``${{ }}``); ``condition``: an ``if`` (``success() &&`` implied)."""
    p = _Parser(text, ctx, status or {})
    v = p.parse()
    if condition and not p.used_status:
        return _truthy(v) and not (status or {}).get("failed", False)
    return _truthy(v) if condition else v


def substitute(text, ctx: dict):
    """``${{ expr }}`` inside a string replaced by its value (a whole-string expression keeps its type)."""
    if not isinstance(text, str):
        return text
    whole = re.fullmatch(r"\s*\$\{\{(.*?)\}\}\s*", text, re.S)
    if whole and "}}" not in whole.group(1):
        return evaluate(whole.group(1), ctx)
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: _str(evaluate(m.group(1), ctx)), text, flags=re.S)


def condition(text, ctx: dict, status: dict) -> bool:
    if text is None:
        return not status.get("failed", False)
    if isinstance(text, bool):
        return text and not status.get("failed", False)
    inner = re.fullmatch(r"\s*\$\{\{(.*?)\}\}\s*", str(text), re.S)
    return evaluate(inner.group(1) if inner else str(text), ctx, status, condition=True)


# -- environment files -----------------------------------------------------------------------------------------------
def read_env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines and ``NAME<<DELIMITER`` blocks, as the runner reads GITHUB_ENV and GITHUB_OUTPUT."""
    out: dict[str, str] = {}
    if not path.exists():
        return out
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:j])
            i = j + 1
            continue
        if line.strip():
            name, value = line.split("=", 1)
            out[name] = value
        i += 1
    return out


# -- a job ------------------------------------------------------------------------------------------------------------
@dataclass
class Job:
    """One job of a workflow, run in ``workspace``; ``store`` holds the caches and artifacts between jobs."""

    workflow: dict
    name: str
    workspace: Path
    store: Path
    github: dict
    secrets: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)
    env_overrides: dict = field(default_factory=dict)
    base_env: dict = field(default_factory=dict)
    needs: dict = field(default_factory=dict)
    log: list = field(default_factory=list)
    steps_ctx: dict = field(default_factory=dict)
    failed: bool = False
    summary: str = ""
    times: list = field(default_factory=list)  # (step, seconds it took): where a scenario's time goes

    def context(self, env: dict) -> dict:
        return {"github": self.github, "env": env, "steps": self.steps_ctx, "secrets": self.secrets,
                "inputs": self.inputs, "needs": self.needs, "runner": {"temp": str(self.store / "tmp")}}

    def runs(self) -> bool:
        job = self.workflow["jobs"][self.name]
        env = {**self.workflow.get("env", {}), **self.env_overrides}
        return condition(job.get("if"), self.context(env), {"failed": False})

    def run(self) -> str:
        """Every step in order; the job's result: success, failure or skipped."""
        job = self.workflow["jobs"][self.name]
        env = {k: str(v) for k, v in {**self.workflow.get("env", {}), **self.env_overrides}.items()}
        if not self.runs():
            return "skipped"
        for k, v in (job.get("env") or {}).items():
            env[k] = _str(substitute(v, self.context(env)))
        paths: list[str] = []
        (self.store / "tmp").mkdir(parents=True, exist_ok=True)
        for n, step in enumerate(job["steps"]):
            sid = step.get("id", f"_{n}")
            ctx = self.context(env)
            if not condition(step.get("if"), ctx, {"failed": self.failed}):
                self.steps_ctx[sid] = {"outcome": "skipped", "conclusion": "skipped", "outputs": {}}
                self.log.append((step.get("name") or step.get("uses"), "skipped"))
                continue
            step_env = {**env, **{k: _str(substitute(v, ctx)) for k, v in (step.get("env") or {}).items()}}
            began = time.monotonic()
            if "run" in step:
                outcome, outputs, new_env, new_paths = self._run(step, step_env, paths, ctx)
                env.update(new_env)
                paths = new_paths + paths
            else:
                outcome, outputs = self._uses(step, {**ctx, "env": step_env}), {}
            self.steps_ctx[sid] = {"outcome": outcome, "conclusion": outcome, "outputs": outputs}
            self.log.append((step.get("name") or step.get("uses"), outcome))
            self.times.append((step.get("name") or step.get("uses"), time.monotonic() - began))
            self.failed = self.failed or outcome == "failure"
        return "failure" if self.failed else "success"

    def _run(self, step: dict, env: dict, paths: list[str], ctx: dict):
        files = {k: self.store / "tmp" / f"{k.lower()}-{time.monotonic_ns()}" for k in
                 ("GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_PATH")}  # fmt: skip
        summary = self.store / "tmp" / f"summary-{time.monotonic_ns()}"
        for f in (*files.values(), summary):
            f.write_text("")
        script = self.store / "tmp" / f"step-{time.monotonic_ns()}.sh"
        script.write_text(substitute(step["run"], ctx))
        full = {**self.base_env, **env, **{k: str(v) for k, v in files.items()}, "GITHUB_STEP_SUMMARY": str(summary),
                "GITHUB_WORKSPACE": str(self.workspace), "CI": "true", "GITHUB_ACTIONS": "true",
                **self.github_env()}  # fmt: skip
        full["PATH"] = os.pathsep.join([*paths, full.get("PATH", os.environ["PATH"])])
        minutes = substitute(step.get("timeout-minutes"), ctx)
        try:
            proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=self.workspace,
                                  env=full, capture_output=True, text=True,
                                  timeout=float(minutes) * 60 if minutes else None)  # fmt: skip
            outcome = "success" if proc.returncode == 0 else "failure"
            self.log.append(("output", proc.stdout[-4000:] + proc.stderr[-4000:]))
        except subprocess.TimeoutExpired:
            outcome = "failure"
        self.summary += summary.read_text()
        new_paths = [p for p in files["GITHUB_PATH"].read_text().splitlines() if p.strip()][::-1]
        return outcome, read_env_file(files["GITHUB_OUTPUT"]), read_env_file(files["GITHUB_ENV"]), new_paths

    def github_env(self) -> dict:
        g = self.github
        return {"GITHUB_REPOSITORY": g["repository"], "GITHUB_RUN_ID": str(g["run_id"]),
                "GITHUB_RUN_ATTEMPT": str(g["run_attempt"]), "GITHUB_SHA": g["sha"], "GITHUB_REF": g["ref"],
                "GITHUB_REF_NAME": g["ref_name"], "GITHUB_EVENT_NAME": g["event_name"],
                "GITHUB_SERVER_URL": g["server_url"], "GITHUB_WORKFLOW": self.workflow["name"]}  # fmt: skip

    # -- the actions the workflow uses, played by what they do ------------------------------------------------------
    def _uses(self, step: dict, ctx: dict) -> str:
        action = step["uses"].split("@")[0]
        w = {k: _str(substitute(v, ctx)) for k, v in (step.get("with") or {}).items()}
        caches, artifacts = self.store / "caches", self.store / "artifacts"
        if action == "actions/checkout":
            return "success"  # the workspace is the checkout
        if action == "actions/cache/restore":
            keys = [w["key"], *[k for k in w.get("restore-keys", "").splitlines() if k.strip()]]
            entries = sorted(caches.glob("*"), key=lambda p: p.stat().st_mtime, reverse=True) if caches.exists() else []
            for key in keys:
                hit = next((e for e in entries if e.name == key), None) or \
                    next((e for e in entries if e.name.startswith(key) and key != w["key"]), None)  # fmt: skip
                if hit is not None:
                    dest = self.workspace / w["path"]
                    shutil.rmtree(dest, ignore_errors=True)
                    shutil.copytree(hit / "data", dest)
                    return "success"
            return "success"  # a miss is not a failure
        if action == "actions/cache/save":
            entry = caches / w["key"]
            if entry.exists():
                return "failure"  # a cache entry is never overwritten
            src = self.workspace / w["path"]
            shutil.copytree(src, entry / "data") if src.exists() else (entry / "data").mkdir(parents=True)
            return "success"
        if action == "actions/upload-artifact":
            dest = artifacts / w["name"]
            dest.mkdir(parents=True, exist_ok=True)
            for pattern in w["path"].splitlines():
                pattern = pattern.strip()
                if not pattern or pattern.startswith("!"):
                    continue
                src = self.workspace / pattern
                if src.is_dir():
                    shutil.copytree(src, dest / pattern, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns(".sweep.lock"))  # fmt: skip
                elif src.exists():
                    (dest / pattern).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dest / pattern)
            return "success"
        if action == "actions/download-artifact":
            src = artifacts / w["name"]
            if not src.exists():
                return "failure"
            shutil.copytree(src, self.workspace, dirs_exist_ok=True)
            return "success"
        raise NotImplementedError(f"{step['uses']}: not played by tests/cli/gha.py")
