"""What a model's own files say, and whether the user may read them.

``config.json`` (and ``model.safetensors.index.json``) come from a local folder, the Hugging Face cache, or, where
the caller allows the network, the Hub through ``huggingface_hub`` (which also honours ``HF_HUB_OFFLINE`` and
``HF_HUB_CACHE``). The facts dflashbench reads from them are pure functions of the parsed JSON.

DFlash drafter configs (z-lab format, dflashbench/reference docs): ``block_size`` and ``num_target_layers`` at the
top level (some put ``block_size`` under ``dflash_config``, which SGLang's parse_dflash_draft_config also reads),
``dflash_config.{mask_token_id, target_layer_ids, use_swa}``, and the usual ``layer_types``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflashbench.errors import UserError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
SLIDING = "sliding_attention"


class HubUnreachable(UserError):
    """The Hub could not be asked (offline, no connection, no permission)."""


@dataclass(frozen=True)
class JsonFile:
    data: dict[str, Any]
    where: str  # the file read, for the user


def is_hub_id(model: str) -> bool:
    """A Hugging Face repository id rather than a local directory."""
    return bool(HUB_ID.match(model)) and not Path(model).expanduser().exists()


def read_json(model: str, filename: str = "config.json", *, network: bool) -> JsonFile | None:
    """``filename`` of ``model``: from its local folder, else the Hugging Face cache, else (``network``) the Hub.
    ``None`` where the file does not exist, or is not cached and the network is not allowed; a
    :class:`HubUnreachable` where the Hub was asked and could not answer."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        path = folder / filename
        return JsonFile(_load(path), str(path)) if path.is_file() else None
    if not is_hub_id(model):
        return None
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(model, filename)
    if isinstance(cached, str):
        return JsonFile(_load(Path(cached)), f"{model}/{filename} in the Hugging Face cache")
    if not network:
        return None
    return _download(model, filename)


def _download(repo: str, filename: str) -> JsonFile | None:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import GatedRepoError, RemoteEntryNotFoundError, RepositoryNotFoundError

    try:
        path = hf_hub_download(repo, filename)
    except RemoteEntryNotFoundError:  # the Hub answered: no such file (a local miss is the offline case below)
        return None
    except GatedRepoError:
        raise HubUnreachable(gated_message(repo)) from None
    except RepositoryNotFoundError:
        raise HubUnreachable(f"{repo}: no such repository on the Hugging Face Hub, or a private one your token "
                             "cannot read") from None  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - offline mode, DNS, proxies: one message naming the cause
        raise HubUnreachable(offline_message(repo, exc)) from None
    return JsonFile(_load(Path(path)), f"{repo}/{filename} from the Hugging Face Hub")


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def gated_message(repo: str) -> str:
    return (f"{repo} is gated and your Hugging Face token cannot read it: accept its terms at "
            f"https://huggingface.co/{repo} with the account of your token (HF_TOKEN, or `hf auth login`), then run again")  # fmt: skip


def offline_message(repo: str, exc: Exception) -> str:
    fix = ("HF_HUB_OFFLINE is set and the file is not in the cache: download it first where there is network "
           f"(hf download {repo}), or unset HF_HUB_OFFLINE" if _offline_env() else
           "run with network, or put the model in the local cache first and set HF_HUB_OFFLINE=1")  # fmt: skip
    return (f"cannot reach the Hugging Face Hub for {repo} ({type(exc).__name__}: {str(exc).splitlines()[0][:100]}): "
            f"{fix}")  # fmt: skip


def _offline_env() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def check_access(repos: list[str]) -> None:
    """Before any server starts: every hub repository here must be readable with the user's token. With
    ``HF_HUB_OFFLINE`` set, a repository already in the cache passes (the engine will read it from there)."""
    if not repos:
        return
    from huggingface_hub import auth_check, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    offline = _offline_env()
    for repo in dict.fromkeys(repos):
        if offline:
            if not isinstance(try_to_load_from_cache(repo, "config.json"), str):
                raise UserError(f"HF_HUB_OFFLINE is set and {repo} is not in the Hugging Face cache: download it "
                                "first (hf download REPO), or unset HF_HUB_OFFLINE")  # fmt: skip
            continue
        try:
            auth_check(repo)
        except GatedRepoError:
            raise UserError(gated_message(repo)) from None
        except RepositoryNotFoundError:
            raise UserError(f"{repo}: no such repository on the Hugging Face Hub, or a private one your token "
                            "cannot read") from None  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            raise UserError(offline_message(repo, exc)) from None


# --- facts in the files (pure) ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftFacts:
    block_size: int | None = None
    target_layer_ids: tuple[int, ...] | None = None
    layers: str | None = None  # "full", "sliding" or "mixed"
    vocab_size: int | None = None
    num_target_layers: int | None = None


@dataclass(frozen=True)
class TargetFacts:
    architecture: str | None = None
    vocab_size: int | None = None
    num_hidden_layers: int | None = None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def draft_facts(config: dict[str, Any]) -> DraftFacts:
    """A DFlash drafter's config.json, read as z-lab writes it (block size at the top or under dflash_config)."""
    dflash = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    block = _int(config.get("block_size")) or _int(dflash.get("block_size"))
    ids = dflash.get("target_layer_ids")
    ids = tuple(ids) if isinstance(ids, list) and all(_int(i) is not None for i in ids) else None
    return DraftFacts(block if block and block > 1 else None, ids, layer_pattern(config), _int(config.get("vocab_size")),
                      _int(config.get("num_target_layers")))  # fmt: skip


def layer_pattern(config: dict[str, Any]) -> str | None:
    """``layer_types`` summed up: all full, all sliding, or mixed; ``dflash_config.use_swa`` alone means sliding."""
    types = config.get("layer_types")
    if isinstance(types, list) and types:
        sliding = sum(t == SLIDING for t in types)
        return "full" if sliding == 0 else "sliding" if sliding == len(types) else "mixed"
    dflash = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    return "sliding" if dflash.get("use_swa") is True else None


def target_facts(config: dict[str, Any]) -> TargetFacts:
    """A target's config.json; multimodal checkpoints keep the text model's sizes under ``text_config``."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    vocab = _int(config.get("vocab_size")) or _int(text.get("vocab_size"))
    layers = _int(config.get("num_hidden_layers")) or _int(text.get("num_hidden_layers"))
    return TargetFacts(arch, vocab, layers)


def weights_gib(index: dict[str, Any]) -> float | None:
    """Checkpoint size from ``model.safetensors.index.json`` (``metadata.total_size``, bytes), in GiB."""
    meta = index.get("metadata") if isinstance(index.get("metadata"), dict) else {}
    size = meta.get("total_size")
    return size / 2**30 if isinstance(size, int | float) and size > 0 else None


def kv_facts(config: dict[str, Any]) -> dict[str, int] | None:
    """The KV geometry :class:`~dflashbench.plan.models.KvFacts` holds, from a target's config.json as the engines read
    it (a multimodal checkpoint's ``text_config``): ``layer_types`` (``full_attention``, ``sliding_attention``,
    ``linear_attention``) or, without it, ``full_attention_interval`` (every n-th layer full, the rest linear);
    Gemma 4's ``global_head_dim`` / ``num_global_key_value_heads`` for its full layers; MLA's ``kv_lora_rank +
    qk_rope_head_dim``. ``None`` where the config says too little."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    layers, heads = _int(text.get("num_hidden_layers")), _int(text.get("num_key_value_heads"))
    attn_heads, hidden = _int(text.get("num_attention_heads")), _int(text.get("hidden_size"))
    if layers is None:
        return None
    head_dim = _int(text.get("head_dim")) or (hidden // attn_heads if hidden and attn_heads else None)
    types = text.get("layer_types")
    interval = _int(text.get("full_attention_interval"))
    if not isinstance(types, list):
        types = ["full_attention" if interval and (i + 1) % interval == 0 else
                 ("linear_attention" if interval else "full_attention") for i in range(layers)]  # fmt: skip
    count = {kind: sum(t == kind for t in types) for kind in ("full_attention", SLIDING, "linear_attention")}
    out: dict[str, int] = {"full_layers": count["full_attention"]}
    latent = _int(text.get("kv_lora_rank"))
    if latent is not None:
        rope = _int(text.get("qk_rope_head_dim")) or 0
        return {**out, "kv_heads": 1, "head_dim": latent + rope, "latent_dim": latent + rope}
    if heads is None or head_dim is None:
        return None
    global_heads, global_dim = _int(text.get("num_global_key_value_heads")), _int(text.get("global_head_dim"))
    out.update(kv_heads=global_heads or heads, head_dim=global_dim or head_dim)
    if count[SLIDING]:
        out.update(sliding_layers=count[SLIDING], sliding_window=_int(text.get("sliding_window")) or 0)
        if global_heads or global_dim:
            out.update(sliding_kv_heads=heads, sliding_head_dim=head_dim)
    if count["linear_attention"]:
        out.update(linear_layers=count["linear_attention"], linear_key_heads=_int(text.get("linear_num_key_heads")) or 0,
                   linear_value_heads=_int(text.get("linear_num_value_heads")) or 0,
                   linear_key_head_dim=_int(text.get("linear_key_head_dim")) or 0,
                   linear_value_head_dim=_int(text.get("linear_value_head_dim")) or 0,
                   linear_conv_kernel=_int(text.get("linear_conv_kernel_dim")) or 0)  # fmt: skip
    return out
