"""What a ``--model`` value names, checked before anything is planned, each error in command-line terms:

- a registry name or alias, a Hugging Face id (``org/name``), a local directory, ``embedded``, ``random:SHAPE``;
- a path (``./x``, ``../x``, ``/x``, ``~/x``) that does not exist is refused, naming the nearest directory there;
- a bare name the registry does not know is refused with the registry names closest to it (``difflib``);
- an unregistered target's speculative methods each need a draft: the error names every one as ``--draft
  dflash=ID,eagle3=ID`` and the way out, ``--method ar`` (or the methods that have drafts).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from dflashbench.errors import UserError

PATH_PREFIXES = ("./", "../", "/", "~", ".\\")


def looks_like_path(model: str) -> bool:
    return model.strip().startswith(PATH_PREFIXES) or model.strip() in (".", "..")


def check_model(model: str, methods: list[str], drafts: dict, backend: str | None = None) -> None:
    """Refuse a ``--model`` that names nothing, and an unregistered target whose speculative methods lack drafts
    (the reference backend checks its own folders, in its own words: :mod:`dflashbench.backends.reference`)."""
    from dflashbench.methods import record
    from dflashbench.plan.models import lookup, registry
    from dflashbench.plan.suites import EMBEDDED, RANDOM_PREFIX

    text = model.strip()
    if text == EMBEDDED or text.startswith(RANDOM_PREFIX) or lookup(text) is not None:
        return
    if looks_like_path(text) and backend not in ("reference", "endpoint"):
        path = Path(text).expanduser()
        if not path.exists():
            near = sorted(p.name for p in path.parent.glob("*") if p.is_dir()) if path.parent.is_dir() else []
            close = difflib.get_close_matches(path.name, near, n=3)
            hint = f"; did you mean {' or '.join(str(path.parent / c) for c in close)}?" if close else ""
            raise UserError(f"--model {model}: no such directory{hint} (a local model is the folder that holds its "
                            "config.json and weights)")  # fmt: skip
        if not path.is_dir():
            raise UserError(f"--model {model}: not a directory (give the folder that holds config.json)")
    elif "/" not in text and not looks_like_path(text):
        names = sorted({n for e in registry().models for n in (e.name, *e.aliases)})
        close = difflib.get_close_matches(text.lower(), names, n=3, cutoff=0.6)
        raise UserError(f"--model {model}: not in the model registry, not a Hugging Face id (org/name) and not a local "
                        "directory" + (f"; did you mean {' or '.join(close)}?" if close else "")
                        + " (dflashbench models list)")  # fmt: skip
    missing = [m for m in methods if record(m).needs_draft and not drafts.get(m)]
    if missing:
        have = [m for m in methods if m not in missing]
        keep = f"--method {','.join(have)}" if have else "--method ar"
        raise UserError(f"--model {model} is not in the model registry, so it brings no drafts: "
                        f"{' and '.join(missing)} " + ("needs one" if len(missing) == 1 else "need one each")
                        + ". Pass --draft "
                        f"{','.join(f'{m}=<HF id or path>' for m in missing)}, or {keep}")  # fmt: skip
