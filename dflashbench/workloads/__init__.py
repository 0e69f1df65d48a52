"""Workloads: one module per dataset family, behind the :data:`WORKLOADS` registry.

Each workload reads its dataset (from the Hugging Face id, or a local copy with ``--data PATH``) and yields
:class:`~dflashbench.types.Request` objects: chat messages in the prompt format of the DFlash benchmark,
category, a stable id (the dataset's own id, else the row index), max tokens, later turns of multi-turn rows,
and ``metadata["chat_template_kwargs"] = {"enable_thinking": ...}``. :func:`load_requests` applies the seeded
sampling described in :mod:`dflashbench.workloads.base`.
"""

from __future__ import annotations

from dflashbench.errors import UserError
from dflashbench.types import Request
from dflashbench.workloads.base import MATH_SUFFIX, Workload, _did_you_mean, sample_requests
from dflashbench.workloads.chat import MtBench
from dflashbench.workloads.code import HumanEval, LiveCodeBench, Mbpp
from dflashbench.workloads.math import Aime25, Gsm8k, Math500
from dflashbench.workloads.spec import WorkloadSpec
from dflashbench.workloads.speed_bench import PLACEHOLDER, SpeedBench
from dflashbench.workloads.synthetic import Synthetic

__all__ = [
    "MATH_SUFFIX", "PLACEHOLDER", "WORKLOADS", "Workload", "check_spec", "format_requests", "get_workload",
    "load_requests", "render_chat", "sample_requests",
]  # fmt: skip

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Gsm8k(), Math500(), Aime25(), HumanEval(), Mbpp(), LiveCodeBench(), MtBench(), SpeedBench(), Synthetic(),
    )
}  # fmt: skip


def get_workload(name: str) -> Workload:
    """The workload registered as ``name``; an unknown name gets a did-you-mean error."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UserError(
            f"unknown workload {name!r}.{_did_you_mean(name, WORKLOADS)} Known workloads: {', '.join(WORKLOADS)}"
        ) from None


def check_spec(spec: WorkloadSpec) -> None:
    """What can be checked without reading data: the name, config and categories exist."""
    workload = get_workload(spec.name)
    config = workload.resolve_config(spec.config)
    workload.check_categories(spec.categories, config)


def hub_source(spec: WorkloadSpec) -> str | None:
    """Where ``spec``'s rows come from when they are not on disk (``None``: generated, or ``data`` given)."""
    workload = get_workload(spec.name)
    if isinstance(workload, Synthetic) or spec.data:
        return None
    return workload.source_label(workload.resolve_config(spec.config), spec.split or workload.split)


def hub_prompts(spec: WorkloadSpec) -> tuple[int | None, bool]:
    """How many requests a Hub workload sends, without reading a row, and whether that is exact: ``num_prompts``
    capped by the rows its dataset card lists. A bound where rows may be left out (placeholders skipped, a
    category filter) or the card's count is not known; ``None`` where neither is known."""
    workload = get_workload(spec.name)
    rows = workload.rows_on_hub(workload.resolve_config(spec.config), spec.split or workload.split)
    if spec.categories:  # an unknown share of the rows
        rows = None
    if rows is None:
        return spec.num_prompts, False
    exact = spec.num_prompts is not None and spec.num_prompts <= rows or spec.on_placeholder != "skip"
    return (rows if spec.num_prompts is None else min(spec.num_prompts, rows)), exact


def load_requests(
    spec: WorkloadSpec, *, num_prompts: int | None, seed: int, data: str | None = None
) -> list[Request]:
    """The requests ``spec`` sends: read, category-filtered, then sampled (seeded, categories balanced).

    ``num_prompts`` and ``data``, when given, win over the spec's own values (a suite fills the spec's
    ``num_prompts`` from the workload entry or the suite, so passing ``spec.num_prompts`` is always right).
    """
    workload = get_workload(spec.name)
    n = num_prompts if num_prompts is not None else spec.num_prompts
    if isinstance(workload, Synthetic):
        if data or spec.data:
            raise UserError("the synthetic workload is generated, not read: it takes no --data")
        return workload.generate(spec, n, seed)
    return sample_requests(workload.requests(spec, data), n, seed)


def format_requests(requests: list[Request], *, as_json: bool = False) -> str:
    """The requests exactly as they would be sent: id, category, max_tokens, messages, later turns."""
    import json

    if as_json:
        return "".join(
            json.dumps({"id": r.id, "workload": r.workload, "category": r.category, "max_tokens": r.max_tokens,
                        "messages": list(r.messages), "followup_turns": list(r.followup_turns),
                        "metadata": r.metadata}, ensure_ascii=False) + "\n"
            for r in requests
        )  # fmt: skip
    out = []
    for i, r in enumerate(requests, 1):
        kwargs = r.metadata.get("chat_template_kwargs")
        out.append(f"--- [{i}/{len(requests)}] id={r.id} category={r.category} max_tokens={r.max_tokens}"
                   + (f" chat_template_kwargs={json.dumps(kwargs)}" if kwargs else ""))  # fmt: skip
        out += [f"[{m['role']}]\n{m['content']}" for m in r.messages]
        out += [f"[user, turn {t}, sent after the answer to turn {t - 1}]\n{text}"
                for t, text in enumerate(r.followup_turns, 2)]  # fmt: skip
    return "\n".join(out) + ("\n" if out else "")


def render_chat(tokenizer, messages, chat_template_kwargs: dict | None = None) -> str:
    """Prompt text for a backend that takes text or token ids rather than chat messages.

    The target's own chat template, with the generation prompt added and the request's
    ``chat_template_kwargs`` (e.g. ``enable_thinking``) passed through, as an OpenAI-compatible server would.
    """
    return tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
    )
