"""Two runs that draft different lengths measure different things: each method's draft tokens a step (and the
drafter's own tp) as each run's servers were launched, and where BASE and NEW differ (``compare`` lists it with the
setting's other differences). Read from the manifest's server argv (the exact commands that ran): vLLM's
``--speculative-config`` ``num_speculative_tokens`` / ``draft_tensor_parallel_size``, SGLang's
``--speculative-num-steps`` and ``--speculative-num-draft-tokens``; else the run's suite ``num_speculative_tokens``.
"""

from __future__ import annotations

import json


def _flag(argv: list, name: str) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg == name:
            return str(argv[i + 1])
        if isinstance(arg, str) and arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def server_draft_lengths(manifest: dict) -> dict[str, str]:
    """Each speculative method's draft length as its server was launched, in words (``"7, draft tp 1"``)."""
    out: dict[str, str] = {}
    servers = manifest.get("servers") if isinstance(manifest.get("servers"), dict) else {}
    for method, server in servers.items():
        argv = server.get("argv") if isinstance(server, dict) else None
        if not isinstance(argv, list) or "#" in method:  # a replica runs its method's command
            continue
        config = _flag(argv, "--speculative-config")
        if config is not None:
            try:
                parsed = json.loads(config)
            except ValueError:
                parsed = {}
            if isinstance(parsed, dict) and "num_speculative_tokens" in parsed:
                tp = parsed.get("draft_tensor_parallel_size")
                out[method] = f"{parsed['num_speculative_tokens']}" + (f", draft tp {tp}" if tp is not None else "")
            continue
        steps, tokens = _flag(argv, "--speculative-num-steps"), _flag(argv, "--speculative-num-draft-tokens")
        if steps is not None or tokens is not None:
            out[method] = ", ".join(x for x in (f"{steps} steps" if steps else "", f"{tokens} draft tokens"
                                                if tokens else "") if x)  # fmt: skip
    suite = manifest.get("suite_config") if isinstance(manifest.get("suite_config"), dict) else {}
    for method, k in (suite.get("num_speculative_tokens") or {}).items():
        out.setdefault(str(method), str(k))
    return out


def draft_length_differences(base: dict, new: dict) -> list[str]:
    """Each method both runs launched whose draft length differs, as ``compare`` lists a setting's differences."""
    b, n = server_draft_lengths(base), server_draft_lengths(new)
    return [f"draft tokens of {m}: BASE {b[m]}, NEW {n[m]} (a different draft length is a different method "
            "setting: set it alike with --num-draft-tokens)" for m in sorted(set(b) & set(n)) if b[m] != n[m]]
