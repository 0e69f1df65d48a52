"""What the command groups share: the one comma-list parser, ``Method`` as an option type, and the embedded
pair standing in for a model or draft not given.

Option parsers run while the command line is read, before the command: a bad value raises a
:class:`UserError`, which the root command prints on one line (see :mod:`dflashbench.cli`). The metavar stays
``<str>`` (what ``--help`` showed before these were typed); the help text names the choices.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from dflashbench.errors import UserError
from dflashbench.methods import drafter_methods
from dflashbench.types import Method

CONTEXT = {"help_option_names": ["-h", "--help"]}  # every command and group
STR, INT = "<str>", "<int>"  # metavars as --help showed them before these options had parsers

# Help panels grouping a command's options (rich_help_panel=...): one name each, shared by every command.
RUN = "What to run"
LOAD = "Load shape"
ENGINE = "Engine and parallelism"
OUTPUT = "Output"
LIMITS = "Limits and reliability"


# The list types are tuple subclasses, not ``tuple[int, ...]``: typer reads a tuple annotation as an option that
# takes several values, while these take one value, parsed by ``parser=`` (which typer always hands text).
class IntList(tuple[int, ...]):
    """Integers given as one comma-separated option value (``--concurrency 1,2,4``)."""


class MethodList(tuple[Method, ...]):
    """Methods given as one comma-separated option value (``--method ar,dflash``)."""


def comma_list(text: str) -> tuple[str, ...]:
    """``"a, b,,c"`` -> ``("a", "b", "c")``: the one place the command line splits a comma list."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def int_list(flag: str, example: str, *, minimum: int | None = None) -> Callable[[str], IntList]:
    """Parser of ``flag``'s comma-separated integers (at least one; each ``>= minimum`` when given)."""

    def parse(text: str) -> IntList:
        try:
            values = IntList(int(item) for item in comma_list(text))
        except ValueError:
            raise UserError(f"{flag} {text!r}: expected comma-separated integers, e.g. {example}") from None
        if not values:
            raise UserError(f"{flag} {text!r}: give at least one integer, e.g. {example}")
        if minimum is not None and min(values) < minimum:
            raise UserError(f"{flag} {text}: every value must be at least {minimum}")
        return values

    return parse


def process_counts(flag: str) -> Callable[[str], list]:
    """Parser of ``flag``'s comma-separated client process counts: each 1 or more, or ``auto`` (as a sweep's
    ``--client-processes auto`` chooses for the streams at hand)."""

    def parse(text: str) -> list:
        items = comma_list(text)
        if not items or any(i != "auto" and not (i.isdigit() and int(i) >= 1) for i in items):
            raise UserError(f"{flag} {text!r}: expected comma-separated counts of 1 or more, or auto, e.g. 1,2 or auto")
        return [i if i == "auto" else int(i) for i in items]

    return parse


def at_least(flag: str, minimum: int) -> Callable[[str], int]:
    """Parser of an integer option that must be at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise UserError(f"{flag} {text!r}: expected an integer") from None
        if value < minimum:
            raise UserError(f"{flag} must be at least {minimum} (got {value})")
        return value

    return parse


def _choices_text(choices: Iterable[str]) -> str:
    names = [str(c) for c in choices]  # a Method's str is its value
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def one_of(flag: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    """Parser of an option that takes one of a few words (``--format text|md``)."""

    def parse(text: str) -> str:
        if text not in choices:
            raise UserError(f"unknown {flag} {text!r}; choose {_choices_text(choices)}")
        return text

    return parse


def method_of(command: str, choices: Iterable[Method] = tuple(Method)) -> Callable[[str], Method]:
    """Parser of one ``--method`` value that ``command`` accepts among ``choices``."""
    allowed = tuple(choices)

    def parse(text: str) -> Method:
        try:
            method = Method.parse(text)
        except ValueError:
            method = None
        if method not in allowed:
            raise UserError(f"unknown method {text.strip()!r} for {command}; choose {_choices_text(allowed)}")
        return method

    return parse


def methods_of(flag: str, choices: Iterable[Method] = tuple(Method), *, arms: bool = False) -> Callable[[str], MethodList]:
    """Parser of a comma-separated ``--method`` list (duplicates dropped, order kept) among ``choices``; with ``arms``,
    an arm of one of them too (``dflash-k3``: the method at its own draft length)."""
    allowed = tuple(choices)

    def parse(text: str) -> MethodList:
        names = comma_list(text)
        try:
            methods = MethodList(dict.fromkeys(Method.parse(name) for name in names))
        except ValueError:
            methods = MethodList()
        if not methods or any((m.base if arms else m) not in allowed for m in methods):
            also = " (or an arm of one: METHOD-kN, a draft length of N)" if arms else ""
            raise UserError(f"{flag} {text}: choose from {', '.join(m.value for m in allowed)}{also}")
        return methods

    return parse


DRAFT_FLAGS: Mapping[Method, str] = dict.fromkeys(drafter_methods(), "--draft")


def embedded_or(model: str | None, drafts: Mapping[Method, str | None] | None = None, *,
                flags: Mapping[Method, str] = DRAFT_FLAGS) -> tuple[str, dict[Method, str]]:  # fmt: skip
    """``--model`` and each method's draft as given; the embedded pair stands in for what is not given.

    The one place the commands fall back to the bundled pair. A command that pairs the embedded drafters only
    with the embedded target (``serve``) passes ``drafts`` only when ``model`` is ``None``. ``flags`` names each
    method's draft option in errors."""
    drafts = dict(drafts or {})
    if model is not None and all(d is not None for d in drafts.values()):
        return model, {m: d for m, d in drafts.items() if d is not None}
    needed = ["--model DIR", *(f"{flags[m]} DIR" for m in drafts)]
    try:
        from dflashbench.embedded import default_paths
    except ImportError:
        raise UserError(f"{' and '.join(dict.fromkeys(needed))} required: the embedded pair is not installed") from None
    paths = default_paths()
    bundled = {Method.DFLASH: paths.dflash, Method.EAGLE3: paths.eagle3}
    filled = {}
    for method, given in drafts.items():
        if given is None and bundled.get(method) is None:
            train = f" (train one with dflashbench train {method.value})" if method is Method.EAGLE3 else ""
            raise UserError(f"the embedded pair has no {method.value} drafter: pass {flags[method]} DIR{train}")
        filled[method] = given if given is not None else str(bundled[method])
    return (model if model is not None else str(paths.target)), filled


_BAND = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*[-:,]\s*(\d+(?:\.\d+)?)\s*$")  # report --band LO-HI


def parse_band(text: str | None) -> tuple[float, float] | None:
    """``"500-600"`` -> ``(500.0, 600.0)``: an interactivity band in tokens/s per user."""
    if text is None or not text.strip():
        return None
    m = _BAND.match(text)
    if not m:
        raise UserError(f"bad --band {text!r}: expected LO-HI in tokens/s per user, e.g. 500-600")
    lo, hi = float(m.group(1)), float(m.group(2))
    if not 0 < lo < hi:
        raise UserError(f"bad --band {text!r}: need 0 < LO < HI")
    return lo, hi

