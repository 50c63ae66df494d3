"""The command line's surface: version, help, ``python -m raysub``, and no ray on the start-up path."""

import subprocess
import sys
from pathlib import Path

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


def test_the_cli_startup_benchmark_runs() -> None:
    # Its timing target is for the table it prints, not for this test: this keeps it working, and no
    # command it times may import ray.
    out = subprocess.run(
        [sys.executable, "benchmarks/cli_startup.py", "--repeats", "1"],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    rows = out.stdout.splitlines()[1:]
    commands = ["raysub --help", "raysub render --nodes 64", "raysub status"]
    assert [row.split("  ")[0] for row in rows] == commands
    assert all(row.endswith(" no") for row in rows), out.stdout
