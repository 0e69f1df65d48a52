"""A run as a page shows it: its closing lines as a terminal of a given width prints them, and its Pareto figure as
a PNG file that names the run it was drawn from. The README's picture of a run is made here
(``tools/readme_example.py``, run by ``nox -s examples``), and its test renders the same run again to compare.

Nothing is computed here: the lines are :func:`.console.closing_lines` of the report's own model, the figure the
report's first Pareto figure.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
from collections.abc import Sequence
from pathlib import Path

from dflashbench.errors import UserError
from dflashbench.redact import redact_text

README_WIDTH = 100  # columns: the verdict block in the README is what a terminal this wide prints
SOURCE_KEY = "Source"  # PNG text keys (tEXt): the run folder as the project names it, and its points' digest
POINTS_KEY = "dflashbench:points-sha256"


def terminal_lines(run_dirs: Sequence[Path | str], width: int = README_WIDTH) -> list[str]:
    """What ``dflashbench report RUN...`` ends with in a terminal ``width`` columns wide: the report's warnings,
    notes and trust flags, then its verdict (redacted, as the terminal prints them)."""
    from dflashbench.report import load_model
    from dflashbench.report.console import closing_lines, wrap

    model = load_model(list(run_dirs), with_figures=False)
    return [redact_text(line, words=False).rstrip() for line in wrap(closing_lines(model), width)]


def points_digest(run_dir: Path | str) -> str:
    """The SHA-256 of a run's ``points.jsonl``: which measurements a figure was drawn from."""
    path = Path(run_dir) / "points.jsonl"
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None


def pareto_png(run_dir: Path | str, out: Path) -> Path:
    """Write the report's first Pareto figure of ``run_dir`` to ``out`` (PNG), with text chunks naming the run
    (``Source``: ``run_dir`` as given) and its ``points.jsonl`` digest; the figure's title and alt text go in
    ``Title`` and ``Description``."""
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    from dflashbench.report import load_model

    model = load_model([run_dir], with_figures=True)
    pareto = next((s for s in model.sections if s.id == "pareto" and s.figures), None)
    if pareto is None:
        raise UserError(f"{run_dir}: its report has no Pareto figure (no usable closed-loop point)")
    figure = pareto.figures[0]
    image = Image.open(io.BytesIO(base64.b64decode(figure.data_uri.split(",", 1)[1])))
    info = PngInfo()
    for key, value in ((SOURCE_KEY, str(run_dir)), (POINTS_KEY, points_digest(run_dir)), ("Title", figure.title),
                       ("Description", figure.alt)):  # fmt: skip
        info.add_itxt(key, value)  # iTXt: UTF-8 (a title holds an en dash)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, format="PNG", pnginfo=info, optimize=True)
    return out


def png_text(path: Path) -> dict[str, str]:
    """The text chunks of a PNG file."""
    from PIL import Image

    with Image.open(path) as image:
        image.load()
        return dict(getattr(image, "text", {}))


def block_pattern(name: str) -> re.Pattern[str]:
    """A fenced block between ``<!-- name -->`` and ``<!-- /name -->`` in a Markdown file; group 1 its body."""
    return re.compile(rf"<!-- {re.escape(name)} -->\n```text\n(.*?)```\n<!-- /{re.escape(name)} -->", re.DOTALL)


def read_block(text: str, name: str) -> str | None:
    """The body of the block ``name`` in ``text`` (:func:`block_pattern`), ``None`` where there is none."""
    found = block_pattern(name).search(text)
    return found.group(1) if found else None


def with_block(text: str, name: str, body: str) -> str:
    """``text`` with the body of its block ``name`` replaced by ``body``; an error where the markers are missing."""
    if read_block(text, name) is None:
        raise UserError(f"no block <!-- {name} --> ```text ... ``` <!-- /{name} --> to write into")
    body = body if body.endswith("\n") else body + "\n"
    return block_pattern(name).sub(lambda _m: f"<!-- {name} -->\n```text\n{body}```\n<!-- /{name} -->", text, count=1)
