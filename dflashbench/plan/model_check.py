"""``dflashbench models check``: the model registry against the models' own files.

For each entry: the target's ``config.json`` and ``model.safetensors.index.json``, the DFlash drafter's
``config.json`` and the EAGLE-3 head's, read from a local folder in the Hugging Face layout (``--local DIR``
holding ``DIR/<org>/<name>/config.json``), else the Hugging Face cache, else the Hub. Each fact the registry
states is compared with the file; a file that says otherwise is *wrong* (exit 1), a fact the registry lacks
and a file gives is *missing* (add it), a file that cannot be read leaves the fact *unchecked*.
This is how a user keeps the registry true after a drafter is re-uploaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dflashbench.errors import UserError
from dflashbench.model_files import JsonFile, draft_facts, kv_facts, read_json, target_facts, weights_gib
from dflashbench.plan.models import ModelEntry

Status = Literal["ok", "wrong", "missing", "unchecked"]
Fetch = Callable[[str, str], JsonFile | None]  # (repo id, file name) -> the file, or None where it does not exist
WEIGHTS_TOLERANCE = 0.10  # weights_gib only sizes tp: within 10% of the checkpoint counts as right


@dataclass(frozen=True)
class Finding:
    model: str  # registry name
    fact: str  # e.g. "dflash.block_size"
    status: Status
    registry: object = None
    found: object = None
    where: str = ""  # the file, or why it could not be read

    def line(self) -> str:
        said = {"ok": f"{self.found!r}", "wrong": f"registry {self.registry!r}, file {self.found!r}",
                "missing": f"registry has none, file {self.found!r}: add it", "unchecked": ""}[self.status]  # fmt: skip
        where = f" ({self.where})" if self.where else ""
        return f"{self.status:<9} {self.model:<20} {self.fact:<26} {said}{where}"


HUB_PROBE_TIMEOUT_S = 3.0


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` set to a true value (huggingface_hub's own reading: 1, true, yes, on)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_reachable(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Whether to ask the Hub, and a line saying why: ``HF_HUB_OFFLINE`` set, or one request to the Hub's endpoint
    (``HF_ENDPOINT``) answered within ``timeout_s``. One probe instead of huggingface_hub's retries per file, which
    without a network take minutes per entry."""
    if hub_offline():
        return False, "HF_HUB_OFFLINE is set: reading the Hugging Face cache only"
    import urllib.error
    import urllib.request

    from huggingface_hub import constants

    url = constants.ENDPOINT.rstrip("/")
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout_s).close()  # noqa: S310
    except urllib.error.HTTPError:
        return True, f"the Hugging Face Hub answered at {url}"  # an HTTP answer is a reachable Hub
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return False, (f"no network: {url} did not answer within {timeout_s:g} s ({type(reason).__name__}); reading "
                       "the Hugging Face cache only")  # fmt: skip
    return True, f"the Hugging Face Hub answered at {url}"


class Fetcher:
    """Files from ``local/<org>/<name>/`` when given (a folder in the Hugging Face layout), else from the cache or,
    with ``network``, the Hub; ``offline`` says why the Hub is not asked (shown beside every file it lacks)."""

    def __init__(self, local: Path | None, *, network: bool, offline: str | None = None) -> None:
        self.local, self.network, self.offline = local, network, offline

    def __call__(self, repo: str, filename: str) -> JsonFile | None:
        if self.local is not None:
            folder = self.local / repo
            return read_json(str(folder), filename, network=False) if folder.is_dir() else None
        return read_json(repo, filename, network=self.network)


def fetcher(local: Path | None, *, network: bool, offline: str | None = None) -> Fetcher:
    return Fetcher(local, network=network, offline=offline)


def _compare(model: str, fact: str, registry: object, found: object, where: str) -> Finding | None:
    if found is None and registry is None:
        return None
    if found is None:
        return Finding(model, fact, "unchecked", registry, None, f"{where}: the file does not say")
    if registry is None:
        return Finding(model, fact, "missing", None, found, where)
    return Finding(model, fact, "ok" if registry == found else "wrong", registry, found, where)


def _read(fetch: Fetch, repo: str, filename: str) -> tuple[JsonFile | None, str]:
    try:
        found = fetch(repo, filename)
    except UserError as exc:  # gated, offline, unreadable: not checked, and the reason says why
        return None, str(exc)
    if found:
        return found, ""
    offline = getattr(fetch, "offline", None)
    if offline and getattr(fetch, "local", None) is None:
        return None, f"{repo}/{filename} is not in the Hugging Face cache ({offline})"
    return None, f"no {filename} for {repo}"


def check_entry(entry: ModelEntry, fetch: Fetch) -> list[Finding]:
    """Every fact of ``entry`` that the target's, the drafter's and the EAGLE-3 head's files can confirm."""
    name, out = entry.name, []
    target, why = _read(fetch, entry.hf_id, "config.json")
    out.append(Finding(name, "hf_id", "ok" if target else "unchecked", entry.hf_id, entry.hf_id if target else None,
                       target.where if target else why))  # fmt: skip
    tfacts = target_facts(target.data) if target else None
    if target and tfacts:
        out += [
            _compare(name, "architecture", entry.architecture, tfacts.architecture, target.where),
            _compare(name, "vocab_size", entry.vocab_size, tfacts.vocab_size, target.where),
            _compare(name, "num_hidden_layers", entry.num_hidden_layers, tfacts.num_hidden_layers, target.where),
            _compare(name, "context_tokens", entry.context_tokens, context_tokens(target.data), target.where),
            *kv_findings(name, "kv", entry.kv, kv_facts(target.data), target.where),
        ]  # type: ignore[list-item]
    index, _ = _read(fetch, entry.hf_id, "model.safetensors.index.json")
    size = weights_gib(index.data) if index else None
    if index and size is not None:
        close = entry.weights_gib is not None and abs(entry.weights_gib - size) <= WEIGHTS_TOLERANCE * size
        status: Status = "missing" if entry.weights_gib is None else "ok" if close else "wrong"
        out.append(Finding(name, "weights_gib", status, entry.weights_gib, round(size, 1), index.where))
    for key, drafter in (("dflash", entry.dflash), ("dflash2", entry.dflash2)):
        if drafter is not None:
            out += _drafter_findings(name, key, drafter, tfacts, fetch)
    if target and entry.mtp is not None:
        found = mtp_layers(target.data, entry.mtp.config_key)
        out.append(_compare(name, "mtp.layers", entry.mtp.layers, found, target.where))
    heads = {"eagle3": entry.eagle3, **{f"eagle3_by_engine.{e}": h for e, h in entry.eagle3_by_engine.items()}}
    for fact, spec in heads.items():
        if spec is None:
            continue
        head, why = _read(fetch, spec.id, "config.json")
        out.append(Finding(name, f"{fact}.id", "ok" if head else "unchecked", spec.id, spec.id if head else None,
                           head.where if head else why))  # fmt: skip
        if head:
            out.append(_compare(name, f"{fact}.format", spec.format, head_format(head.data), head.where))
    return [f for f in out if f is not None]


def _drafter_findings(name: str, key: str, drafter, tfacts, fetch: Fetch) -> list[Finding]:
    """A DFlash or DFlash2 drafter's facts against its own config.json (``key``: where it sits in the entry)."""
    draft, why = _read(fetch, drafter.id, "config.json")
    out = [Finding(name, f"{key}.id", "ok" if draft else "unchecked", drafter.id, drafter.id if draft else None,
                   draft.where if draft else why)]  # fmt: skip
    if draft:
        d = draft_facts(draft.data)
        ids = list(d.target_layer_ids) if d.target_layer_ids is not None else None
        archs = draft.data.get("architectures") or []
        out += [
            _compare(name, f"{key}.block_size", drafter.block_size, d.block_size, draft.where),
            _compare(name, f"{key}.target_layer_ids", drafter.target_layer_ids, ids, draft.where),
            _compare(name, f"{key}.layers", drafter.layers, d.layers, draft.where),
            _compare(name, f"{key}.architecture", drafter.architecture, archs[0] if archs else None, draft.where),
        ]  # type: ignore[list-item]
        out += _pair_findings(name, d, tfacts, draft.where)
    return [f for f in out if f is not None]


def mtp_layers(config: dict, key: str) -> int | None:
    """The MTP layer count under ``key``, top level or in ``text_config`` (multimodal Qwen3.5 checkpoints)."""
    for holder in (config, config.get("text_config") or {}):
        value = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(value, int):
            return value
    return None


def context_tokens(config: dict) -> int | None:
    """max_position_embeddings, at the top or in a multimodal checkpoint's text_config."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    for value in (config.get("max_position_embeddings"), text.get("max_position_embeddings")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def head_format(config: dict) -> str:
    """An EAGLE-3 head's layout: vLLM's speculators (``speculators_model_type``) or the EAGLE authors'."""
    return "speculators" if "speculators_model_type" in config or "speculators_config" in config else "eagle3"


def kv_findings(name: str, fact: str, registry_kv, found: dict | None, where: str) -> list[Finding]:
    """Each KV-geometry number the registry states (``[models.kv]``) against the one the config gives."""
    if found is None:
        return [] if registry_kv is None else [Finding(name, fact, "unchecked", None, None,
                                                       f"{where}: the file does not say")]  # fmt: skip
    stated = registry_kv.model_dump(exclude={"source"}, exclude_defaults=True) if registry_kv is not None else {}
    out = []
    for key, value in found.items():
        if value is not None:
            out.append(_compare(name, f"{fact}.{key}", stated.get(key), value, where))
    return [f for f in out if f is not None]


def _pair_findings(name: str, d, tfacts, where: str) -> list[Finding]:
    """The drafter against the target it was trained for: vocabulary, layer count, layer ids in range."""
    if tfacts is None:
        return []
    out = []
    if d.vocab_size is not None and tfacts.vocab_size is not None:
        out.append(_compare(name, "drafter vocab = target's", tfacts.vocab_size, d.vocab_size, where))
    if d.num_target_layers is not None and tfacts.num_hidden_layers is not None:
        out.append(_compare(name, "drafter num_target_layers", tfacts.num_hidden_layers, d.num_target_layers, where))
    if d.target_layer_ids and tfacts.num_hidden_layers is not None:
        inside = max(d.target_layer_ids) < tfacts.num_hidden_layers
        out.append(Finding(name, "target_layer_ids in range", "ok" if inside else "wrong",
                           f"< {tfacts.num_hidden_layers}", max(d.target_layer_ids), where))  # fmt: skip
    return out


def confirmed_marks(findings: list[Finding]) -> dict[str, str]:
    """fact -> what ``models show`` prints beside it: confirmed from a file, or what the file says instead."""
    marks = {}
    for f in findings:
        if f.status == "ok":
            marks[f.fact] = f"confirmed from {f.where}"
        elif f.status == "wrong":
            marks[f.fact] = f"{f.where} says {f.found!r}"
        elif f.status == "missing":
            marks[f.fact] = f"{f.where} says {f.found!r} (not in the registry)"
    return marks
