"""Task accuracy: pull the final answer out of a model's output and judge it against the dataset's answer.

Pure functions, no I/O. A workload that has reference answers puts two keys in each request's metadata:
``answer`` (the reference, as the dataset states it) and ``grader`` (which rule below judges it). The load
generator grades every finished request on its *full* output text (before any size cap applies to what is
stored), so accuracy is known even for runs that keep no text (``--no-store-text``).

The rules follow the common evaluation harnesses; DFlash's own benchmark (z-lab/dflash ``dflash/benchmark.py``)
measures speed only and grades nothing, but its prompts ask every math task (GSM8K included) to "put your final
answer within \\boxed{}", and so do dflashbench's (:data:`~dflashbench.workloads.base.MATH_SUFFIX`).

``gsm8k`` - GSM8K (openai/gsm8k) and the synthetic workload's math category: a final *number*.
    Reference: the text after the last ``####`` of the dataset's ``answer`` field (:func:`gsm8k_reference`).
    Prediction, first that applies: the last number inside the last ``\\boxed{...}``; the number after the
    last ``####`` (GSM8K's own format, lm-evaluation-harness "strict-match"); the number after the last "The
    answer is"; else the last number anywhere in the text (lm-evaluation-harness "flexible-extract", regex
    ``(-?[$0-9.,]{2,})|(-?[0-9]+)``, last match). Numbers are normalised as lm-evaluation-harness's GSM8K
    tasks do (``regexes_to_ignore``: thousands commas, ``$``, a trailing ``.``, a trailing ``.0...``) and then
    compared by value, so ``18``, ``18.00``, ``$18`` and ``18.`` are all 18.
    Source: EleutherAI/lm-evaluation-harness ``lm_eval/tasks/gsm8k/gsm8k-cot-zeroshot.yaml``.

``math`` - MATH-500 (HuggingFaceH4/MATH-500): the *boxed* answer.
    Reference: the dataset's ``answer`` field (the boxed part of its solution).
    Prediction: the content of the last ``\\boxed{...}`` (or ``\\boxed x`` / ``\\fbox{...}``), braces
    matched; no boxed answer = wrong (lm-evaluation-harness ``last_boxed_only_string`` / ``remove_boxed``).
    Equivalence: both sides go through Hendrycks' MATH normalisation (:func:`normalize_math`: drop an
    enclosing ``\\text{}`` (PRM800K), line breaks, ``\\!``, ``\\left``/``\\right``, degree marks, ``\\$``, units
    after ``\\text{ ``, percent signs, spaces, and a short ``x =`` in front; ``tfrac``/``dfrac`` -> ``frac``;
    ``\\frac12`` -> ``\\frac{1}{2}``, ``\\sqrt3`` -> ``\\sqrt{3}``, ``a/b`` -> ``\\frac{a}{b}``, ``.5`` -> ``0.5``,
    ``0.5`` -> ``\\frac{1}{2}``) and are equal when the normalised strings are. One addition: two answers that
    are both plain numbers (integers, decimals, ``\\frac{a}{b}`` with integers, thousands written ``1,000``)
    are also equal when their values are, so ``0.75`` = ``\\frac{3}{4}`` and ``1,000`` = ``1000``.
    Sources: hendrycks/math ``modeling/math_equivalence.py`` (``is_equiv``), the same rule in
    EleutherAI/lm-evaluation-harness ``lm_eval/tasks/hendrycks_math/utils.py`` (its ``hendrycks_math500`` task
    reads this dataset), and openai/prm800k ``grading/math_normalize.py`` (the ``\\text{}`` step).

``aime`` - AIME 2025 (MathArena/aime_2025): the boxed answer, an integer 0-999.
    Prediction as for ``math``, normalised the same way, then read as an integer (``033`` = ``33``); anything
    that is not an integer is wrong. Reference: the dataset's integer ``answer``.

HumanEval and MBPP are not graded (no pass@1): that needs running the model's code, and dflashbench cannot
promise a sandbox without network access on every machine it runs on. They are compared by agreement only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

GRADERS = ("gsm8k", "math", "aime")


@dataclass(frozen=True, slots=True)
class Grade:
    """The answer found in an output (``None``: none found) and whether it equals the reference."""

    answer: str | None
    correct: bool


def grade(grader: str, output: str, reference: object) -> Grade:
    """Judge ``output`` against ``reference`` with the rule named ``grader`` (one of :data:`GRADERS`)."""
    if grader == "gsm8k":
        found = extract_number(output)
        ref = normalize_number(str(reference))
        return Grade(found, found is not None and ref is not None and _value(found) == _value(ref))
    if grader == "math":
        found = last_boxed(output)
        return Grade(found, found is not None and math_equal(found, str(reference)))
    if grader == "aime":
        found = last_boxed(output)
        mine, ref = _integer(found), _integer(str(reference))
        return Grade(found, mine is not None and mine == ref)
    raise ValueError(f"unknown grader {grader!r}; choose one of: {', '.join(GRADERS)}")


# --- GSM8K: a final number -----------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?[$0-9.,]{2,}|-?[0-9]+")  # lm-evaluation-harness gsm8k flexible-extract
_STRICT = re.compile(r"####\s*(-?[$0-9.,]+)")
_THE_ANSWER = re.compile(r"[Tt]he (?:final )?answer is[:\s]*\$?\s*(-?[$0-9.,]+)")


def gsm8k_reference(answer_field: str) -> str | None:
    """The final number of a GSM8K ``answer`` field (worked solution, then ``#### N``)."""
    if "####" not in answer_field:
        return normalize_number(answer_field)
    return normalize_number(answer_field.rsplit("####", 1)[1])


def extract_number(text: str) -> str | None:
    """The final number of a GSM8K-style answer (the order of rules in the module docstring), normalised."""
    boxed = last_boxed(text)
    if boxed is not None:
        numbers = _numbers(_strip_latex_text(boxed))
        if numbers:
            return numbers[-1]
    for pattern in (_STRICT, _THE_ANSWER):
        hits = [n for n in (normalize_number(m) for m in pattern.findall(text)) if n is not None]
        if hits:
            return hits[-1]
    numbers = _numbers(text)
    return numbers[-1] if numbers else None


def _numbers(text: str) -> list[str]:
    return [n for n in (normalize_number(m) for m in _NUMBER.findall(text)) if n is not None]


def normalize_number(text: str) -> str | None:
    """``" $1,234.50. "`` -> ``"1234.5"``; ``None`` when no number is left. Thousands commas, dollar signs,
    a trailing period and trailing zeros after the decimal point go (lm-evaluation-harness's GSM8K)."""
    s = text.strip().replace("$", "").replace(",", "").rstrip(".")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    if s in ("", "-") or not re.fullmatch(r"-?\d*\.?\d+", s):
        return None
    return s


def _value(number: str) -> Decimal:
    return Decimal(number)


def _strip_latex_text(s: str) -> str:
    """``18 \\text{ rolls}`` -> ``18  rolls``: drop ``\\text{...}`` wrappers and ``\\$`` / ``\\,`` spacing."""
    s = re.sub(r"\\(?:text|mbox|mathrm)\{([^{}]*)\}", r" \1 ", s)
    return s.replace("\\$", "").replace("\\,", "").replace("\\!", "").replace("{,}", ",")


# --- MATH: the boxed answer ------------------------------------------------------------------------------------


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (braces matched), or of a ``\\boxed x``
    up to the next ``$`` or line end; ``None`` when there is none or its braces never close."""
    starts = [m for m in re.finditer(r"\\(?:boxed|fbox)", text)]
    if not starts:
        return None
    m = starts[-1]
    rest = text[m.end():]
    stripped = rest.lstrip(" ")
    if not stripped.startswith("{"):
        if rest.startswith(" ") and stripped:  # "\boxed 5$": lm-evaluation-harness's space form
            return re.split(r"[$\n]", stripped, maxsplit=1)[0].strip() or None
        return None
    depth = 0
    start = len(rest) - len(stripped)
    for i in range(start, len(rest)):
        if rest[i] == "{":
            depth += 1
        elif rest[i] == "}":
            depth -= 1
            if depth == 0:
                return rest[start + 1 : i].strip()
    return None


def math_equal(a: str, b: str) -> bool:
    """Hendrycks' ``is_equiv`` on :func:`normalize_math`, plus equality of value for two plain numbers."""
    na, nb = normalize_math(a), normalize_math(b)
    if na == nb:
        return True
    va, vb = _plain_number(na), _plain_number(nb)
    return va is not None and va == vb


def normalize_math(s: str) -> str:
    """Hendrycks' MATH ``_strip_string`` (see the module docstring), reimplemented; never raises."""
    s = s.strip()
    enclosed = re.fullmatch(r"\\text\{(?P<t>.+?)\}", s)  # PRM800K: an answer that is all \text{...}
    if enclosed:
        s = enclosed.group("t").strip()
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "")
    if "\\text{ " in s:  # units: "5 \text{ cm}" -> "5 "
        s = s.split("\\text{ ", 1)[0]
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "x = 5" -> " 5", "k=3" -> "3"
        s = sides[1]
    s = _fix_sqrt(s)
    s = s.replace(" ", "")
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_a_slash_b(s)


def _fix_sqrt(s: str) -> str:
    """``\\sqrt3`` -> ``\\sqrt{3}``."""
    head, *parts = s.split("\\sqrt")
    out = head
    for part in parts:
        out += "\\sqrt" + (part if not part or part[0] == "{" else "{" + part[0] + "}" + part[1:])
    return out


def _fix_fracs(s: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1b`` -> ``\\frac{1}{b}``, ``\\frac1{72}`` -> ``\\frac{1}{72}``."""
    head, *parts = s.split("\\frac")
    out = head
    for part in parts:
        out += "\\frac"
        if part.startswith("{"):
            out += part
        elif len(part) < 2:
            return s  # "\frac" with too little after it: leave the whole string alone, as Hendrycks does
        elif part[1] != "{":
            out += "{" + part[0] + "}{" + part[1] + "}" + part[2:]
        else:
            out += "{" + part[0] + "}" + part[1:]
    return out


def _fix_a_slash_b(s: str) -> str:
    """``3/4`` -> ``\\frac{3}{4}`` (integers only, nothing else around them)."""
    m = re.fullmatch(r"(-?\d+)/(\d+)", s)
    if not m or s != f"{int(m.group(1))}/{int(m.group(2))}":
        return s
    return f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}"


def _plain_number(s: str) -> Fraction | None:
    """The value of a normalised answer that is just a number: ``-12``, ``0.75``, ``1,000``, ``\\frac{3}{4}``,
    ``-\\frac{3}{4}``; ``None`` for anything else (``1,2`` is a pair, not twelve)."""
    s = s.replace("{,}", ",")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    if re.fullmatch(r"-?(\d+\.?\d*|\.\d+)", s):
        try:
            return Fraction(Decimal(s))
        except (InvalidOperation, ValueError):
            return None
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", s)
    if m and int(m.group(3)) != 0:
        value = Fraction(int(m.group(2)), int(m.group(3)))
        return -value if m.group(1) else value
    return None


def _integer(s: str | None) -> int | None:
    """An AIME answer as an integer (``033`` -> 33), after MATH normalisation; ``None`` if not an integer."""
    if s is None:
        return None
    n = normalize_math(s)
    value = _plain_number(n)
    if value is None or value.denominator != 1:
        return None
    return int(value)
