"""The import contract (issues #20, #30, #47): dflashbench's layers import only downwards.

The order, lowest first (``../shared/DESIGN.md``'s table; each layer imports only from the layers below it and from
its own package, lazy imports inside functions included):

==========  ==================================================================================================
leaf        ``types``, ``errors``, ``paths``, ``child_path``, ``redact``, ``telemetry``, ``model_files``, ``_build``,
            the package's ``__init__``: shared records, errors, a checkpoint's own files; ``types`` and ``errors``
            import nothing of the package
library     ``reference/`` (imports nothing of the harness but ``errors``), ``embedded/`` (the bundled pair)
inputs      ``workloads/`` (a suite's workload entry, ``workloads.spec``, lives here, below the plan)
pure        ``load/`` and ``measure/``, side by side: neither imports the other
engines     ``backends/`` (takes a resolved plan's values; imports nothing of ``plan/``)
launchers   ``launchers/``: where a server runs (this machine, Slurm, Kubernetes), on the engines' side of the plan,
            just above ``backends/`` since it runs what a backend built (its launch plans, its process keeper)
what to run ``plan/`` (suites, registry, pairing, the grid; the published figures beside the suites)
running it  ``run/`` (the sweep and its store; writing the report after a sweep is the command's)
reading it  ``report/`` (of ``run/`` it reads the store alone)
gating it   ``gate/``
tools       ``bench/``
commands    ``cli/`` and ``__main__``: nothing imports them
==========  ==================================================================================================

``model_files`` sits in the leaf layer: what a checkpoint's own ``config.json`` says is read by the plan (pairing,
memory) and by the engines (a DFlash block size for their argv), so it belongs to neither. A module that is in no
layer is itself a violation: a new top-level module must be placed.

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


LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("leaf", ("types", "errors", "paths", "child_path", "redact", "telemetry", "model_files", "methods", "_build", "")),
    ("library", ("reference", "embedded")),
    ("inputs", ("workloads",)),
    ("pure", ("load", "measure")),
    ("engines", ("backends",)),
    ("launchers", ("launchers",)),
    ("what to run", ("plan",)),
    ("running it", ("run",)),
    ("reading it", ("report",)),
    ("gating it", ("gate",)),
    ("tools", ("bench",)),
    ("commands", ("cli", "__main__")),
)
RANK = {part: i for i, (_, parts) in enumerate(LAYERS) for part in parts}


def part_of(name: str) -> str | None:
    """The top-level part of the package a dotted name lies in (``dflashbench.plan.grid`` -> ``plan``; the
    package's own ``__init__`` and ``dflashbench.__version__`` -> ``""``), ``None`` outside the package."""
    if name == PACKAGE:
        return ""
    if not _within(name, PACKAGE):
        return None
    top = name.split(".")[1]
    return "" if top.startswith("__") and top != "__main__" else top


def _layer_rule(module: str, name: str) -> str | None:
    mine, theirs = part_of(module), part_of(name)
    if theirs is None or mine == theirs or (mine == "" and theirs == ""):
        return None
    if mine not in RANK:
        return f"{module} is in no layer: place it in tests/test_imports.py's LAYERS"
    if theirs not in RANK:
        return f"{module} imports {name}, which is in no layer: place it in tests/test_imports.py's LAYERS"
    if RANK[theirs] < RANK[mine] or RANK[theirs] == RANK[mine] == RANK["types"]:  # leaf modules share freely
        return None
    layer_of = {i: layer for i, (layer, _) in enumerate(LAYERS)}
    same = " (same layer: neither imports the other)" if RANK[theirs] == RANK[mine] else ""
    return (f"{module} ({layer_of[RANK[mine]]}) imports {name} ({layer_of[RANK[theirs]]}): a layer imports only "
            f"from the layers below it{same}")  # fmt: skip


def _report_reads_the_store(module: str, name: str) -> str | None:
    if _within(module, f"{PACKAGE}.report") and _within(name, f"{PACKAGE}.run") and \
            not _within(name, f"{PACKAGE}.run.store"):  # fmt: skip
        return f"{module} imports {name}: report/ reads the run store alone of run/"
    return None


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
            elif _within(name, f"{PACKAGE}.cli"):
                if not (module in MAY_IMPORT_CLI or _within(module, f"{PACKAGE}.cli")):
                    found.append(f"{where}: {module} imports {name}; nothing imports the command line")
            elif module in (f"{PACKAGE}.types", f"{PACKAGE}.errors"):
                found.append(f"{where}: {module} must import nothing of the package, imports {name}")
            else:
                found += [f"{where}: {msg}" for rule in (_layer_rule, _report_reads_the_store) if (msg := rule(module, name))]
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
    "model_files.py": "from dflashbench.errors import UserError\n",
    "bench/sweep.py": "from dflashbench.reference.decode import generate\nfrom dflashbench import types\n",
    "workloads/spec.py": "from pydantic import BaseModel\n",
    "workloads/__init__.py": "from dflashbench.workloads.spec import WorkloadSpec\n",
    "backends/vllm.py": "from dflashbench.model_files import draft_facts\nfrom dflashbench.types import format_cpu_list\n",
    "cli/__init__.py": "from dflashbench.cli import serve\nfrom . import sweep\n",
    "cli/serve.py": "def f():\n    from dflashbench.run.sweep import run\n",
    "reference/__init__.py": "",
    "reference/decode.py": "from dflashbench.errors import UserError\nfrom .target import Target\n",
    "reference/target.py": "from dflashbench.reference.layers import RMSNorm\n",
    "plan/__init__.py": "",
    "plan/grid.py": "from dflashbench.measure import repeats\nfrom dflashbench.load.arrivals import schedule\n",
    "run/__init__.py": "",
    "run/store.py": "from dflashbench.measure.repeats import collapse\n",
    "run/sweep.py": "from dflashbench.plan import grid\nfrom dflashbench.load import loadgen\nfrom dflashbench import backends\n",
    "load/__init__.py": "",
    "load/loadgen.py": "from dflashbench.types import RequestResult\nfrom dflashbench.workloads import grading\n",
    "measure/__init__.py": "",
    "measure/metrics.py": "from dflashbench.types import RequestResult\n",
    "measure/repeats.py": "from . import metrics\n",
    "report/__init__.py": "from dflashbench.run.store import load_run\nfrom dflashbench.measure import metrics\n",
    "report/model.py": "from dflashbench.plan.published import load_published\nfrom dflashbench import __version__\n",
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
        ("measure/steady.py", "from dflashbench.load import loadgen\n", "(same layer: neither imports the other)"),
        ("measure/steady.py", "def f():\n    from ..run.store import load_run\n",
         "dflashbench.measure.steady (pure) imports dflashbench.run.store.load_run (running it)"),
        ("measure/published.py", "from dflashbench.plan.suites import read_toml\n", "(what to run)"),
        ("load/sse.py", "from dflashbench.measure.metrics import ttft_s\n", "(same layer: neither imports the other)"),
        ("load/sse.py", "from dflashbench.run import store\n", "a layer imports only from the layers below it"),
        ("workloads/math.py", "from dflashbench.plan.suites import WorkloadSpec\n", "(inputs) imports dflashbench.plan"),
        ("backends/_engine.py", "def f():\n    from dflashbench.plan.cpus import format_cpu_list\n",
         "(engines) imports dflashbench.plan.cpus.format_cpu_list (what to run)"),
        ("run/sweep.py", "def report():\n    from dflashbench.report import write_report\n",
         "(running it) imports dflashbench.report.write_report (reading it)"),
        ("report/tables.py", "from dflashbench.run.sweep import run_sweep\n", "report/ reads the run store alone"),
        ("report/tables.py", "from dflashbench.gate import compare\n", "(reading it) imports dflashbench.gate.compare"),
        ("plan/grid.py", "from dflashbench.run import point\n", "(what to run) imports dflashbench.run.point"),
        ("bench/peers.py", "from dflashbench.cli.bench import app\n", "nothing imports the command line"),
        ("sweep.py", "from dflashbench.types import Request\n", "dflashbench.sweep is in no layer"),
    ],
)
def test_each_rule_catches_its_violation(tmp_path, rel, text, needle):
    found = violations(_tree(tmp_path, {**CLEAN, rel: text}))
    assert len(found) == 1 and needle in found[0], found
    assert found[0].startswith(f"{PACKAGE}/{rel}:")


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports (every import statement: at the top, inside functions, under
    ``TYPE_CHECKING``), each name resolved to the module that holds it (``from .wording import fmt_x`` ->
    ``...wording``; a package's own ``__init__`` where a name is defined there)."""
    modules = {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        return next((n for k in range(len(parts), 0, -1) if (n := ".".join(parts[:k])) in modules), None)

    return {m: {t for _, n in imported(p, root) if (t := resolve(n)) and t != m} for m, p in modules.items()}


def cycles_within_packages(root: Path) -> list[str]:
    """Every import circle among the modules of one package (``report/summary.py`` -> ``report/wording.py`` ->
    ``report/summary.py``), as ``a -> b -> a``. An import circle is a circle whether the imports run at load time or
    later: each module needs the other to be read, so neither is the lower one, and a reader cannot start at one."""
    graph = import_graph(root)
    package = lambda m: m.rpartition(".")[0]  # noqa: E731
    found = []
    for start in sorted(graph):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if package(nxt) != package(start):
                    continue
                if nxt == start:
                    found.append(" -> ".join([*path, start]))
                elif nxt not in path and nxt > start:  # each circle once, from its smallest module
                    stack.append((nxt, [*path, nxt]))
    return found


def test_no_import_circle_inside_a_package():
    assert cycles_within_packages(PACKAGE_ROOT) == []


@pytest.mark.parametrize("where", ["top", "function", "type_checking"])
def test_an_import_circle_is_found_however_it_imports(tmp_path, where):
    back = {"top": "from dflashbench.report.summary import VerdictBlock\n",
            "function": "def f():\n    from dflashbench.report import summary\n",
            "type_checking": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .summary import Reading\n"}
    tree = _tree(tmp_path, {**CLEAN, "report/summary.py": "from dflashbench.report.wording import fmt_x\n",
                            "report/wording.py": back[where]})  # fmt: skip
    assert cycles_within_packages(tree) == ["dflashbench.report.summary -> dflashbench.report.wording -> "
                                            "dflashbench.report.summary"]  # fmt: skip
    assert cycles_within_packages(_tree(tmp_path / "clean", CLEAN)) == []


# Module names that may repeat: each package's own base / common / config, and the reference library's parallel
# layouts (a DFlash and an EAGLE-3 drafter each have a network, a drafter and a checkpoint; the server's metrics
# are the engine's, measure's the harness's; training has its own target).
MAY_REPEAT = {"base", "common", "config", "checkpoint", "drafter", "network", "metrics", "target"}


def repeated_names(root: Path) -> list[str]:
    """Module names found in more than one place (``loadgen.py`` in load/ and bench/), outside :data:`MAY_REPEAT`,
    and modules named after one of the pipeline's stages elsewhere (``report/load.py`` beside ``load/``; a command
    or an engine named after what it runs, ``cli/bench.py`` or ``backends/reference.py``, is its own name)."""
    pkg = root / PACKAGE
    stages = {"plan", "run", "load", "measure", "report", "gate"}
    seen: dict[str, list[str]] = {}
    for path in sorted(pkg.rglob("*.py")):
        if path.stem not in ("__init__", "__main__"):
            seen.setdefault(path.stem, []).append(str(path.relative_to(root)))
    found = [f"{name}.py in {', '.join(where)}" for name, where in seen.items()
             if len(where) > 1 and name not in MAY_REPEAT]  # fmt: skip
    found += [f"{where} is named like the package {PACKAGE}/{name}/" for name, wheres in seen.items()
              if name in stages for where in wheres if not where.startswith(f"{PACKAGE}/{name}/")]  # fmt: skip
    return found


def test_no_module_name_repeats_across_the_package():
    assert repeated_names(PACKAGE_ROOT) == []


def test_a_repeated_module_name_is_found(tmp_path):
    tree = _tree(tmp_path, {**CLEAN, "bench/loadgen.py": "", "report/load.py": ""})
    found = repeated_names(tree)
    assert any("loadgen.py in dflashbench/bench/loadgen.py, dflashbench/load/loadgen.py" in f for f in found), found
    assert any("dflashbench/report/load.py is named like the package dflashbench/load/" in f for f in found), found


def test_the_tests_mirror_the_packages():
    """tests/<name>/ holds the tests of dflashbench/<name>/ (issue #47); tests/ itself those of the leaf modules and
    the package-wide contracts; fixtures/ and engines/ (real engines' own checks, run by nox) are data and scripts."""
    tests = PACKAGE_ROOT / "tests"
    packages = {p.name for p in (PACKAGE_ROOT / PACKAGE).iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    assert folders - packages <= {"fixtures", "engines"}, sorted(folders - packages)
    leaf = {p.stem.removeprefix("test_") for p in tests.glob("test_*.py")}
    # imports, docs, sources: package-wide contracts; the rest: leaf modules
    assert leaf <= {"imports", "docs", "sources", "model_files", "redact", "telemetry"}, sorted(leaf)
