"""Where command-line flags become a suite, in one place: ``dflashbench sweep --concurrency 1,8 --model ...``.

:func:`suite_from_flags` loads the suite (named, or the embedded default for the backend), checks what its schema
cannot (:func:`check_suite`), and applies the flags (:func:`apply_overrides`): flags win over the suite file, the
result is validated once like a suite file, and an error names the flag that set the bad value. :data:`FLAG_NAMES`
is the one table of suite keys whose flag is not the key with dashes; :data:`RESUMABLE` the keys ``--resume`` may
change.
"""

from __future__ import annotations

import contextvars
from typing import Any

from dflashbench.errors import UserError
from dflashbench.methods import drafter_methods, record
from dflashbench.plan.suites import Suite, parse_suite
from dflashbench.types import Method

_LIST_FIELDS = {"methods", "concurrency", "published", "request_rate", "trace_speed", "trace_content"}

# What ``sweep --resume RUN`` may change, by suite key, with its flag: operational limits, which decide how long
# the sweep waits, how many failed requests mark a point degraded, and how many processes send the load, never
# what a point measures (model, methods, workloads, concurrency, rates, tokens, temperature, seed...). A run
# stopped by a too-short timeout is finished with the timeout raised; the manifest records every change.
RESUMABLE = ("timeout_s", "ready_timeout_s", "max_error_rate", "client_processes")  # flags: flag_for


def check_suite(suite, path: str, *, overridden: frozenset[str] = frozenset()) -> None:
    """What the schema cannot check, each error naming the file and key: the backend, the workloads, the published
    ids; keys in ``overridden`` (set on the command line, which names them itself) are left to the sweep."""
    from dflashbench.backends import BACKENDS
    from dflashbench.plan.published import published_ids
    from dflashbench.workloads import check_spec

    if "backend" not in overridden and suite.backend not in BACKENDS:
        raise UserError(f"{path}: key 'backend': unknown backend {suite.backend!r}; known: {', '.join(BACKENDS)}")
    for i, spec in enumerate(suite.workloads):
        try:
            check_spec(spec)
        except UserError as exc:
            raise UserError(f"{path}: key 'workloads[{i}]': {exc}") from None
    unknown = sorted(set(suite.published) - set(published_ids()))
    if unknown:
        raise UserError(f"{path}: key 'published': no suites/published file for {', '.join(unknown)}")


# a running server (--endpoint) serves whatever name it was started with: --model is its name, not a model to find
_SERVED = contextvars.ContextVar("served", default=False)


def suite_from_flags(name: str | None, flags: dict[str, Any], *, served: bool = False) -> Suite:
    """The suite a sweep runs: ``name`` (a suite name or file; ``None``: the embedded demo on the reference
    backend, the real-workload default on an engine), checked, with the flags given (``flags``: suite key ->
    value, ``None`` = not given) applied. ``served``: the model runs behind ``--endpoint`` (its name unchecked)."""
    from dflashbench.plan.suites import load_suite

    if name is None:
        name = "demo" if flags.get("backend") in (None, "reference", "endpoint") else "default"
    loaded = load_suite(name)
    if name not in ("demo", "default"):  # a suite the user named: its errors name its file and key
        check_suite(loaded, loaded.source_file, overridden=frozenset(k for k, v in flags.items() if v is not None))
    token = _SERVED.set(served)
    try:
        return apply_overrides(loaded, **flags)
    finally:
        _SERVED.reset(token)


def _split_list(value: Any) -> Any:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


def _drafts_override(suite: Suite, methods: list[Any], draft: str, *,
                     keep_suite_drafts: bool = True) -> tuple[dict[str, str], str | None]:  # fmt: skip
    """``--draft PATH`` (the one speculative method) or ``--draft dflash=PATH,eagle3=PATH``; the suite's other
    drafts stay unless the target changed (``keep_suite_drafts=False``). Returns the drafts and a note when
    the draft goes unused (AR alone runs no draft)."""
    drafts = {m.value: v for m, v in suite.drafts.items()} if keep_suite_drafts else {}
    if "=" in draft:
        for item in _split_list(draft):
            method, _, path = item.partition("=")
            drafts[method.strip()] = path.strip()
        return drafts, None
    try:
        parsed = [Method.parse(str(m)) for m in methods]
    except ValueError as exc:
        raise UserError(f"--method: {exc}") from None
    speculative = list(dict.fromkeys(m.base.value for m in parsed if record(m).needs_draft))  # arms share a draft
    if not speculative:
        runs = "AR runs the target alone" if parsed == [Method.AR] else (
            f"{', '.join(m.value for m in parsed)} take no draft checkpoint")
        names = [m.value for m in drafter_methods()]
        return drafts, (f"--draft {draft} is not used: {runs}; add {', '.join(names[:-1])} or {names[-1]} to --method "
                        "to measure a draft")  # fmt: skip
    if len(speculative) > 1:
        raise UserError(f"--draft {draft}: {' and '.join(speculative)} each need their own draft; write "
                        f"--draft {','.join(f'{m}=ID' for m in speculative)}, or run one of them with --method")  # fmt: skip
    drafts[speculative[0]] = draft
    return drafts, None


def same_target(a: str, b: str) -> bool:
    """Whether two ``--model`` values name one target: the same registry entry (alias or HF id, any case), or
    the same text for models the registry does not know."""
    from dflashbench.plan.models import lookup

    ea, eb = lookup(a), lookup(b)
    if ea is not None or eb is not None:
        return ea is eb
    return a.strip().rstrip("/") == b.strip().rstrip("/")


def _load_overrides(given: dict[str, Any]) -> None:
    """The load-shape flags as suite values, in place: ``--request-rate 1,2``, ``--goodput ttft_s=2``,
    ``--client-processes 2|auto``."""
    if "request_rate" in given:
        from dflashbench.load.arrivals import parse_rates

        given["request_rate"] = parse_rates(given["request_rate"])
    if "goodput" in given:
        from dflashbench.measure.goodput import parse_slo

        given["goodput"] = parse_slo(given["goodput"])
    if "trace_speed" in given:
        from dflashbench.load.trace_replay import parse_speeds

        given["trace_speed"] = parse_speeds(given["trace_speed"])
    if "trace_scale" in given:
        from dflashbench.plan.trace_plan import parse_scale

        given.update(parse_scale(given.pop("trace_scale")))
    if isinstance(given.get("precision"), str):
        given["precision"] = parse_share(given["precision"], "--precision")
    if isinstance(given.get("client_processes"), str) and given["client_processes"] != "auto":
        try:
            given["client_processes"] = int(given["client_processes"])
        except ValueError:
            raise UserError(f"--client-processes {given['client_processes']}: give a number, or auto") from None


def apply_overrides(suite: Suite, **cli_values: Any) -> Suite:
    """The suite with command-line values applied; ``None`` means "not given". CLI flags win.

    Accepts any :class:`Suite` field, plus ``draft`` (see ``--draft``), and the workload-level ``data``,
    ``thinking``, ``categories`` and ``config`` (applied to every workload). ``max_tokens`` and
    ``num_prompts`` replace the workloads' own values too. Comma-separated strings are accepted for lists.
    """
    given = {k: v for k, v in cli_values.items() if v is not None}
    workload_keys = {"data", "thinking", "categories", "config", "on_placeholder"}
    allowed = set(Suite.model_fields) - {"source_file", "workloads"} | workload_keys | {"draft", "trace_scale",
                                                                                       "num_draft_tokens"}
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise TypeError(f"apply_overrides: not a suite setting: {', '.join(unknown)}")
    if not given:
        return suite
    data = suite.model_dump(exclude={"source_file"})  # the values as they are: validated once more, not re-parsed from text
    for key in _LIST_FIELDS & set(given):
        given[key] = _split_list(given[key])
    if "concurrency" in given and not all(isinstance(c, int) for c in given["concurrency"]):  # text, not --concurrency's ints
        try:
            given["concurrency"] = [int(c) for c in given["concurrency"]]
        except (TypeError, ValueError):
            raise UserError(f"--concurrency {cli_values['concurrency']}: expected integers like 1,2,4") from None
    _load_overrides(given)
    _cluster_kind(given, data)
    notes = list(suite.notes) + _trace_alone(given)
    if "categories" in given:
        given["categories"] = _split_list(given["categories"])
    draft = given.pop("draft", None)
    new_target = "model" in given and not same_target(given["model"], suite.model)
    _draft_tokens_flag(suite, given, new_target)
    if draft is not None:
        given["drafts"], unused = _drafts_override(suite, given.get("methods", data["methods"]), draft,
                                                   keep_suite_drafts=not new_target)  # fmt: skip
        notes += [unused] if unused else []
    if new_target and "num_speculative_tokens" not in given:  # chain lengths were set for the old drafts
        given["num_speculative_tokens"] = {}
    if draft is None and new_target and suite.drafts:
        # The suite's drafts were made for its own target: with another target they would mis-pair.
        given["drafts"] = {}
        notes.append(f"--model {given['model']} replaces the suite's target {suite.model}: its drafts "
                     f"({', '.join(sorted(set(suite.drafts.values())))}) are dropped; drafts come from the model "
                     "registry, or pass --draft")  # fmt: skip
    _check_model_flag(given, data)
    if notes != suite.notes:
        given["notes"] = notes
    workload_update = {k: given.pop(k) for k in list(given) if k in workload_keys}
    if "data" in workload_update and len({(w.name, w.config) for w in suite.workloads}) > 1:
        raise UserError(
            f"--data {workload_update['data']}: suite {suite.name!r} has workloads from several datasets "
            f"({', '.join(w.label for w in suite.workloads)}); set data per workload in a suite file instead"
        )
    for key in ("max_tokens", "num_prompts"):
        if key in given:
            workload_update[key] = given[key]
    data.update(given)
    data["workloads"] = [{**w, **workload_update} for w in data["workloads"]]
    try:
        return parse_suite(data, source=f"{suite.source_file} (with command-line overrides)")
    except UserError as exc:  # name the flag that set the bad value
        flags = [flag for key, flag in _override_flags(given, workload_update) if f"key '{key}'" in str(exc)]
        raise UserError(f"{exc} (set by {', '.join(dict.fromkeys(flags))})" if flags else str(exc)) from None


def _cluster_kind(given: dict[str, Any], data: dict[str, Any]) -> None:
    """``--cluster KIND`` sets the kind and keeps the suite's other ``[cluster]`` settings."""
    if isinstance(given.get("cluster"), str):
        given["cluster"] = {**data["cluster"], "kind": given["cluster"]}


def _check_model_flag(given: dict[str, Any], data: dict[str, Any]) -> None:
    """A --model that names nothing, or lacks drafts, refused in command-line terms (plan/model_names.py)."""
    if "model" not in given or _SERVED.get():
        return
    from dflashbench.plan.model_names import check_model

    methods = [str(getattr(m, "value", m)) for m in given.get("methods", data["methods"])]
    drafts = {str(getattr(k, "value", k)): v for k, v in given.get("drafts", data["drafts"]).items()}
    check_model(str(given["model"]), methods, drafts, str(given.get("backend") or data.get("backend")))


def _draft_tokens_flag(suite: Suite, given: dict[str, Any], new_target: bool) -> None:
    """``--num-draft-tokens METHOD=K``: into the suite's ``[num_speculative_tokens]``, over the suite's own values
    (which a new target drops: they were set for the old drafts)."""
    if "num_draft_tokens" not in given:
        return
    from dflashbench.plan.draft_lengths import parse_flag

    flagged = parse_flag(given.pop("num_draft_tokens"))
    kept = {} if new_target else {m.value: k for m, k in suite.num_speculative_tokens.items()}
    given["num_speculative_tokens"] = {**kept, **{m.value: k for m, k in flagged.items()}}


def _trace_alone(given: dict[str, Any]) -> list[str]:
    """``--trace`` on the command line replays the trace alone: the suite's closed-loop and rate points are left
    out unless ``--concurrency`` / ``--request-rate`` are given too (in place; the note says so)."""
    if not given.get("trace"):
        return []
    dropped = [flag for key, flag in (("concurrency", "--concurrency"), ("request_rate", "--request-rate"))
               if key not in given]  # fmt: skip
    for key in ("concurrency", "request_rate"):
        given.setdefault(key, [])
    return [f"--trace {given['trace']}: the trace's points replace the suite's closed-loop and rate points (give "
            f"{' or '.join(dropped)} to run those beside it)"] if dropped else []  # fmt: skip


# The suite keys whose sweep flag is not the key with dashes: the one table of them (cli/sweep_command.py reads it too).
FLAG_NAMES = {"timeout_s": "--request-timeout", "ready_timeout_s": "--ready-timeout", "methods": "--method",
              "num_speculative_tokens": "--num-draft-tokens"}


def flag_for(key: str) -> str:
    """The ``sweep`` flag that sets suite key ``key``."""
    return FLAG_NAMES.get(key, "--" + key.replace("_", "-"))


def _override_flags(given: dict[str, Any], workload_update: dict[str, Any]) -> list[tuple[str, str]]:
    """(suite key, command-line flag) for every override applied (workload keys sit under ``workloads``)."""
    return [(key, flag_for(key)) for key in [*given, *workload_update]]


def parse_share(text: str, flag: str) -> float:
    """``5%`` or ``0.05`` -> 0.05; a clear error otherwise."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UserError(f"{flag} {text!r}: give a share such as 5% or 0.05") from None
    if not 0 < value < 1:
        raise UserError(f"{flag} {text!r}: give a share between 0 and 100% (5% or 0.05)")
    return value
