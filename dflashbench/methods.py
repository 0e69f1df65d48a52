"""Decoding methods as data: one record per method (``dflashbench/data/methods.toml``), read strictly.

A record says what the method needs besides the target (a drafter, the target's own MTP layers, nothing), its
label, and per engine the engine's own name for it, the first release that has it and where that was read. The
names of the records are the :class:`~dflashbench.types.Method` values ``--method`` takes; everything that asks
"does this method need a draft", "what does vLLM call it", "which release has it" asks here.
"""

from __future__ import annotations

import functools
import tomllib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dflashbench.errors import UserError
from dflashbench.types import METHODS_FILE, Method

Needs = Literal["drafter", "own-heads", "nothing"]
ENGINES = ("vllm", "sglang", "trtllm", "reference")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineMethod(_Strict):
    """How one engine runs a method."""

    name: str  # vLLM speculative_config.method, SGLang --speculative-algorithm, TRT-LLM decoding_type
    since: str  # the first release that has it
    source: str  # where that was read
    defaults: dict[str, int] = Field(default_factory=dict)  # keys dflashbench passes when the suite sets none
    defaults_source: str | None = None
    note: str = ""
    unsupported: bool = False  # listed to say why the engine cannot run it


class MethodRecord(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9]*$")
    label: str
    needs: Needs
    about: str
    draft_words: str | None = None  # "a DFlash drafter": what --draft must be, in errors
    draft_architectures: list[str] = Field(default_factory=list)  # config.json architectures of its drafters
    engines: dict[Literal["vllm", "sglang", "trtllm", "reference"], EngineMethod] = Field(default_factory=dict)

    @property
    def method(self) -> Method:
        return Method(self.name)

    @property
    def speculative(self) -> bool:
        return self.name != Method.AR.value

    @property
    def needs_draft(self) -> bool:
        return self.needs == "drafter"

    @property
    def draft_free(self) -> bool:
        return self.speculative and self.needs == "nothing"

    def on(self, engine: str) -> EngineMethod:
        """How ``engine`` runs this method; a :class:`UserError` naming the engines that do, where it does not."""
        found = self.engines.get(engine)  # type: ignore[call-overload]
        if found is None or found.unsupported:
            why = f" ({found.source})" if found is not None else ""
            able = [e for e, m in self.engines.items() if not m.unsupported]
            raise UserError(f"{engine} has no {self.label} (--method {self.name}){why}; it runs on "
                            f"{', '.join(able) or 'no engine dflashbench drives'}: drop {self.name} from --method, "
                            "or pick another --backend")  # fmt: skip
        return found

    def runs_on(self, engine: str) -> bool:
        found = self.engines.get(engine)  # type: ignore[call-overload]
        return found is not None and not found.unsupported


class MethodTable(_Strict):
    methods: list[MethodRecord]


@functools.cache
def records() -> dict[Method, MethodRecord]:
    """Every method's record, in the file's order (the order reports list methods in)."""
    try:
        table = MethodTable.model_validate(tomllib.loads(METHODS_FILE.read_text()))
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
        raise UserError(f"method records {METHODS_FILE}: {exc}") from None
    return {Method(r.name): r for r in table.methods}


def record(method: Method | str) -> MethodRecord:
    """The method's record; an arm's (``dflash-k3``) is its method's."""
    return records()[Method.parse(str(method)).base]


def label(method: Method | str) -> str:
    """The method's name as reports print it (``DFlash``, ``n-gram``); an unknown name as given."""
    try:
        parsed = Method.parse(str(method))
        return record(parsed).label + (f"-{parsed.variant}" if parsed.variant else "")
    except ValueError:
        return str(method)


def drafter_methods() -> tuple[Method, ...]:
    """The methods that take a second checkpoint (``--draft``)."""
    return tuple(m for m, r in records().items() if r.needs_draft)


def method_of_architecture(architectures: list[str] | tuple[str, ...]) -> Method | None:
    """The drafter method whose checkpoints carry one of ``architectures`` (config.json), else ``None``."""
    for method, rec in records().items():
        if set(rec.draft_architectures) & set(architectures):
            return method
    return None


def methods_text() -> str:
    """One line per method: name, label, what it needs, the engines that run it (``dflashbench methods``-style)."""
    lines = []
    for rec in records().values():
        engines = ", ".join(f"{e} {m.since}+" for e, m in rec.engines.items() if not m.unsupported)
        lines.append(f"{rec.name:<8} {rec.label:<8} needs {rec.needs:<9} {engines}")
    return "\n".join(lines)
