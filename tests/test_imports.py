"""The import contract (issues #20, #30): dflashbench's layers import only downwards, and the pipeline's stages
(plan -> run -> load -> measure -> report, with gate beside report) only the stages that feed them.

* ``dflashbench.reference`` (the decoder library) imports nothing of the harness but ``dflashbench.errors``;
* nothing imports ``dflashbench.cli`` (the top: only ``python -m dflashbench`` and the console script enter it;
  a ``cli`` package may import its own modules);
* ``dflashbench.types`` and ``dflashbench.errors`` import nothing of the package;
* ``measure/`` imports nothing of ``run/`` or ``load/`` (it reads records, whoever made them);
* ``load/`` imports nothing of ``measure/``, ``run/``, ``report/`` or ``gate/`` (the record types it fills live in
  ``dflashbench.types``, outside every stage);
* ``report/`` reads only ``measure/``'s results and the run store: of the stages it imports ``measure/`` and
  ``run.store`` alone;
* ``plan/`` imports nothing of ``run/``, ``report/`` or ``gate/`` (a plan is made before anything runs).

Read from the source with :mod:`ast`, every import statement (the lazy ones inside functions too), so a
violation fails the default test run without importing anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the directory that holds dflashbench/
PACKAGE = "dflashbench"
MAY_IMPORT_CLI = {f"{PACKAGE}.__main__"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in a file; ``from m import a`` counts as ``m.a`` (``a`` may be a
    submodule), relative imports resolved against the file's package."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            out += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return out


def _within(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


def _stage_rule(stage: str, banned: tuple[str, ...], allowed: tuple[str, ...] = (), why: str = ""):
    """A rule: modules of ``stage`` import nothing of the ``banned`` packages, except the ``allowed`` modules."""

    def check(module: str, name: str) -> str | None:
        if not _within(module, f"{PACKAGE}.{stage}"):
            return None
        for other in banned:
            if _within(name, f"{PACKAGE}.{other}") and not any(_within(name, f"{PACKAGE}.{a}") for a in allowed):
                return f"{module} imports {name}: {stage}/ imports nothing of {other}/{why}"
        return None

    return check


STAGE_RULES = (
    _stage_rule("measure", ("run", "load"), why=" (it reads records, whoever made them)"),
    _stage_rule("load", ("measure", "run", "report", "gate"), why=" (its records are dflashbench.types)"),
    _stage_rule("report", ("plan", "load", "gate", "run"), allowed=("run.store",),
                why=" (it reads measure/'s results and the run store)"),
    _stage_rule("plan", ("run", "report", "gate"), why=" (a plan is made before anything runs)"),
)


def violations(root: Path) -> list[str]:
    """Every import in ``root/dflashbench`` that breaks the contract, as ``file:line: what``."""
    found = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        module = module_name(path, root)
        for line, name in imported(path, root):
            if not _within(name, PACKAGE):
                continue
            where = f"{path.relative_to(root)}:{line}"
            if _within(module, f"{PACKAGE}.reference") and not (
                _within(name, f"{PACKAGE}.reference") or _within(name, f"{PACKAGE}.errors")
            ):
                found.append(f"{where}: the reference library imports the harness module {name}")
            if _within(name, f"{PACKAGE}.cli") and not (
                module in MAY_IMPORT_CLI or _within(module, f"{PACKAGE}.cli")
            ):
                found.append(f"{where}: {module} imports {name}; nothing imports the command line")
            if module in (f"{PACKAGE}.types", f"{PACKAGE}.errors"):
                found.append(f"{where}: {module} must import nothing of the package, imports {name}")
            found += [f"{where}: {msg}" for rule in STAGE_RULES if (msg := rule(module, name))]
    return found


def test_the_package_keeps_the_import_contract():
    assert (PACKAGE_ROOT / PACKAGE / "reference").is_dir()  # the checker reads the real tree
    assert violations(PACKAGE_ROOT) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / PACKAGE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


CLEAN = {
    "__init__.py": "",
    "__main__.py": "from dflashbench.cli import run\n",
    "errors.py": "import os\n",
    "types.py": "from dataclasses import dataclass\n",
    "sweep.py": "from dflashbench.reference.decode import generate\nfrom dflashbench import types\n",
    "cli/__init__.py": "from dflashbench.cli import serve\nfrom . import sweep\n",
    "cli/serve.py": "def f():\n    from dflashbench.run.sweep import run\n",
    "reference/__init__.py": "",
    "reference/decode.py": "from dflashbench.errors import UserError\nfrom .target import Target\n",
    "reference/target.py": "from dflashbench.reference.layers import RMSNorm\n",
    "plan/__init__.py": "",
    "plan/grid.py": "from dflashbench.measure import repeats\nfrom dflashbench.load.arrivals import schedule\n",
    "run/__init__.py": "",
    "run/store.py": "from dflashbench.measure.repeats import collapse\n",
    "run/sweep.py": "from dflashbench.plan import grid\nfrom dflashbench.load import loadgen\nfrom dflashbench import report\n",
    "load/__init__.py": "",
    "load/loadgen.py": "from dflashbench.types import RequestResult\nfrom dflashbench.workloads import grading\n",
    "measure/__init__.py": "",
    "measure/metrics.py": "from dflashbench.types import RequestResult\n",
    "measure/repeats.py": "from . import metrics\n",
    "report/__init__.py": "from dflashbench.run.store import load_run\nfrom dflashbench.measure import metrics\n",
    "gate/__init__.py": "from dflashbench.report import trust\nfrom dflashbench.plan import models\n",
}


def test_a_clean_tree_passes(tmp_path):
    assert violations(_tree(tmp_path, CLEAN)) == []


@pytest.mark.parametrize(
    ("rel", "text", "needle"),
    [
        ("reference/serve.py", "def f():\n    from dflashbench.run.sweep import run\n",
         "reference library imports the harness module dflashbench.run.sweep.run"),
        ("reference/serve.py", "from dflashbench.measure import metrics\n", "harness module dflashbench.measure.metrics"),
        ("reference/serving/x.py", "from ...run import sweep\n", "harness module dflashbench.run.sweep"),
        ("report.py", "import dflashbench.cli\n", "dflashbench.report imports dflashbench.cli"),
        ("sweep.py", "def f():\n    from dflashbench.cli import app\n", "nothing imports the command line"),
        ("types.py", "from dflashbench.errors import UserError\n", "dflashbench.types must import nothing"),
        ("errors.py", "from . import types\n", "dflashbench.errors must import nothing"),
        ("measure/steady.py", "from dflashbench.load import loadgen\n", "measure/ imports nothing of load/"),
        ("measure/steady.py", "def f():\n    from ..run.store import load_run\n", "measure/ imports nothing of run/"),
        ("load/sse.py", "from dflashbench.measure.metrics import ttft_s\n", "load/ imports nothing of measure/"),
        ("load/sse.py", "from dflashbench.run import store\n", "load/ imports nothing of run/"),
        ("report/tables.py", "from dflashbench.run.sweep import run_sweep\n", "report/ imports nothing of run/"),
        ("report/tables.py", "from dflashbench.plan import models\n", "report/ imports nothing of plan/"),
        ("report/tables.py", "from dflashbench.load.loadgen_procs import x\n", "report/ imports nothing of load/"),
        ("plan/grid.py", "from dflashbench.run import point\n", "plan/ imports nothing of run/"),
    ],
)
def test_each_rule_catches_its_violation(tmp_path, rel, text, needle):
    found = violations(_tree(tmp_path, {**CLEAN, rel: text}))
    assert len(found) == 1 and needle in found[0], found
    assert found[0].startswith(f"{PACKAGE}/{rel}:")
