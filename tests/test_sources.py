"""Every source dflashbench cites is one a user can open (issue 52, item 3).

Accepted forms of an address:
- an ``https://`` URL, with its revision where the address has one (a GitHub file at a tag or commit, not a branch);
- ``owner/repo@rev:path`` (optionally ``#Lnn``), e.g. ``NVIDIA/TensorRT-LLM@4c05a74891e4:tensorrt_llm/commands/serve.py``;
- in the GPU table only, a path of this repository that exists (a fixture the number was read from).
Every ``source`` and per-fact ``sources`` value in the model registry carries at least one URL or owner/repo@rev:path;
nothing in the package, docs, suites, tools or tests cites a look-up store by id ("search index id N", "index id",
"search id", a bare id in brackets). A fact whose address could not be recovered is named in the entry's
``unverified`` list instead.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from dflashbench.plan.gpus import GPU_MODELS
from dflashbench.plan.models import REGISTRY_FILE, registry, show_text

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("dflashbench", "docs", "suites", "tools", "tests", "README.md", "noxfile.py", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".toml", ".md", ".txt", ".yaml", ".yml", ".j2", ".html", ".json", ".cfg", ".ini", ".sh", ".rst"}

# What a reader cannot follow: an id into a private look-up store, in any wording.
UNFOLLOWABLE = re.compile(
    r"""
      search[\s_-]*index                                   # "search index id N", "search index ids N, M", "... of X"
    | \bindex[\s_-]+ids?\b                                 # "index id N"
    | \bsearch[\s_-]+ids?\b                                # "search id N"
    | \b(?:doc|document|file|stored|store|corpus|excerpt)[\s_-]+ids?\s*[:=#]?\s*\d   # "doc id 123", "file id: 9"
    | \bids?\s*[:=#]?\s*\(?\d{6,12}\b                      # "id 58668257119", "ids 6545265964, 52910062108", "id=N"
    | \(\s*\d{9,12}\s*\)                                   # a bare id in brackets: "(58668257119)"
    | \bread_file\b | \bfind_string\b                      # the look-up tools, named instead of what they returned
    """,
    re.IGNORECASE | re.VERBOSE,
)
URL = re.compile(r"https://[^\s\"'<>]+")
REPO_AT_REV = re.compile(r"\b[A-Za-z0-9][\w.-]*/[\w.-]+@[\w.+-]+:[\w./-]+")
GITHUB_FILE = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/(?:blob|tree)/([^/\s]+)/")
REPO_ROOT_THEN_PATH = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+ [\w./-]+\.\w+")  # "https://github.com/o/r a/b.py"
BRANCHES = {"main", "master", "head", "develop", "dev", "nightly"}


def scanned_files() -> list[Path]:
    files = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts]
    return [f for f in files if f.resolve() != Path(__file__).resolve()]


def unfollowable(text: str) -> list[str]:
    return [m.group(0) for m in UNFOLLOWABLE.finditer(text)]


def address_problems(text: str, *, in_repo_paths: bool = False) -> list[str]:
    """Why ``text`` is not a source a user can open ([] when it is)."""
    problems = [f"cites {hit!r}" for hit in unfollowable(text)]
    has_address = bool(URL.search(text) or REPO_AT_REV.search(text))
    if not has_address and in_repo_paths:
        has_address = any((ROOT / p).is_file() for p in re.findall(r"\b(?:dflashbench|tests|docs)/[\w./-]+\.\w+", text))
    if not has_address:
        problems.append("no address (an https URL or owner/repo@rev:path)")
    problems += [f"a GitHub file at branch {rev!r}, not a tag or commit" for rev in GITHUB_FILE.findall(text)
                 if rev.lower() in BRANCHES]
    problems += [f"{hit!r}: a repository and a path without the revision" for hit in REPO_ROOT_THEN_PATH.findall(text)]
    return problems


def registry_sources() -> list[tuple[str, str]]:
    """(where, text) of every ``source`` and per-fact ``sources`` value in dflashbench/data/models.toml."""
    found: list[tuple[str, str]] = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "source" and isinstance(value, str):
                    found.append((f"{where}.source", value))
                elif key == "sources" and isinstance(value, dict):
                    found.extend((f"{where}.sources.{fact}", text) for fact, text in value.items())
                else:
                    walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for item in node:
                walk(item, f"{where}[{item.get('name', '?') if isinstance(item, dict) else '?'}]")

    walk(tomllib.loads(REGISTRY_FILE.read_text()), "models.toml")
    return found


@pytest.mark.parametrize("text", [
    "head_dim 128 (search index id 58668257119)",
    "(search index ids 6545265964, 52910062108)",
    "a repo snapshot's notes, search index id of EchoCog/gpt-oss-20b docs/x.md",
    "xinference's model page, search index of doc/source/models/builtin/llm/qwen3.5.rst",
    "the 'Search-Index' entry 12",
    "stored under index id 4219957788",
    "see search id 7019226376",
    "a public note (58668257119)",
    "the GB200 trays (id 68295161620)",
    "doc id: 77",
    "read it with read_file(id=6737105653)",
])
def test_every_unfollowable_form_is_caught(text):
    assert unfollowable(text), text


@pytest.mark.parametrize("text", [
    "https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/config.py#L120",
    "NVIDIA/TensorRT-LLM@4c05a74891e4:tensorrt_llm/commands/serve.py",
    '"--- [1/2] id=00000000000000000000000000000003 category=writing"',  # a request id in a test
    "assert bytes == 17_520_656_384",
    "79.6474609375 GiB",
])
def test_followable_text_is_not_caught(text):
    assert not unfollowable(text), text


def test_nothing_in_the_package_docs_suites_or_tests_cites_a_lookup_id():
    hits = []
    for path in scanned_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            hits += [f"{path.relative_to(ROOT)}:{number}: {hit!r}" for hit in unfollowable(line)]
    assert not hits, f"{len(hits)} sources a user cannot follow:\n" + "\n".join(hits[:40])


def test_every_registry_source_is_an_address():
    sources = registry_sources()
    assert len(sources) > 150  # every entry's target, drafter, head, chat, recipes, KV facts
    bad = [f"{where}: {'; '.join(problems)}\n    {text[:160]}"
           for where, text in sources if (problems := address_problems(text))]
    assert not bad, f"{len(bad)} registry sources a user cannot open:\n" + "\n".join(bad)


def test_every_gpu_source_is_an_address():
    bad = [f"{gpu.name}.{field}: {'; '.join(problems)}"
           for gpu in GPU_MODELS.values() for field in ("source", "node_source")
           if (problems := address_problems(getattr(gpu, field), in_repo_paths=True))]
    assert not bad, "\n".join(bad)


def test_the_address_check_fails_on_what_it_should():
    assert address_problems("the same card")  # no address at all
    assert address_problems("https://github.com/z-lab/dflash README.md @44947fb")  # repository, then a path
    assert address_problems("https://github.com/o/r/blob/main/x.py")  # a moving branch
    assert address_problems("https://huggingface.co/o/m (search index id 55401844299)")
    assert not address_problems("https://github.com/o/r/blob/44947fb/README.md (supported-models table)")
    assert not address_problems("the drafter's config.json (https://huggingface.co/z-lab/X/blob/main/config.json)")
    assert not address_problems("NVML total (tests/fixtures/nvml-h100-dflash-c4.jsonl)", in_repo_paths=True)


@pytest.mark.parametrize("entry", registry().models, ids=lambda e: e.name)
def test_models_show_prints_every_source_of_the_entry(entry):
    shown = show_text(entry)
    toml_entry = next(m for m in tomllib.loads(REGISTRY_FILE.read_text())["models"] if m["name"] == entry.name)
    texts = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                texts.extend([value] if key == "source" else value.values() if key == "sources" else [])
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toml_entry)
    missing = [text for text in texts if text not in shown]
    assert texts and not missing, f"models show {entry.name} leaves out:\n" + "\n".join(missing)
