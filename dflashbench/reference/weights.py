"""Checkpoint I/O both drafter families share: dtype names, ``config.json`` (read and validated) and
``model.safetensors``.

Each family's own layout (which fields, which tensor names) lives with its network:
:mod:`~dflashbench.reference.dflash.checkpoint`, :mod:`~dflashbench.reference.eagle3.checkpoint`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch
from pydantic import TypeAdapter, ValidationError

from dflashbench.errors import UserError

ConfigT = TypeVar("ConfigT")

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
           "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "float64": torch.float64}


def parse_dtype(name: str | torch.dtype | None) -> torch.dtype | None:
    """``"bfloat16"`` / ``"bf16"`` / ``torch.bfloat16`` -> ``torch.bfloat16``; ``None``/"auto" -> None."""
    if name is None or isinstance(name, torch.dtype):
        return name
    key = str(name).removeprefix("torch.").lower()
    if key == "auto":
        return None
    if key not in _DTYPES:
        raise UserError(f"unknown dtype {name!r}; use one of bfloat16, float16, float32")
    return _DTYPES[key]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def read_config_json(path: str | Path, what: str) -> tuple[Path, object]:
    """``<dir>/config.json`` (or a config file path) parsed; one-line errors name ``what`` checkpoint it is."""
    p = Path(path)
    cfg_path = p / CONFIG_NAME if p.is_dir() else p
    if not cfg_path.is_file():
        raise UserError(f"{what} checkpoint: {cfg_path} not found; pass a directory with config.json and "
                        "model.safetensors")
    try:
        return cfg_path, json.loads(cfg_path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{what} checkpoint: {cfg_path} is not valid JSON ({exc.msg}, line {exc.lineno})") from None


def read_weights(directory: Path, what: str) -> dict[str, torch.Tensor]:
    """``<dir>/model.safetensors`` as tensors; one-line errors name ``what`` checkpoint it is."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights = directory / WEIGHTS_NAME
    if not weights.is_file():
        raise UserError(f"{what} checkpoint: {weights} not found; the directory needs model.safetensors")
    try:
        return load_file(str(weights))
    except (SafetensorError, OSError) as exc:
        raise UserError(f"{what} checkpoint: cannot read {weights}: {exc}") from None


def validate_config(schema: TypeAdapter[ConfigT], values: dict[str, Any], source: str, *, hint: str,
                    where: Mapping[str, str] = {}) -> ConfigT:
    """A config dataclass validated by pydantic against its own field types (the dataclass is the schema).

    The first problem becomes one :class:`UserError` line naming the field as ``config.json`` spells it
    (``where`` maps a dataclass field to its place in the file when that is not the top level) and the fix."""
    try:
        return schema.validate_python(values)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = [str(p) for p in err["loc"]]
        name = ".".join([where.get(loc[0], loc[0]), *loc[1:]]) if loc else "?"
        if err["type"] == "missing":
            raise UserError(f"{source}: required field {name!r} is missing; add it ({hint})") from None
        what = err["msg"].replace("Input should", "should")
        raise UserError(f"{source}: field {name!r} {what}, got {err.get('input')!r}") from None
