"""Suite files: every shipped suite validates; broken ones fail naming file and key; include; CLI overrides;
published figures; the suites ship inside an installed package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.errors import UserError
from dflashbench.plan.published import load_published, published_ids
from dflashbench.plan.suite_overrides import apply_overrides
from dflashbench.plan.suites import DEFAULT_SUITE, Suite, list_suites, load_suite
from dflashbench.types import Method

ROOT = Path(__file__).resolve().parent.parents[1]
SHIPPED = sorted((ROOT / "suites").glob("*.toml"))

MINIMAL = """\
methods = ["ar", "dflash"]
model = "Qwen/Qwen3-8B"
concurrency = [1, 2]
[drafts]
dflash = "z-lab/Qwen3-8B-DFlash-b16"
[[workloads]]
name = "gsm8k"
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def validate(*args: str):
    return CliRunner().invoke(app, ["suites", "validate", *args])


def test_every_shipped_suite_validates():
    result = validate()
    assert result.exit_code == 0, result.output
    assert f"{len(SHIPPED)} valid, 0 invalid" in result.output
    assert len(SHIPPED) >= 25  # demo, 11 SPEED-Bench categories, 5 tiers, GSM8K, MATH-500, reproductions A-E


def test_minimal_suite_validates(tmp_path):
    result = validate(str(write(tmp_path, "ok.toml", MINIMAL)))
    assert result.exit_code == 0, result.output
    assert "1 valid, 0 invalid" in result.output


BROKEN = [
    ("unknown key", "bogus = 1\n" + MINIMAL, "key 'bogus': unknown key"),
    ("unknown key in a workload", MINIMAL + "colour = 'red'\n", "key 'workloads[0] (gsm8k).colour': unknown key"),
    ("wrong type", MINIMAL.replace("concurrency = [1, 2]", 'concurrency = "many"'),
     "key 'concurrency': Input should be a valid list (got 'many')"),
    ("wrong type in a workload", MINIMAL + "max_tokens = 'lots'\n", "key 'workloads[0] (gsm8k).max_tokens'"),
    ("missing include", 'include = "nope.toml"\n' + MINIMAL, "key 'include': included file nope.toml not found"),
    ("bad method name", MINIMAL.replace('"ar", "dflash"', '"ar", "dflsh"'),
     "key 'methods[1]': 'dflsh' is not a method; choose one of: ar, eagle3, dflash"),
    ("bad method in drafts", MINIMAL.replace("[drafts]", "[drafts]\nmedusa = 'x'"),
     "key 'drafts.medusa': 'medusa' is not a method"),
    ("concurrency 0", MINIMAL.replace("[1, 2]", "[0, 2]"), "key 'concurrency': concurrency must be 1 or more, got 0"),
    ("duplicate concurrency", MINIMAL.replace("[1, 2]", "[2, 2]"), "key 'concurrency': concurrency has duplicates"),
    ("no methods", MINIMAL.replace('["ar", "dflash"]', "[]"), "key 'methods': List should have at least 1 item"),
    ("missing model", MINIMAL.replace('model = "Qwen/Qwen3-8B"\n', ""), "key 'model': required key is missing"),
    ("no workloads", MINIMAL.split("[[workloads]]")[0], "key 'workloads': required key is missing"),
    ("missing draft", MINIMAL.replace('methods = ["ar", "dflash"]', 'methods = ["ar", "eagle3"]')
     .replace('model = "Qwen/Qwen3-8B"', 'model = "my-org/unregistered"'),
     "my-org/unregistered is not in the model registry, so eagle3 needs a draft: add drafts.eagle3 = "),
    ("draft for ar", MINIMAL.replace("[drafts]", "[drafts]\nar = 'x'"), "drafts.ar: AR takes no draft checkpoint"),
    ("zero max_tokens", MINIMAL + "max_tokens = 0\n", "key 'workloads[0] (gsm8k).max_tokens': Input should be greater"),
    ("negative temperature", "temperature = -1.0\n" + MINIMAL, "key 'temperature'"),
    ("unknown backend", 'backend = "vlm"\n' + MINIMAL, "key 'backend': unknown backend 'vlm'"),
    ("unknown workload", MINIMAL.replace('name = "gsm8k"', 'name = "gsm9k"'),
     "key 'workloads[0]': unknown workload 'gsm9k'. Did you mean 'gsm8k'?"),
    ("unknown config", MINIMAL.replace('name = "gsm8k"', 'name = "speed-bench"\nconfig = "throughput_4k"'),
     "unknown config 'throughput_4k'"),
    ("unknown category", MINIMAL.replace('name = "gsm8k"', 'name = "speed-bench"\ncategories = ["codin"]'),
     "unknown category 'codin'. Did you mean 'coding'?"),
    ("unknown published id", 'published = ["no-such-figure"]\n' + MINIMAL,
     "key 'published': no suites/published file for no-such-figure"),
    ("source_file set by hand", 'source_file = "x"\n' + MINIMAL, "key 'source_file': set by dflashbench"),
    ("extra_args key", MINIMAL.replace("[drafts]", "[extra_args]\nfast = ['--x']\n[drafts]"),
     "extra_args key 'fast' is neither a method nor 'all'"),
    ("spec tokens for ar", MINIMAL.replace("[drafts]", "[num_speculative_tokens]\nar = 3\n[drafts]"),
     "ar drafts nothing"),
    ("not TOML", "methods = [\n", "not valid TOML"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "text", "message"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_suite_fails_naming_file_and_key(tmp_path, case, text, message):
    path = write(tmp_path, "broken.toml", text)
    result = validate(str(path))
    assert result.exit_code == 1
    assert f"FAIL  {path}" in result.output
    assert message in result.output
    assert "0 valid, 1 invalid" in result.output


def test_validate_reports_each_file(tmp_path):
    good = write(tmp_path, "good.toml", MINIMAL)
    bad = write(tmp_path, "bad.toml", MINIMAL + "bogus = 1\n")
    result = validate(str(good), str(bad))
    assert result.exit_code == 1
    assert f"ok    {good}" in result.output and f"FAIL  {bad}" in result.output
    assert "1 valid, 1 invalid" in result.output


def test_include_cycle_is_an_error(tmp_path):
    write(tmp_path, "a.toml", 'include = "b.toml"\n' + MINIMAL)
    write(tmp_path, "b.toml", 'include = "a.toml"\n')
    with pytest.raises(UserError, match="key 'include': include cycle"):
        load_suite(str(tmp_path / "a.toml"))


def test_include_merges_tables_and_the_including_file_wins(tmp_path):
    (tmp_path / "inc").mkdir()
    write(tmp_path / "inc", "base.toml", """\
        backend = "sglang"
        methods = ["ar", "eagle3", "dflash"]
        model = "Qwen/Qwen3-8B"
        concurrency = [1, 2, 4, 8]
        max_tokens = 512
        [drafts]
        dflash = "z-lab/Qwen3-8B-DFlash-b16"
        eagle3 = "RedHatAI/Qwen3-8B-speculator.eagle3"
        [num_speculative_tokens]
        dflash = 15
        eagle3 = 3
    """)  # fmt: skip
    suite = load_suite(str(write(tmp_path, "child.toml", """\
        include = "inc/base.toml"
        concurrency = [16]
        [drafts]
        dflash = "my/drafter"
        [num_speculative_tokens]
        eagle3 = 5
        [[workloads]]
        name = "math500"
        [[workloads]]
        name = "gsm8k"
        max_tokens = 64
    """)))  # fmt: skip
    assert suite.name == "child" and suite.backend == "sglang"
    assert suite.concurrency == [16]  # lists are replaced whole
    assert suite.drafts == {Method.DFLASH: "my/drafter", Method.EAGLE3: "RedHatAI/Qwen3-8B-speculator.eagle3"}
    assert suite.num_speculative_tokens == {Method.DFLASH: 15, Method.EAGLE3: 5}
    assert [w.max_tokens for w in suite.workloads] == [512, 64]  # a workload's own value beats the suite's


def test_demo_is_the_embedded_default():
    suite = load_suite(DEFAULT_SUITE)
    assert suite.source_file.endswith("demo.toml")
    assert (suite.backend, suite.model) == ("reference", "embedded")
    assert suite.drafts == {Method.DFLASH: "embedded", Method.EAGLE3: "embedded"}
    assert suite.methods[:2] == [Method.AR, Method.DFLASH]
    assert suite.concurrency == [1, 2, 4]
    assert [(w.name, w.num_prompts, w.max_tokens) for w in suite.workloads] == [("synthetic", 32, 96)]


def test_load_by_name_or_path_and_unknown_name():
    assert load_suite("gsm8k") == load_suite(str(ROOT / "suites" / "gsm8k.toml"))
    with pytest.raises(UserError, match="unknown suite 'dem'. Did you mean 'demo'?"):
        load_suite("dem")
    with pytest.raises(UserError, match="suite file nowhere/x.toml does not exist"):
        load_suite("nowhere/x.toml")


def test_list_suites_covers_the_required_set():
    names = {s.name for s in list_suites()}
    required = {"demo", "gsm8k", "math500"}
    required |= {f"speed-bench-{c}" for c in ("coding", "humanities", "math", "multilingual", "qa", "rag",
                                                "reasoning", "roleplay", "stem", "summarization", "writing")}
    required |= {f"speed-bench-throughput-{t}" for t in ("1k", "2k", "8k", "16k", "32k")}
    assert required <= names
    assert {n[:7] for n in names if n.startswith("repro-")} == {"repro-a", "repro-b", "repro-c", "repro-d", "repro-e"}
    assert "include" not in names and not any(n.startswith("qwen3") for n in names)  # partials are not suites


def test_reproduction_suites_name_their_figure():
    for suite in list_suites():
        if suite.name.startswith("repro-"):
            letter = suite.name.split("-")[1].upper()
            assert f"figure {letter}" in suite.description
            assert suite.published and all(p in published_ids() for p in suite.published)


def test_cli_overrides_win():
    suite = load_suite("gsm8k")
    new = apply_overrides(suite, concurrency="1,8", max_tokens=32, num_prompts=4, backend="sglang",
                          methods="ar,dflash", draft="my/drafter", temperature=None, seed=None)  # fmt: skip
    assert new.concurrency == [1, 8] and new.backend == "sglang"
    assert new.methods == [Method.AR, Method.DFLASH] and new.drafts[Method.DFLASH] == "my/drafter"
    assert [(w.max_tokens, w.num_prompts) for w in new.workloads] == [(32, 4)]
    assert new.temperature == suite.temperature and new.seed == suite.seed  # None = not given
    assert apply_overrides(suite) == suite
    both = apply_overrides(suite, draft="dflash=a,eagle3=b")
    assert (both.drafts[Method.DFLASH], both.drafts[Method.EAGLE3]) == ("a", "b")


def test_cli_override_errors():
    suite = load_suite("gsm8k")
    with pytest.raises(UserError, match=r"--draft x: eagle3 and dflash each need their own draft; write --draft "
                       r"eagle3=ID,dflash=ID, or run one of them with --method"):  # fmt: skip
        apply_overrides(load_suite("default"), draft="x")
    with pytest.raises(UserError, match="key 'concurrency': concurrency must be 1 or more, got 0"):
        apply_overrides(suite, concurrency=[0])
    with pytest.raises(UserError, match="--concurrency 1,a: expected integers"):
        apply_overrides(suite, concurrency="1,a")
    with pytest.raises(UserError, match="has workloads from several datasets"):
        apply_overrides(load_suite("repro-a-dflash-paper"), data="/tmp/x")
    with pytest.raises(TypeError, match="not a suite setting: endpoint"):
        apply_overrides(suite, endpoint="http://x")
    assert apply_overrides(suite, data="/tmp/gsm8k").workloads[0].data == "/tmp/gsm8k"


# --- pairing messages (issue #27): what a target and a draft given together mean --------------------------------


def test_a_draft_given_with_ar_alone_is_not_used_and_says_so():
    """`sweep --method ar --model Qwen/Qwen3-8B --draft z-lab/Qwen3-8B-DFlash-b16` used to stop with "the methods []
    each need their own draft": AR runs no draft, so the draft is left out with a note naming the fix."""
    new = apply_overrides(load_suite("default"), methods="ar", model="Qwen/Qwen3-8B", draft="z-lab/Qwen3-8B-DFlash-b16")
    assert new.methods == [Method.AR] and Method.DFLASH not in new.drafts
    assert new.notes[-1] == ("--draft z-lab/Qwen3-8B-DFlash-b16 is not used: AR runs the target alone; add eagle3, dflash "
                             "or dflash2 to --method to measure a draft")  # fmt: skip


def test_model_alias_of_the_suites_own_target_keeps_its_drafts():
    """`--model qwen3-8b` on a suite whose target is `Qwen/Qwen3-8B` names the same model: nothing is replaced."""
    suite = load_suite("gsm8k")
    assert suite.model == "Qwen/Qwen3-8B" and suite.drafts  # the suite's own drafts, made for its target
    same = apply_overrides(suite, model="qwen3-8b")
    assert same.drafts == suite.drafts and not any("replaces" in n for n in same.notes)
    other = apply_overrides(suite, model="meta-llama/Llama-3.1-8B-Instruct")
    assert other.drafts == {} and any("replaces the suite's target Qwen/Qwen3-8B" in n for n in other.notes)


def test_published_figures():
    df = load_published()
    assert list(df.columns[:9]) == ["id", "source", "model", "engine", "hardware", "task", "method", "metric", "value"]
    assert set(df["id"]) == set(published_ids())
    a = load_published(["dflash-paper"])
    row = a[(a["source"].str.startswith("DFlash paper")) & (a["task"] == "GSM8K") & (a["method"] == "dflash")]
    assert dict(zip(row["metric"], row["value"], strict=True)) == {"speedup_single_stream": 5.15, "tau": 6.54}
    assert len(a[a["source"].str.startswith("DFlash paper")]) == 24  # 7 tasks + Average: EAGLE-3, DFlash, tau
    c = load_published(["nvidia-speed-bench-interactivity"])
    assert len(c) == 7 * 2 * 2 and set(c["metric"]) == {"speedup_matched_concurrency"}
    with pytest.raises(UserError, match="unknown published figures"):
        load_published(["nope"])


def test_suites_show_and_list():
    runner = CliRunner()
    shown = runner.invoke(app, ["suites", "show", "repro-e-sglang-qwen3-8b"])
    assert shown.exit_code == 0
    assert "backend      sglang" in shown.output
    assert "draft        dflash: z-lab/Qwen3-8B-DFlash-b16 (15 speculative tokens)" in shown.output
    assert "    - humaneval: 164 prompts, max_tokens 2048" in shown.output
    listed = runner.invoke(app, ["suites", "list"])
    assert listed.exit_code == 0 and any(line.startswith("demo ") for line in listed.output.splitlines())
    assert any(line.startswith("default ") and " vllm " in line for line in listed.output.splitlines())


@pytest.mark.slow
def test_suites_ship_inside_an_installed_package(tmp_path):
    """Build sdist and wheel from a copy of the project, install elsewhere, load suites with no checkout around."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "dflashbench", src / "dflashbench", ignore=ignore)
    shutil.copytree(ROOT / "suites", src / "suites", ignore=ignore)
    # source tree -> sdist (Sdist hook adds suites/) -> wheel built from the unpacked sdist (BuildPy hook).
    build_sdist = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    out = subprocess.run([sys.executable, "-c", build_sdist, str(tmp_path / "sdist")], cwd=src, check=True,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    with tarfile.open(tmp_path / "sdist" / out.stdout.strip().splitlines()[-1]) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    assert (unpacked / "suites" / "include" / "speed-bench.toml").is_file()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", str(unpacked), "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist")],
                   check=True, cwd=tmp_path, timeout=300)  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("dflashbench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for rel in ("demo.toml", "include/speed-bench.toml", "published/dflash-paper.toml"):
        assert f"dflashbench/suites_builtin/{rel}" in names
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True, timeout=300)
    code = ("from dflashbench.plan.suites import load_suite, list_suites; from dflashbench.plan.published import load_published; "
            "s = load_suite('demo'); print(s.source_file); print(load_suite('speed-bench-coding').backend); "
            "print(len(list_suites()), len(load_published()))")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("DFLASHBENCH_SUITES", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                         check=True, timeout=120)  # fmt: skip
    source, backend, counts = out.stdout.splitlines()
    assert Path(source) == site / "dflashbench" / "suites_builtin" / "demo.toml"
    assert backend == "vllm"
    assert counts == f"{len(SHIPPED)} {len(load_published())}"


def test_flags_become_a_suite_in_one_place():
    """suite_from_flags (issue #47): the suite for the backend, checked, the flags applied once; an error names the
    flag that set the bad value, and the flag table has one entry per renamed key."""
    from dflashbench.plan.suite_overrides import FLAG_NAMES, RESUMABLE, flag_for, suite_from_flags

    assert suite_from_flags(None, {}).name == "demo" and suite_from_flags(None, {"backend": "vllm"}).name == "default"
    got = suite_from_flags(None, {"concurrency": [1, 8], "methods": None, "timeout_s": 30.0})
    assert got.concurrency == [1, 8] and got.timeout_s == 30.0 and got.methods == load_suite("demo").methods
    with pytest.raises(UserError, match="--request-timeout"):
        suite_from_flags(None, {"timeout_s": -1.0})
    assert [flag_for(k) for k in RESUMABLE] == ["--request-timeout", "--ready-timeout", "--max-error-rate",
                                                "--client-processes"]  # fmt: skip
    assert set(FLAG_NAMES) <= set(Suite.model_fields)
