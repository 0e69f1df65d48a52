"""Where a child interpreter of ours finds this dflashbench: first on its module path, before its working directory.

``python -m dflashbench serve`` (the reference server) and the client's fork server (``python -c``) put the
working directory first on the module path. A folder there named ``dflashbench`` (an output folder, ``-o
dflashbench``; the temp folder where the TensorRT-LLM backend writes its configs) then shadowed an editable
install, whose finder runs only after the path's own search has settled on that folder as a namespace package:
every point failed with "cannot import name '__version__' from 'dflashbench' (unknown location)". A regular
package found anywhere on the path wins over a namespace folder, so putting this package's own folder on
``PYTHONPATH`` is enough. Not done where that folder is a site-packages directory (a regular install is found
there already, and site-packages ahead of the standard library could shadow it); never for an engine's own
interpreter (vLLM's may be another virtualenv's).
"""

from __future__ import annotations

import contextlib
import os
import site
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)  # the checkout of an editable install, or site-packages


def _needed() -> bool:
    sites = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    return ROOT not in sites


def with_own_package(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with this package's folder first on ``PYTHONPATH`` (unchanged where it is a site-packages one)."""
    out = dict(env)
    if _needed():
        rest = out.get("PYTHONPATH")
        out["PYTHONPATH"] = ROOT + (os.pathsep + rest if rest else "")
    return out


@contextlib.contextmanager
def own_package_on_path() -> Iterator[None]:
    """This process's environment with :func:`with_own_package` applied, for a child started inside the block."""
    before = os.environ.get("PYTHONPATH")
    os.environ.update(with_own_package(os.environ))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
