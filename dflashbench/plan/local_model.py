"""A target the registry does not know, described by its own ``config.json`` (a local folder, or the Hugging Face
cache): the facts the memory plan and the rate estimate read (layers, KV geometry, parameters, weights), as a
registry entry without drafts or recipes. Read with :func:`dflashbench.model_files.read_json`; the counts follow
the keys transformers' config classes use (``num_hidden_layers``, ``num_key_value_heads``, ``head_dim``,
``layer_types``, ``sliding_window``, ``kv_lora_rank`` + ``qk_rope_head_dim`` for MLA, ``linear_*`` for Gated
DeltaNet; MoE ``num_experts`` / ``num_local_experts`` / ``n_routed_experts``, ``num_experts_per_tok``,
``moe_intermediate_size``). Parameters are counted from the shapes (attention, MLP or experts, embeddings); the
weights are the folder's safetensors where it has them, else the parameters at the config's dtype. Said as an
estimate in the plan.
"""

from __future__ import annotations

from pathlib import Path

from dflashbench.plan.models import KvFacts, ModelEntry, MoeExperts

DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0, "float8_e4m3fn": 1.0}


def _text(config: dict) -> dict:
    inner = config.get("text_config")
    return {**config, **inner} if isinstance(inner, dict) else config


def _kv(c: dict, source: str) -> KvFacts:
    layers = int(c["num_hidden_layers"])
    heads = int(c.get("num_attention_heads") or 1)
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or int(c.get("hidden_size", 0)) // max(heads, 1) or 128)
    kinds = [str(t) for t in (c.get("layer_types") or [])]
    full = sum(1 for t in kinds if t in ("full_attention", "attention")) if kinds else layers
    sliding = sum(1 for t in kinds if "sliding" in t)
    linear = sum(1 for t in kinds if "linear" in t or "delta" in t)
    facts: dict = {"full_layers": full, "kv_heads": kv_heads, "head_dim": head_dim, "source": source}
    if c.get("kv_lora_rank"):
        latent = int(c["kv_lora_rank"]) + int(c.get("qk_rope_head_dim") or 0)
        facts.update(kv_heads=1, head_dim=latent, latent_dim=latent)
    if sliding and c.get("sliding_window"):
        facts.update(sliding_layers=sliding, sliding_window=int(c["sliding_window"]))
    keys = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
            "linear_conv_kernel_dim")  # fmt: skip
    if linear and all(c.get(k) for k in keys):
        facts.update(linear_layers=linear, linear_key_heads=int(c[keys[0]]), linear_value_heads=int(c[keys[1]]),
                     linear_key_head_dim=int(c[keys[2]]), linear_value_head_dim=int(c[keys[3]]),
                     linear_conv_kernel=int(c[keys[4]]))  # fmt: skip
    return KvFacts(**facts)


def parameters(c: dict) -> tuple[float, float]:
    """(all, active per token) parameters, billions, counted from the config's shapes."""
    h = int(c["hidden_size"])
    layers = int(c["num_hidden_layers"])
    heads = int(c.get("num_attention_heads") or 1)
    head_dim = int(c.get("head_dim") or h // heads)
    kv_heads = int(c.get("num_key_value_heads") or heads)
    attention = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2
    experts = int(c.get("num_experts") or c.get("num_local_experts") or c.get("n_routed_experts") or 0)
    per_token = int(c.get("num_experts_per_tok") or 0)
    if experts and per_token:
        inter = int(c.get("moe_intermediate_size") or c.get("intermediate_size"))
        shared = int(c.get("shared_expert_intermediate_size") or 0) + int(c.get("n_shared_experts") or 0) * inter
        mlp_all, mlp_active = 3 * h * (experts * inter + shared), 3 * h * (per_token * inter + shared)
    else:
        mlp_all = mlp_active = 3 * h * int(c.get("intermediate_size") or 4 * h)
    vocab = int(c.get("vocab_size") or 0)
    embed = vocab * h * (1 if c.get("tie_word_embeddings") else 2)
    return (layers * (attention + mlp_all) + embed) / 1e9, (layers * (attention + mlp_active) + embed) / 1e9


def weights_gib(folder: Path | None, params_b: float, dtype: str) -> tuple[float, str]:
    """The checkpoint's size: its safetensors in ``folder`` where there are any, else the parameters at ``dtype``."""
    files = sorted(folder.glob("*.safetensors")) if folder is not None and folder.is_dir() else []
    if files:
        return sum(f.stat().st_size for f in files) / 2**30, f"the {len(files)} safetensors file(s) in {folder}"
    bytes_each = DTYPE_BYTES.get(dtype, 2.0)
    return params_b * 1e9 * bytes_each / 2**30, f"{params_b:.1f}B parameters at {bytes_each:g} bytes ({dtype})"


def local_entry(model: str, *, network: bool = False) -> ModelEntry | None:
    """A registry-shaped entry for ``model`` from its own config.json (local folder or the HF cache); ``None``
    where none can be read or it lacks the keys the plan needs."""
    from dflashbench.model_files import read_json

    try:
        found = read_json(model, network=network)
    except Exception:  # noqa: BLE001 - the Hub unreachable or a broken file: no plan, as before
        return None
    if found is None or not isinstance(found.data, dict):
        return None
    c = _text(found.data)
    if not c.get("num_hidden_layers") or not c.get("hidden_size"):
        return None
    total, active = parameters(c)
    folder = Path(model).expanduser()
    dtype = str(c.get("torch_dtype") or c.get("dtype") or "bfloat16")
    gib, how = weights_gib(folder if folder.is_dir() else None, total, dtype)
    source = f"the model's own config.json ({found.where}); parameters counted from its shapes; weights: {how}"
    name = folder.name.lower() if folder.is_dir() else model.rsplit("/", 1)[-1].lower()
    experts = None
    if c.get("num_experts_per_tok") and c.get("moe_intermediate_size") and "quantization_config" not in c:
        experts = MoeExperts(experts_per_token=int(c["num_experts_per_tok"]),
                             intermediate_size=int(c["moe_intermediate_size"]), hidden_size=int(c["hidden_size"]),
                             source=source)  # fmt: skip
    return ModelEntry.model_construct(
        name=name, hf_id=model, aliases=[], params_b=total, active_params_b=active if active < total * 0.99 else None,
        weights_dtype=dtype, weights_gib=gib, architecture=(c.get("architectures") or [None])[0],
        context_tokens=c.get("max_position_embeddings"), kv=_kv(c, source), vocab_size=c.get("vocab_size"),
        num_hidden_layers=int(c["num_hidden_layers"]), source=source, unverified=["every fact: counted from config.json"],
        recipes={}, eagle3_none="not in the model registry: pass --draft eagle3=ID", moe_experts=experts,
    )  # fmt: skip
