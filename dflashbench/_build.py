"""Build hooks (used by setuptools only, never imported at run time): ship ``suites/`` inside the package.

The suite files live at the top of the repository (``suites/*.toml``, ``suites/include/``,
``suites/published/``). A source checkout or editable install reads them there. A wheel has no top-level
folders, so :class:`BuildPy` copies them into ``dflashbench/suites_builtin/`` of the build, which
:func:`dflashbench.plan.suites.suite_dirs` searches when there is no checkout; :class:`Sdist` puts them in the
source distribution so that a wheel built from it gets them too. Registered in ``pyproject.toml`` under
``[tool.setuptools.cmdclass]``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

SUITES = Path("suites")  # relative to the project root, where setuptools runs
PATTERNS = ("*.toml", "include/*.toml", "published/*.toml")
BUILTIN = Path("dflashbench") / "suites_builtin"


def suite_files(root: Path = SUITES) -> list[Path]:
    """The suite files to ship, relative to ``root``."""
    return sorted(p.relative_to(root) for pattern in PATTERNS for p in root.glob(pattern))


def copy_suites(target_root: Path) -> None:
    for rel in suite_files():
        target = target_root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SUITES / rel, target)


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if SUITES.is_dir():
            copy_suites(Path(self.build_lib) / BUILTIN)


class Sdist(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        copy_suites(Path(base_dir) / SUITES)
