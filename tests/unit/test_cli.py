"""The command line's surface: version, help, ``python -m raysub``, and no ray on the start-up path."""

import subprocess
import sys

from click.testing import CliRunner

from raysub import __version__
from raysub.cli import cli


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"raysub, version {__version__}\n"


def test_help_shows_an_example() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "Usage: raysub" in result.output
    assert "Example:" in result.output


def test_python_dash_m_runs_the_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "raysub", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout == f"raysub, version {__version__}\n"


def test_importing_the_cli_does_not_import_ray() -> None:
    code = (
        "import sys, raysub.cli; print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "[]\n"
