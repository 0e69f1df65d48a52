import subprocess
import sys

import pytest
from typer.testing import CliRunner

from dflashbench import __version__
from dflashbench.cli import app
from dflashbench.cli.common import comma_list, embedded_or, int_list, method_of, methods_of
from dflashbench.errors import UserError
from dflashbench.types import Method


def test_version_prints_package_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"dflashbench {__version__}"


def test_help_does_not_import_torch():
    code = "import sys; from dflashbench.cli import app; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- what the command groups share (dflashbench/cli/common.py) ---


def test_one_comma_list_parser_for_integers_and_methods():
    assert comma_list(" 1, 2,,3 ") == ("1", "2", "3")
    ks = int_list("--k", "3,5,8", minimum=1)
    assert ks("3, 5,8") == (3, 5, 8)
    with pytest.raises(UserError, match=r"--k 'x': expected comma-separated integers, e\.g\. 3,5,8"):
        ks("x")
    with pytest.raises(UserError, match="--k 0,2: every value must be at least 1"):
        ks("0,2")
    both = methods_of("--method", (Method.AR, Method.DFLASH))
    assert both("DFlash, ar,dflash") == (Method.DFLASH, Method.AR)  # order kept, duplicates dropped
    with pytest.raises(UserError, match="--method ar,eagle3: choose from ar, dflash"):
        both("ar,eagle3")
    one = method_of("generate", (Method.AR, Method.DFLASH))
    assert one(" AR ") is Method.AR
    with pytest.raises(UserError, match="unknown method 'beam' for generate; choose ar or dflash"):
        one("beam")


def test_the_embedded_pair_fills_in_only_what_is_not_given():
    from dflashbench.embedded import default_paths

    paths = default_paths()
    assert embedded_or("/m", {Method.DFLASH: "/d"}) == ("/m", {Method.DFLASH: "/d"})
    assert embedded_or("/m") == ("/m", {})  # nothing asked for: the embedded pair is not even looked up
    assert embedded_or(None, {Method.DFLASH: None}) == (str(paths.target), {Method.DFLASH: str(paths.dflash)})
    assert embedded_or("/m", {Method.DFLASH: None}) == ("/m", {Method.DFLASH: str(paths.dflash)})


def test_an_option_parser_error_is_one_line_before_any_work():
    """Parsers run while the command line is read; the root command turns their errors into one line."""
    for args, line in (
        (["bench", "decoder", "--block-size", "1"], "error: --block-size must be at least 2 (got 1)"),
        (["bench", "drafting", "--k", "3,x"], "error: --k '3,x': expected comma-separated integers, e.g. 3,5,8"),
        (["generate", "--prompt", "hi", "--method", "eagle3"],
         "error: unknown method 'eagle3' for generate; choose ar, dflash or ngram"),
        (["sweep", "--method", "ar,medusa", "--dry-run"], "error: --method ar,medusa: choose from ar, eagle3, dflash, dflash2, mtp, ngram, suffix (or an arm of one: "
         "METHOD-kN, a draft length of N)"),
        (["compare", "a", "b", "--format", "html"], "error: unknown --format 'html'; choose text, md or json"),
    ):  # fmt: skip
        result = CliRunner().invoke(app, args)
        assert (result.exit_code, result.output.strip()) == (2, line), args


def test_resume_names_the_flags_to_drop(tmp_path):
    result = CliRunner().invoke(app, ["sweep", "--resume", str(tmp_path), "--method", "ar", "--seed", "3",
                                      "--request-timeout", "5"])  # fmt: skip
    assert result.exit_code == 2
    # what defines the measurement is named; an operational limit (--request-timeout) may change on resume
    assert "drop --method, --seed. It may change only the operational limits --request-timeout" in result.output


def test_serve_config_checks_itself(tmp_path):
    from dflashbench.reference.serving.config import ServeConfig

    cfg = ServeConfig(model=str(tmp_path), draft=str(tmp_path), method=Method.AR)
    assert (cfg.method, cfg.draft) == ("ar", None)  # a plain str, and an AR server has no draft
    for kwargs, needle in (
        ({"port": 0}, "--port must be 1..65535, got 0"),
        ({"max_batch_size": 0}, "--max-batch-size must be >= 1, got 0"),
        ({"threads": 0}, "--threads must be >= 1, got 0"),
        ({"method": "dflash", "draft": None}, "--method dflash needs --draft DIR (a DFlash drafter"),
        ({"draft": str(tmp_path / "none"), "method": "eagle3"}, "--draft"),
    ):
        with pytest.raises(UserError, match="^" + needle.replace("(", r"\(").replace(".", r"\.")):
            ServeConfig(**{"model": str(tmp_path), "draft": str(tmp_path), **kwargs})
