"""The embedded default model pair, shipped inside the package (see ``MAKING.md`` beside this file).

* ``target/``: a tiny transformers Qwen3-architecture causal LM with its own tokenizer and chat template;
* ``dflash/``: a DFlash drafter trained for it (released checkpoint format, block size 16);
* ``eagle3/``: an EAGLE-3 head for it, when one is shipped.

All three were made by dflashbench's own ``train`` commands on the synthetic corpus
(:mod:`dflashbench.reference.corpus`). Importing this module is cheap (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from dflashbench.errors import UserError


@dataclass(frozen=True)
class EmbeddedPaths:
    target: Path
    dflash: Path
    eagle3: Path | None


def package_dir() -> Path:
    """This package's directory on disk (the pair is read with ``from_pretrained``, which needs real files)."""
    root = resources.files(__name__)
    if not isinstance(root, Path):
        raise UserError("the embedded model pair needs dflashbench installed as files on disk (not zipped)")
    return root


# What a message calls each folder of the pair: a name where this machine's path would say nothing more.
NAMES = {"target": "the embedded tiny target", "dflash": "the embedded DFlash drafter",
         "eagle3": "the embedded EAGLE-3 head"}  # fmt: skip


def name_of(model: str | Path) -> str:
    """``model`` as a message names it: "the embedded tiny target" (drafter, head) for a folder of the bundled
    pair, however it is written (this machine's absolute path, relative to the checkout, or the portable
    ``dflashbench/embedded/target`` runs record) and for the suite value ``embedded``; anything else as given."""
    text = str(model)
    if text == "embedded":
        return NAMES["target"]
    parts = Path(text).parts
    if len(parts) >= 3 and parts[-3:-1] == ("dflashbench", "embedded") and parts[-1] in NAMES:
        return NAMES[parts[-1]]
    return text


def default_paths() -> EmbeddedPaths:
    """Directories of the embedded target, DFlash drafter and (if shipped) EAGLE-3 head."""
    root = package_dir()
    target, dflash, eagle3 = root / "target", root / "dflash", root / "eagle3"
    for what, d in (("target", target), ("DFlash drafter", dflash)):
        if not (d / "config.json").is_file():
            raise UserError(f"the embedded {what} is missing at {d}; reinstall dflashbench or pass --model/--draft")
    return EmbeddedPaths(target, dflash, eagle3 if (eagle3 / "config.json").is_file() else None)
