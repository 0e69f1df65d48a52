"""What every workload shares: reading a dataset (Hugging Face id or a local copy), building requests, sampling.

A workload reads rows from its dataset in the dataset's own published form and turns each row into a
:class:`~dflashbench.types.Request`. Rows come from one of two places:

- ``--data PATH`` (or ``data =`` in a suite): a file (``.parquet``, ``.jsonl``, ``.json``) or a folder laid out
  like the dataset's repository on the Hub (e.g. ``main/test-00000-of-00001.parquet`` for GSM8K); a folder that
  holds data files directly also works;
- the Hugging Face dataset id, through ``datasets.load_dataset`` (an optional extra, imported only here),
  which honours the local cache and ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``.

Sampling (:func:`sample_requests`) is seeded and stable: the rows of each category are shuffled with a
``random.Random`` keyed by ``(seed, category)``, then taken round-robin over the categories in sorted order
until ``num_prompts`` are drawn. So categories stay balanced, the same seed always gives the same requests, and
the first n requests for ``num_prompts=n`` are the first n for any larger ``num_prompts``. Without
``num_prompts`` every row is used, in the dataset's order.
"""

from __future__ import annotations

import difflib
import json
import os
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from dflashbench.errors import UserError
from dflashbench.types import Request
from dflashbench.workloads.spec import WorkloadSpec

DATA_SUFFIXES = (".parquet", ".jsonl", ".json")
DATASETS_EXTRA = "pip install 'dflashbench[datasets]'"

# The prompt suffix of the DFlash benchmark's math tasks (GSM8K, MATH-500, AIME).
MATH_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."


def offline() -> bool:
    """True when the Hugging Face libraries are told not to use the network."""
    return any(os.environ.get(v, "").strip().lower() in {"1", "true", "yes", "on"}
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))  # fmt: skip


class Workload:
    """One dataset family member. Subclasses set the class attributes and :meth:`to_request`."""

    name: ClassVar[str]
    description: ClassVar[str]
    hf_id: ClassVar[str | None] = None
    configs: ClassVar[tuple[str, ...]] = ()  # the first is the default; () = the dataset has no configs
    split: ClassVar[str] = "test"
    # Where a (config, split) lives inside a local copy of the dataset repository, first match wins.
    layout: ClassVar[tuple[str, ...]] = ("{config}/{split}-*.parquet",)
    default_max_tokens: ClassVar[int] = 2048
    # Rows of each published split, keyed "config/split" ("split" for a dataset without configs), as the dataset
    # card lists them (the description above names the same): a dry run's request counts without reading rows.
    card_rows: ClassVar[dict[str, int]] = {}

    # --- what a workload is ---------------------------------------------------------------------------

    def categories(self, config: str | None) -> tuple[str, ...]:
        """Categories the rows of ``config`` carry (for filtering and listing)."""
        return ("math",)

    def to_request(self, row: dict[str, Any], index: int, spec: WorkloadSpec) -> Request:
        raise NotImplementedError

    # --- reading rows -----------------------------------------------------------------------------------

    def resolve_config(self, config: str | None) -> str | None:
        if config is None:
            return self.configs[0] if self.configs else None
        if not self.configs:
            raise UserError(f"workload {self.name!r} has no configs (got config {config!r})")
        if config not in self.configs:
            raise UserError(f"workload {self.name!r}: unknown config {config!r}.{_did_you_mean(config, self.configs)}"
                            f" Configs: {', '.join(self.configs)}")  # fmt: skip
        return config

    def rows_on_hub(self, config: str | None, split: str) -> int | None:
        """How many rows ``config``/``split`` has on the Hub, where the dataset card says (else ``None``)."""
        return self.card_rows.get(f"{config}/{split}" if config else split)

    def source_label(self, config: str | None, split: str) -> str:
        return f"{self.hf_id}" + (f" (config {config}, split {split})" if config else f" (split {split})")

    def rows(self, config: str | None, split: str, data: str | None) -> list[dict[str, Any]]:
        """All rows of ``config``/``split``, from ``data`` when given, else from the Hub id."""
        if data:
            return read_data_files(self.local_files(Path(data), config, split))
        return self.hub_rows(config, split)

    def local_files(self, path: Path, config: str | None, split: str) -> list[Path]:
        """The data files of ``config``/``split`` in a local file or folder."""
        path = path.expanduser()
        if path.is_file():
            return [path]
        if not path.is_dir():
            raise UserError(f"--data {path}: no such file or folder")
        fill = {"config": config or "", "split": split}
        for pattern in self.layout:
            found = sorted(p for p in path.glob(pattern.format(**fill)) if p.suffix in DATA_SUFFIXES)
            if found:
                return found
        # A folder holding the data files themselves: prefer those named after the split.
        direct = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in DATA_SUFFIXES)
        named = [p for p in direct if p.name.startswith(split)]
        if named or direct:
            return named or direct
        expected = ", ".join(p.format(**fill) for p in self.layout)
        raise UserError(
            f"--data {path}: no data files for {self.source_label(config, split)}; expected {expected} "
            f"(the dataset's own layout) or .parquet/.jsonl/.json files directly in the folder"
        )

    def hub_rows(self, config: str | None, split: str) -> list[dict[str, Any]]:
        """Rows through ``datasets.load_dataset`` (cache and offline mode honoured)."""
        try:
            import datasets
        except ImportError:
            raise UserError(
                f"reading {self.hf_id} from the Hugging Face Hub needs the 'datasets' package: "
                f"{DATASETS_EXTRA}; or give a local copy with --data PATH"
            ) from None
        try:
            args = (self.hf_id, config) if config else (self.hf_id,)
            return [dict(row) for row in datasets.load_dataset(*args, split=split)]
        except Exception as exc:  # noqa: BLE001 - every failure here is "not available", shown with its cause
            raise self.unavailable(config, split, exc) from None

    def unavailable(self, config: str | None, split: str, exc: BaseException) -> UserError:
        where = "offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) and not in the Hugging Face cache" if offline() \
            else "could not be loaded"
        call = ", ".join(repr(a) for a in (self.hf_id, config) if a) + f", split={split!r}"
        example = self.layout[0].format(config=config or "", split=split).replace("*", "00000-of-00001")
        return UserError(
            f"dataset {self.source_label(config, split)} is {where} ({type(exc).__name__}: {_first_line(exc)}). "
            f"Either pass --data PATH with a local copy in the dataset's own layout (e.g. a folder holding "
            f"{example}), or fill the cache on a machine with network: "
            f"python -c \"import datasets; datasets.load_dataset({call})\" and use the same HF_HOME here"
        )

    # --- requests -----------------------------------------------------------------------------------------

    def requests(self, spec: WorkloadSpec, data: str | None) -> list[Request]:
        """Every request of the workload (categories filtered), in the dataset's order."""
        config = self.resolve_config(spec.config)
        wanted = self.check_categories(spec.categories, config)
        rows = list(enumerate(self.rows(config, spec.split or self.split, data or spec.data)))
        out = [self.to_request(row, i, spec) for i, row in self.select_rows(rows, spec, config, wanted)]
        return [r for r in out if wanted is None or r.category in wanted]

    def select_rows(
        self, rows: list[tuple[int, dict[str, Any]]], spec: WorkloadSpec, config: str | None, wanted: set[str] | None
    ) -> list[tuple[int, dict[str, Any]]]:
        """Rows (with their index in the dataset) that may become requests; all of them unless overridden."""
        return rows

    def check_categories(self, categories: Sequence[str] | None, config: str | None) -> set[str] | None:
        if categories is None:
            return None
        known = self.categories(config)
        for cat in categories:
            if known and cat not in known:
                raise UserError(
                    f"workload {self.name!r}"
                    + (f" (config {config})" if config else "")
                    + f": unknown category {cat!r}.{_did_you_mean(cat, known)} Categories: {', '.join(known)}"
                )
        return set(categories)

    def request(
        self,
        spec: WorkloadSpec,
        *,
        id: str,
        category: str,
        turns: Sequence[str],
        system: str | None = None,
        **metadata: Any,
    ) -> Request:
        """A request whose first user turn is ``turns[0]``; later turns become ``followup_turns``."""
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": turns[0]}
        ]
        metadata = {k: v for k, v in metadata.items() if v is not None}
        metadata["chat_template_kwargs"] = {"enable_thinking": bool(spec.thinking)}  # unset: off
        return Request(
            id=str(id),
            workload=self.name,
            category=category,
            messages=tuple(messages),
            max_tokens=spec.max_tokens or self.default_max_tokens,
            followup_turns=tuple(turns[1:]),
            metadata=metadata,
        )


# --- files ------------------------------------------------------------------------------------------------


def read_data_files(paths: Iterable[Path]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in paths:
        rows.extend(read_data_file(path))
    return rows


def read_data_file(path: Path) -> list[dict[str, Any]]:
    """Rows of one ``.parquet``, ``.jsonl`` or ``.json`` (a list of rows) file."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UserError(f"reading {path} needs pyarrow: {DATASETS_EXTRA}") from None
        try:
            return pq.read_table(path).to_pylist()
        except Exception as exc:  # noqa: BLE001 - a corrupt or non-parquet file
            raise UserError(f"{path}: not a readable parquet file ({_first_line(exc)})") from None
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None  # JSON Lines under a .json name, as some datasets ship
        if isinstance(data, list):
            return data
        if data is not None:
            raise UserError(f"{path}: expected a JSON list of rows (or JSON Lines)")
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}:{n}: not valid JSON Lines: {exc.msg}") from None
    return rows


# --- sampling ---------------------------------------------------------------------------------------------


def sample_requests(requests: Sequence[Request], num_prompts: int | None, seed: int) -> list[Request]:
    """Seeded, category-balanced, prefix-stable sample (see the module docstring)."""
    if num_prompts is None:
        return list(requests)
    groups: dict[str, list[Request]] = {}
    for req in requests:
        groups.setdefault(req.category, []).append(req)
    for category, group in groups.items():
        random.Random(f"dflashbench/{seed}/{category}").shuffle(group)
    order = sorted(groups)
    out: list[Request] = []
    depth = 0
    while len(out) < num_prompts and any(depth < len(groups[c]) for c in order):
        out.extend(groups[c][depth] for c in order if depth < len(groups[c]))
        depth += 1
    return out[:num_prompts]


def _did_you_mean(text: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(text, list(choices), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
