"""No path of the machine that ran it in what a run keeps: this machine's own prefixes (the checkout or the
installed package, the working directory, the virtualenv, the temporary folder, the home folder) taken out of
the strings a run writes, so one model or file has one name on every machine.

``manifest.json`` (all but ``suite_config``, the resolved suite ``--resume`` runs again, kept as given) and
each point's ``model`` and ``draft`` go through :func:`portable_tree` as they are written; the reports and
``compare`` read those. The embedded pair reads ``dflashbench/embedded/target``; a file of the project
``suites/demo.toml``; the interpreter that ran a server ``python``.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any


@cache
def _prefixes() -> tuple[tuple[str, str], ...]:
    """(prefix, replacement), longest first: a path under several (a venv inside the checkout) loses the most
    specific one."""
    project = Path(__file__).resolve().parent.parent  # the checkout, or site-packages for an installed copy
    found = {
        sys.executable: "python", os.path.realpath(sys.executable): "python",
        str(project) + os.sep: "", os.getcwd() + os.sep: "",
        sys.prefix + os.sep: "<venv>" + os.sep, tempfile.gettempdir() + os.sep: "<tmp>" + os.sep,
        str(Path.home()) + os.sep: "~" + os.sep,
    }  # fmt: skip
    return tuple(sorted(((k, v) for k, v in found.items() if len(k) > 1), key=lambda kv: -len(kv[0])))


# Any interpreter of a virtualenv or installation, as a whole argument: an engine found in another venv (vLLM's
# CPU build, say) is started with its own, whose path is as much the machine's as ours.
_INTERPRETER = re.compile(r".*[/\\]bin[/\\]python[0-9.]*")


def portable(text: str) -> str:
    """``text`` with this machine's prefixes replaced (a path anywhere in it: an argv element, a flag value)."""
    for prefix, replacement in _prefixes():
        if prefix in text:
            if prefix.endswith(os.sep):
                text = text.replace(prefix, replacement)
            elif text == prefix:  # the interpreter, as a whole argument only
                text = replacement
    return "python" if _INTERPRETER.fullmatch(text) else text


def portable_tree(obj: Any) -> Any:
    """:func:`portable` on every string in ``obj`` (dicts, lists and tuples walked)."""
    if isinstance(obj, str):
        return portable(obj)
    if isinstance(obj, dict):
        return {k: portable_tree(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [portable_tree(v) for v in obj]
    return obj


def report_path(run_dir: Path) -> Path:
    """Where a sweep writes its report: the run's own ``-o`` folder decides. The repository's layout puts
    ``reports/`` beside ``results/`` (``results/<run-id>`` -> ``reports/<run-id>.html``); any other ``-o`` keeps
    its report inside (``-o out/base`` -> ``out/base/reports/<run-id>.html``), so a sweep writes nothing outside
    the folder it was given (``-o .`` or ``-o /data`` would otherwise reach ``../reports`` or ``/reports``)."""
    out = run_dir.parent
    if out.resolve().name == "results" and out.resolve() != Path.cwd().resolve():
        return out.parent / "reports" / f"{run_dir.name}.html"
    return out / "reports" / f"{run_dir.name}.html"
