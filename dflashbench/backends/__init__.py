"""Lazy backend registry: name -> "module:Class", imported only when used."""

from __future__ import annotations

import difflib
import importlib

from dflashbench.errors import UserError

BACKENDS: dict[str, str] = {
    "reference": "dflashbench.backends.reference:ReferenceBackend",
    "vllm": "dflashbench.backends.vllm:VllmBackend",
    "sglang": "dflashbench.backends.sglang:SglangBackend",
    "trtllm": "dflashbench.backends.trtllm:TrtllmBackend",
    "endpoint": "dflashbench.backends.endpoint:EndpointBackend",
}


def get_backend(name: str):
    """Instantiate the backend called ``name``; an unknown name gets a did-you-mean error."""
    target = BACKENDS.get(name)
    if target is None:
        close = difflib.get_close_matches(name, BACKENDS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UserError(f"unknown backend {name!r}.{hint} Known backends: {', '.join(BACKENDS)}.")
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)()
