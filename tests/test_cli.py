import subprocess
import sys

from typer.testing import CliRunner

from dflashbench import __version__
from dflashbench.cli import app


def test_version_prints_package_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"dflashbench {__version__}"


def test_help_does_not_import_torch():
    code = "import sys; from dflashbench.cli import app; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
